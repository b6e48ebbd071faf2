"""The drafter protocol of the torch engine, its draft tree, and the path and lookup drafters.

Data flow (`verispec.empirical.engine`): drafter.draft(rows) -> `DraftTree` -> ONE target tree
forward -> verifier -> drafter.accept(tree, verdict) (the draft model's KV keeps the accepted
nodes it has run; the rest, at most one token, and the new token are fed next iteration).

A `DraftTree` per row (B rows, N node slots, node 0 = the root = the last emitted token, which the
target cache does not hold yet):

- tokens int64 [B, N]; parents int64 [B, N] (-1 at the root, parents[b, j] < j); real bool [B, N]
  (False: padding, rows draft trees of different sizes);
- q float64 [B, N, V] or None: q[b, j] = the law node j's children were drawn from (zero rows
  where no child was drawn); `point_mass=True` with q None: deterministic drafts (prompt lookup,
  phrase pools: q = one-hot of each drafted child);
- paths int64 [B, K, L] or None: node id of path k's (d+1)-th token (-1 past its end) for drafters
  of K ordered paths (the layout of the multi-path rules); verifiable bool [B, N] or None;
- chain (a Python bool): every row's tree is one chain, node j the child of node j - 1, all real
  (verifiers slice it, a static KV keeps its accepted prefix without moving it); depth (an int or
  None): a bound of the tree's depth known to the host (verifiers loop that many steps and read
  no value back to find it); full (a Python bool): every path of `paths` has its full length L.

Drafters here (twins of `verispec.reference.drafters`): `PathsDrafter` (K draft-model paths),
`PromptLookupDrafter` (n-gram point masses), `RootOnly` (no draft). Trees: `drafters.tree`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..kv import new_kv
from .lookup import prompt_lookup_batch
from ..uniforms import categorical
from ..verifiers.common import representatives

__all__ = ["DraftTree", "Drafter", "ModelDrafter", "PathsDrafter", "PromptLookupDrafter", "RootOnly",
           "probabilities", "next_token_law", "draw"]


def probabilities(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """float64 next-token distributions [..., V] from logits [..., V].

    T = 0: one-hot on the argmax (ties to the lowest id, as `verispec.reference.models.temperature`);
    T > 0: softmax(logits / T).
    """
    return next_token_law(logits, temperature)[0]


def next_token_law(logits: torch.Tensor, temperature: float):
    """(`probabilities(logits, T)` [..., V], the argmax ids [...] at T = 0, else None).

    At T = 0 the law is one-hot, and the inverse-CDF draw (`uniforms.categorical`) from a one-hot
    row returns its hot id at every u in [0, 1): `draw` then skips the vocabulary-wide cumsum.
    """
    if temperature == 0:
        # max(dim).indices is argmax (the first maximal id on ties, as documented for both), and
        # cheaper than torch.argmax over a large vocabulary on CPU.
        index = logits.max(-1, keepdim=True).indices
        q = torch.zeros(logits.shape, dtype=torch.float64, device=logits.device).scatter_(-1, index, 1.0)
        return q, index.squeeze(-1)
    scaled = logits.double()  # [..., V]; a copy unless the logits already were float64
    if temperature != 1:  # x / 1 == x exactly: no pass over the vocabulary for it
        scaled = scaled / temperature if scaled is logits else scaled.div_(temperature)
    return torch.softmax(scaled, dim=-1), None


def draw(q: torch.Tensor, u: torch.Tensor, greedy: torch.Tensor | None) -> torch.Tensor:
    """One token per row from q [..., V] at uniforms u [...]: `greedy` [...] (the hot ids of a
    one-hot q, from `next_token_law`) when given, which is what `categorical(q, u)` returns."""
    return greedy if greedy is not None else categorical(q, u)


@dataclass
class DraftTree:
    """One draft tree per row in node layout (module docstring for every field)."""

    tokens: torch.Tensor
    parents: torch.Tensor
    real: torch.Tensor
    q: torch.Tensor | None = None
    point_mass: bool = False
    paths: torch.Tensor | None = None
    verifiable: torch.Tensor | None = None
    info: dict = field(default_factory=dict)  # per-row drafting logs, e.g. the tree's predicted E[A]
    chain: bool = False
    depth: int | None = None
    full: bool = False

    def check(self, vocab_size: int, batch: int, needs_q: bool = False) -> None:
        """ValueError naming the field unless this is a well-formed tree for `batch` rows."""
        t, par, real = self.tokens, self.parents, self.real
        if not all(isinstance(x, torch.Tensor) for x in (t, par, real)) or t.dim() != 2:
            raise ValueError("draft tree: tokens, parents and real must be [B, N] tensors")
        B, N = t.shape
        if B != batch or N < 1 or tuple(par.shape) != (B, N) or tuple(real.shape) != (B, N):
            raise ValueError(f"draft tree: tokens, parents, real must share shape [{batch}, N >= 1], got "
                             f"{tuple(t.shape)}, {tuple(par.shape)}, {tuple(real.shape)}")
        if real.dtype != torch.bool or not bool(real[:, 0].all()) or bool((par[:, 0] != -1).any()):
            raise ValueError("draft tree: node 0 must be a real root (parents[:, 0] == -1) in every row")
        j = torch.arange(1, N, device=t.device)
        if bool((real[:, 1:] & ((par[:, 1:] < 0) | (par[:, 1:] >= j))).any()):
            raise ValueError("draft tree: parents[b, j] must lie in [0, j) for every real node j > 0")
        if bool((real & ((t < 0) | (t >= vocab_size))).any()):
            raise ValueError(f"draft tree: token ids must lie in [0, {vocab_size})")
        if bool((real[:, 1:] & ~real.gather(1, par[:, 1:].clamp(min=0))).any()):
            raise ValueError("draft tree: a real node hangs below a padding node")
        if self.q is None and not self.point_mass and needs_q:
            raise ValueError("draft tree: the verifier reads q but the drafter kept none "
                             "(q is None and point_mass is False)")
        if self.q is not None and tuple(self.q.shape) != (B, N, vocab_size):
            raise ValueError(f"draft tree: q must have shape [{B}, {N}, {vocab_size}], got {tuple(self.q.shape)}")
        if self.paths is not None and (self.paths.dim() != 3 or self.paths.shape[0] != B
                                       or bool((self.paths >= N).any())):
            raise ValueError(f"draft tree: paths must be [{B}, K, L] node ids < {N} (-1 past a path's end)")


class Drafter:
    """The drafter protocol of the engine (every method is a drafter + a verifier).

    `start(draft, tokens, lengths, temperature, source, storage)` once per call (tokens [B, n]
    right-padded prompts, lengths [B]); `draft(rows)` -> `DraftTree` (rows: the engine's `Rows`:
    last [B], ctx [B, W], ctx_len [B]); `observe(logits, tree, rows)` after the target forward;
    `accept(tree, verdict)` after verification; `select(rows)` when rows finish; `logs()` -> dict
    of per-iteration logs; `draft_rows` counts the token rows fed to the draft model.

    Flags: `trusted` (the engine checks the trees of a drafter that is not, each iteration,
    reading values back); `capturable` (its `draft`, `observe`, `accept` read no value back, keep
    their state in tensor attributes of the drafter and its `kv` and bump only integer counters,
    so the engine may capture them as CUDA graphs, `verispec.empirical.speedups.graphs`), with
    `capture_key()` the settings that change what `draft` runs (shapes aside).
    """

    needs_model = False
    draft_rows = 0
    trusted = False
    capturable = False

    def capture_key(self) -> tuple:
        """What, besides the state's shapes, tells this drafter's captured steps apart."""
        return ()

    def start(self, draft, tokens, lengths, temperature, source, storage="padded") -> None:
        self.temperature, self.source = temperature, source

    def draft(self, rows) -> DraftTree:  # pragma: no cover - abstract
        raise NotImplementedError

    def observe(self, logits: torch.Tensor, tree: DraftTree, rows) -> None:
        """See the target's logits [B, N, V] of the tree forward (phrase pools learn from them)."""

    def accept(self, tree: DraftTree, verdict) -> None:
        """Update the drafter's state with the verdict (`verifiers.nodes.Verdict`)."""

    def select(self, rows: torch.Tensor) -> None:
        """Keep only batch rows `rows`."""

    def logs(self) -> dict:
        return {}


class ModelDrafter(Drafter):
    """A drafter with a draft model and its KV state: the emitted tokens the draft cache lacks
    ("pending": 1, or 2 after a full acceptance) are fed first, giving the root's q; subclasses
    grow the tree below the root and record in `self.fed` [B, N] each node's id in the draft's
    uncommitted forest (-1: never fed). `accept` keeps the pending nodes and the accepted nodes
    the draft ran; the accepted node it did not run (at most one) and the new token become pending."""

    needs_model = True
    trusted = True
    draft_vocab = None  # a `draftvocab.DraftVocab` (FR-Spec): the draft's logits over S only
    chain = False  # every tree is a chain: the draft cache keeps a prefix of what it ran (no move)
    policy = None  # a `speedups.policy` rule choosing the draft length / node budget per iteration

    def start(self, draft, tokens, lengths, temperature, source, storage="padded") -> None:
        super().start(draft, tokens, lengths, temperature, source, storage)
        if self.draft_vocab is not None:
            draft = draft.with_head_subset(self.draft_vocab.subset(draft.vocab_size, tokens, lengths))
        self.model = draft
        self.kv = new_kv(storage, draft, tokens.shape[0])
        self.kv.prefill(tokens, lengths - 1)  # every prompt token but the last
        last = tokens.gather(1, (lengths - 1).unsqueeze(1)).squeeze(1)  # [B]
        self.pending = torch.stack([last, last], dim=1)  # [B, 2]
        self.pending_count = torch.ones_like(last)  # [B]
        if self.policy is not None:
            self.policy.start(tokens.shape[0], tokens.device)

    def _feed_pending(self, temperature: float):
        """ONE draft forward of the pending tokens -> (q at the root [B, V], root's forest id [B])."""
        B, device = self.pending.shape[0], self.pending.device
        column = torch.arange(2, device=device)
        parents = (column - 1).expand(B, 2)  # [B, 2]: a chain (made on the device: no host data)
        real = column < self.pending_count.unsqueeze(1)  # [B, 2]
        logits = self.kv.append(self.pending, parents, real)  # [B, 2, V]
        self.draft_rows += 2
        root = self.pending_count - 1
        q_root, self._root_greedy = next_token_law(logits[torch.arange(B, device=device), root], temperature)
        return q_root, root

    def _commit_fed(self, nodes: torch.Tensor) -> torch.Tensor:
        """Keep in the draft cache the pending tokens (fed this iteration) and the accepted nodes
        nodes [B, D] (-1 padded) it ran; returns their forest ids [B, D] (-1: not run)."""
        fed = torch.where(nodes >= 0, self.fed.gather(1, nodes.clamp(min=0)), -1)  # [B, D]
        (B, P), m = self.pending.shape, self.kv.uncommitted
        keep = torch.zeros(B, m + 1, dtype=torch.bool, device=nodes.device)  # column m absorbs -1
        keep[:, :P] = torch.arange(P, device=nodes.device) < self.pending_count.unsqueeze(1)
        keep.scatter_(1, torch.where(fed >= 0, fed, m), True)
        self.kv.commit(keep[:, :m], prefix=self.chain)
        return fed

    def accept(self, tree: DraftTree, verdict) -> None:
        nodes, tau, y = verdict.nodes, verdict.tau, verdict.token  # [B, D], [B], [B]
        fed = self._commit_fed(nodes)
        missing = tau - (fed >= 0).sum(1)  # accepted tokens the draft never ran: 0 or 1 (tested)
        rows = torch.arange(nodes.shape[0], device=nodes.device)
        deepest = tree.tokens[rows, nodes[rows, (tau - 1).clamp(min=0)].clamp(min=0)]  # [B]
        self.pending = torch.stack([torch.where(missing == 1, deepest, y), y], dim=1)
        self.pending_count = 1 + missing
        if self.policy is not None:
            self.policy.observe(tree, verdict)

    def select(self, rows: torch.Tensor) -> None:
        self.kv.select(rows)
        self.pending, self.pending_count = self.pending[rows], self.pending_count[rows]
        if self.policy is not None:
            self.policy.select(rows)


class PathsDrafter(ModelDrafter):
    """K paths of L tokens (`verispec.reference.drafters.iid_paths` / `chain` / `paths_without_
    replacement`): path k's depth-1 token by inverse CDF at one uniform (K uniforms per depth),
    distinct first tokens when replacement=False. Paths sharing a prefix share its node (one
    draft row, one q). Node slot of (path k, depth d) = 1 + (d - 1) K + k; only the lowest path
    through a node fills it. L draft forwards per iteration (the pending tokens, then L - 1 layers).
    """

    @property
    def capturable(self) -> bool:
        """Without a cost policy only: the policy picks each iteration's L on the host."""
        return self.policy is None

    def __init__(self, draft_length: int, num_paths: int = 1, replacement: bool = True,
                 draft_temperature: float | None = None):
        self.L, self.K, self.replacement, self.draft_temperature = draft_length, num_paths, replacement, draft_temperature
        self.chain = num_paths == 1 and replacement
        self.full_paths = replacement  # i.i.d. first tokens: every path gets L tokens (subclasses may cut them)

    def capture_key(self) -> tuple:
        return self.L, self.K, self.replacement, self.draft_temperature

    def _first_tokens(self, q_root):
        """[B, K] depth-1 tokens and lengths [B, K] (0 where q ran out of distinct tokens)."""
        B, K = q_root.shape[0], self.K
        u = self.source.take(B, K, q_root.device)
        lengths = torch.full((B, K), self.L, dtype=torch.long, device=q_root.device)
        if self.replacement:
            greedy = getattr(self, "_root_greedy", None)  # set by `_feed_pending` at draft T = 0
            greedy = None if greedy is None else greedy.unsqueeze(1).expand(B, K)
            return draw(q_root.unsqueeze(1).expand(B, K, -1), u, greedy), lengths
        tokens, drawn = _draw_without_replacement(q_root, K, u)
        return tokens, torch.where(drawn, lengths, 0)

    def _temperature(self) -> float:
        return self.temperature if self.draft_temperature is None else self.draft_temperature

    def draft(self, rows) -> DraftTree:
        Td = self._temperature()
        q_root, root = self._feed_pending(Td)  # [B, V], [B]
        L = self.L if self.policy is None else self.policy.plan(rows.ctx_len)  # the cost policy's L
        B, K, device = q_root.shape[0], self.K, q_root.device
        paths = torch.zeros(B, K, L, dtype=torch.long, device=device)
        paths[:, :, 0], lengths = self._first_tokens(q_root)
        lengths = lengths.clamp(max=L)  # [B, K]
        N, ks = 1 + K * L, torch.arange(K, device=device)
        q = torch.zeros(B, N, q_root.shape[-1], dtype=torch.float64, device=device)  # [B, N, V]
        q[:, 0] = q_root
        self.fed = torch.full((B, N), -1, dtype=torch.long, device=device)
        parent_fed = root.unsqueeze(1).expand(B, K)  # forest id of each path's last node
        for d in range(1, L):
            rep = representatives(paths[:, :, :d], lengths.clamp(max=d))[:, :, d]  # [B, K]
            is_node = (rep == ks) & (lengths >= d)  # path k owns node (k, d)
            m = self.kv.uncommitted
            logits = self.kv.append(paths[:, :, d - 1], parent_fed, is_node)  # [B, K, V]
            self.draft_rows += K
            slots = 1 + (d - 1) * K + ks  # [K]
            self.fed[:, slots] = torch.where(is_node, m + ks, -1)
            q_rows, greedy = next_token_law(logits, Td)  # [B, K, V], [B, K] or None
            if K > 1:  # a path through another path's node reads that node's q
                q_rows = q_rows.gather(1, rep.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
                greedy = None if greedy is None else greedy.gather(1, rep)
            q[:, slots] = torch.where(is_node.unsqueeze(-1), q_rows, 0.0)
            paths[:, :, d] = draw(q_rows, self.source.take(B, K, device), greedy)
            parent_fed = m + rep  # forest id of the node each path runs through
        return self._tree(rows.last, paths, lengths, q)

    def _tree(self, last, paths, lengths, q) -> DraftTree:
        """The node layout of K paths: tokens/parents/real [B, 1 + K L], paths -> node ids."""
        B, K, L = paths.shape
        device = paths.device
        rep = representatives(paths, lengths)[:, :, 1:]  # [B, K, L], owner of node (k, d)
        depth = torch.arange(1, L + 1, device=device)
        slot_of = 1 + (depth - 1).view(1, 1, L) * K + rep  # [B, K, L]: slot of path k's depth-d node
        own = (rep == torch.arange(K, device=device).view(1, K, 1)) & (depth <= lengths.unsqueeze(-1))
        parent = torch.cat([torch.zeros(B, K, 1, dtype=torch.long, device=device), slot_of[:, :, :-1]], -1)
        flat = (1 + (depth - 1).view(1, 1, L) * K + torch.arange(K, device=device).view(1, K, 1)).expand(B, K, L)

        def by_slot(values):  # [B, K, L] -> [B, 1 + K L], each owned value at its node's slot
            return values.new_zeros(B, 1 + K * L).scatter_(1, flat.reshape(B, -1), values.reshape(B, -1))

        tokens, parents, real = by_slot(torch.where(own, paths, 0)), by_slot(torch.where(own, parent, 0)), by_slot(own)
        tokens[:, 0], parents[:, 0], real[:, 0] = last, -1, True
        node_paths = torch.where(depth <= lengths.unsqueeze(-1), slot_of, -1)  # [B, K, L]
        return DraftTree(tokens, parents, real, q, paths=node_paths, chain=self.chain and K == 1, depth=L,
                         full=self.full_paths)


def _draw_without_replacement(q, K, u):
    """K distinct tokens per row by successive draws from q renormalised over unused tokens.
    q [B, V], u [B, K] -> (tokens [B, K], drawn [B, K]: False where q ran out)."""
    B = q.shape[0]
    remaining = q.clone()
    tokens = torch.zeros(B, K, dtype=torch.long, device=q.device)
    drawn = torch.zeros(B, K, dtype=torch.bool, device=q.device)
    for k in range(K):
        mass = remaining.sum(-1)  # [B]
        ok = mass > 0
        t = categorical(remaining / torch.where(ok, mass, 1).unsqueeze(1), u[:, k])
        tokens[:, k] = torch.where(ok, t, 0)
        drawn[:, k] = ok
        remaining = torch.where(ok.unsqueeze(1), remaining.scatter(1, t.unsqueeze(1), 0.0), remaining)
    return tokens, drawn


class PromptLookupDrafter(Drafter):
    """Prompt lookup (Saxena 2023; `verispec.reference.drafters.prompt_lookup`): the tokens that
    followed the latest earlier occurrence of the row's longest recurring suffix n-gram, as a
    point-mass chain of 0..L nodes (`verispec.empirical.drafters.lookup.prompt_lookup_batch`)."""

    trusted = True

    def __init__(self, draft_length: int, max_ngram: int = 3):
        self.L, self.max_ngram = draft_length, max_ngram

    def draft(self, rows) -> DraftTree:
        tokens, lengths = prompt_lookup_batch(rows.ctx, rows.ctx_len, self.max_ngram, self.L)  # [B, L], [B]
        width = int(lengths.max())
        B, device = tokens.shape[0], tokens.device
        j = torch.arange(width + 1, device=device)
        chain = torch.cat([rows.last.unsqueeze(1), tokens[:, :width]], dim=1)  # [B, 1 + l]
        real = j <= lengths.unsqueeze(1)
        paths = torch.where(j[1:] <= lengths.unsqueeze(1), j[1:], -1).unsqueeze(1)  # [B, 1, l]
        return DraftTree(chain, (j - 1).expand(B, -1), real, None, point_mass=True, paths=paths, depth=width)


class RootOnly(Drafter):
    """No draft: the tree is the root alone, so an iteration is one target forward and one draw
    from p (sample-and-follow on a root is plain decoding): target-only decoding on the engine.

    It records, per row and step, the top-1 minus top-2 logit and the runner-up token of the
    target (`logs()`: "top2_margins" float32 [B, N], "runner_up_tokens" int64 [B, N]), to tell
    near-ties apart when another decoder's greedy output diverges."""

    trusted = capturable = True
    margins = runners_up = None

    def observe(self, logits: torch.Tensor, tree: DraftTree, rows) -> None:
        if self.margins is None:  # the first step: every row is active
            B, device = rows.row_id.numel(), logits.device
            self.margins = torch.zeros(B, rows.N, dtype=torch.float32, device=device)  # [B0, N]
            self.runners_up = torch.zeros(B, rows.N, dtype=torch.long, device=device)  # [B0, N]
            self.step = torch.zeros((), dtype=torch.long, device=device)  # on the device: no host counter
        top2 = logits[:, 0].topk(2, dim=-1)  # [b, 2] at the root: the next token's logits
        at = (rows.row_id, self.step.expand_as(rows.row_id))
        self.margins.index_put_(at, (top2.values[:, 0] - top2.values[:, 1]).float())
        self.runners_up.index_put_(at, top2.indices[:, 1])
        self.step = self.step + 1

    def logs(self) -> dict:
        if self.margins is None:
            return {}
        return {"top2_margins": self.margins.cpu(), "runner_up_tokens": self.runners_up.cpu()}

    def draft(self, rows) -> DraftTree:
        B = rows.last.shape[0]
        device = rows.last.device
        return DraftTree(rows.last.unsqueeze(1), torch.full((B, 1), -1, dtype=torch.long, device=device),
                         torch.ones(B, 1, dtype=torch.bool, device=device), None, point_mass=True, chain=True,
                         depth=0)
