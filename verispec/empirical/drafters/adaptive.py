"""Cheaper drafts on the engine: adaptive chains and hybrid (n-gram or draft model) chains.

Verified by token-level speculative sampling (Leviathan et al. 2023, arXiv 2211.17192) or, with
``verifier="block"``, block verification (Sun et al. 2024, arXiv 2403.10444); lossless at every
temperature (token: for any stopping time; block: proved for fixed-length chains, checked exactly
on these ones by the reference twins `verispec.reference.adaptive.adaptive_chain` / `hybrid`).

- `AdaptiveChainDrafter`: a draft-model chain that stops after a token whose draft confidence
  falls below `confidence_threshold` (transformers' ``assistant_confidence_threshold``), with a
  per-row cap that follows the acceptance history (`SCHEDULES`).
- Guesses (``guess_length`` k > 0; bench ``g=k``): prompt-lookup tokens ride in each draft forward
  (Ouroboros' draft-side phrase check, Zhao et al. 2024, arXiv 2402.13720, exact under sampling).
- `HybridDrafter`: per row and iteration, the prompt-lookup phrase when the context has an n-gram
  match (a point-mass chain: no draft forward), the adaptive chain otherwise.

`adaptive_method` / `hybrid_method` build them as `TorchMethod`s ("adaptive", "hybrid").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...reference.deprecation import renamed_keywords
from ..torch_method import TorchMethod
from ..validation import check_int, check_positive
from ..verifiers.nodes import PathRule
from .base import DraftTree, PathsDrafter, draw, next_token_law, probabilities
from .lookup import prompt_lookup_batch

__all__ = ["AdaptiveChainDrafter", "HybridDrafter", "SCHEDULES", "VERIFIERS", "adaptive_method", "hybrid_method"]

#: Guesses come from suffix n-grams of at least this length (n = 3 then 2): a 1-gram match is a
#: weak guess, and every guessed token costs a row of the draft's forward.
GUESS_MIN_NGRAM = 2

#: Length-cap schedules: transformers' "heuristic" (+2 when every drafted token was accepted,
#: else -1) and "constant" (the cap stays at draft_length; transformers 5.x's default, with 20).
SCHEDULES = ("heuristic", "constant")


def _matches(token: torch.Tensor, guess: torch.Tensor, j: int) -> torch.Tensor:
    """bool [B]: the drawn tokens [B] equal guess j of guess [B, k] (False past the last guess),
    i.e. the guess column's logits saw exactly the drafted prefix."""
    return token == guess[:, j] if j < guess.shape[1] else torch.zeros_like(token, dtype=torch.bool)


@dataclass(frozen=True)
class _Forward:
    """ONE draft forward of the chains (`AdaptiveChainDrafter._forward`): its logits [B, P + k, V],
    m (the forest id of its column 0), P (its prefix columns), anchor [B] (the prefix column whose q
    draws first) and the guesses it carried (guess [B, k], the first glen [B] real)."""
    logits: torch.Tensor
    m: int
    P: int
    anchor: torch.Tensor
    guess: torch.Tensor
    glen: torch.Tensor


class _Chain:
    """One iteration's chains while they are drafted: paths [B, 1, L], lengths [B] (the cap, cut
    by the confidence stop), depth [B] (tokens drawn), parent [B] (forest id of the node the next
    fed token hangs below), fed [B, 1 + L] (`ModelDrafter`), the q row of every drawn token and
    one round of uniforms per depth (row b's depth-d token reads round d, however many forwards
    it took to get there: the uniforms a plain one-token-per-forward chain would read)."""

    def __init__(self, caps: torch.Tensor, L: int):
        B, device = caps.shape[0], caps.device
        self.paths = torch.zeros(B, 1, L, dtype=torch.long, device=device)
        self.lengths = caps.clone()
        self.depth = torch.zeros(B, dtype=torch.long, device=device)
        self.parent = torch.zeros(B, dtype=torch.long, device=device)
        self.fed = torch.full((B, 1 + L), -1, dtype=torch.long, device=device)
        self.q_rows, self.rounds = [], []  # [B, V] per depth; [B] uniforms per depth

    def uniforms(self, source, going: torch.Tensor) -> torch.Tensor:
        """[B] uniforms: row b's at its depth (rows not going read any)."""
        B, device = self.depth.shape[0], self.depth.device
        while len(self.rounds) <= int(self.depth[going].max()):
            self.rounds.append(source.take(B, 1, device)[:, 0])
        return torch.stack(self.rounds, dim=1).gather(1, self.depth.clamp(max=len(self.rounds) - 1).unsqueeze(1))[:, 0]

    def record(self, going: torch.Tensor, token: torch.Tensor, q: torch.Tensor) -> None:
        """Write the going rows' tokens [B] and their q [B, V] at their depths."""
        L = self.paths.shape[2]
        at = self.depth.clamp(max=L - 1).unsqueeze(1)  # [B, 1]
        self.paths[:, 0].scatter_(1, at, torch.where(going, token, self.paths[:, 0].gather(1, at)[:, 0]).unsqueeze(1))
        for d in self.depth[going].unique().tolist():
            rows = going & (self.depth == d)
            if d == len(self.q_rows):
                self.q_rows.append(q if bool(rows.all()) else torch.where(rows.unsqueeze(1), q, 0.0))
            else:
                self.q_rows[d] = torch.where(rows.unsqueeze(1), q, self.q_rows[d])

    def set_fed(self, rows: torch.Tensor, node) -> None:
        """fed[b, depth[b]] = node for the rows given: the node holding row b's last drawn token."""
        at = self.depth.clamp(max=self.fed.shape[1] - 1).unsqueeze(1)  # [B, 1]
        node = torch.as_tensor(node, device=self.fed.device).expand_as(self.depth)
        self.fed.scatter_(1, at, torch.where(rows, node, self.fed.gather(1, at)[:, 0]).unsqueeze(1))

    def q_table(self) -> torch.Tensor:
        """[B, 1 + l, V]: the drawn tokens' q rows, then zeros (the deepest node drew no child)."""
        return torch.stack(self.q_rows + [torch.zeros_like(self.q_rows[0])], dim=1)


class AdaptiveChainDrafter(PathsDrafter):
    """A draft-model chain with a confidence stop and a scheduled length cap.

    The "heuristic" schedule is transformers': +2 after an iteration that accepted every drafted
    token, -1 otherwise, within [1, max_draft_length]; a chain is also cut to the tokens its row
    still needs. The stop is decided AFTER the token is drawn and keeps it, so whether to draft
    one more token is a function of the drafted prefix, which token verification allows (a
    chain's length may be any stopping time of its own tokens). Dropping the low-confidence token
    instead would condition its law on q(x) >= confidence_threshold while the verifier divides by
    the unconditioned q: biased (`verispec.reference.adaptive` plants exactly that). The cap is
    fixed before an iteration's draws, so every iteration is the reference `adaptive_chain(cap,
    confidence_threshold)` for some cap. Confidence: q of the drawn token at the draft
    temperature; at draft temperature 0 the softmax of the draft logits at temperature 1, as transformers does.

    Guesses: a guess column's logits are the draft's next-token logits after that guess; when the
    token drawn from the previous column (with the uniform of its depth) equals the guess, the next
    token is drawn from the guess column's q in the same forward, until a draw differs from its
    guess. The chain is the same function of the uniforms as the one-token-per-forward chain (up to
    the float rounding of a wider forward). With an int8 draft the activation scale spans all rows
    of a forward, so q also depends on the guesses beside it; the guesses are a function of the
    drafted prefix, so q is still the law each token was drawn from given its prefix, which is all
    the verifiers read. Unmatched guess nodes are never committed to the draft cache.

    Args:
        draft_length: the initial cap L0 >= 1. max_draft_length: the cap's ceiling (>= L0).
        confidence_threshold: stop after a drafted token of confidence below it (0: never stop).
        schedule: one of `SCHEDULES`. draft_temperature: as `PathsDrafter` (default: T).
        guess_length: prompt-lookup tokens per draft forward (0: none; see above).
        max_ngram: the longest suffix n-gram the guesses look up.

    Logs: "chain_lengths" (tokens drafted per row and iteration), "caps" (the cap in force).
    """

    capturable = False  # each draft forward decides on the host whether a row drafts on

    @renamed_keywords(threshold="confidence_threshold")
    def __init__(self, draft_length: int, max_draft_length: int, confidence_threshold: float = 0.4,
                 schedule: str = "heuristic", draft_temperature: float | None = None, guess_length: int = 0,
                 max_ngram: int = 3):
        super().__init__(draft_length, 1, True, draft_temperature)
        self.full_paths = False  # some paths are cut short
        self.chain = False  # unmatched guess nodes are run and not kept: the kept nodes are no prefix
        self.max_length, self.schedule = max_draft_length, schedule
        self.confidence_threshold = confidence_threshold
        self.guess_length, self.max_ngram = guess_length, max_ngram
        self._lengths, self._caps = [], []

    def start(self, draft, tokens, lengths, temperature, source, storage="padded") -> None:
        super().start(draft, tokens, lengths, temperature, source, storage)
        self.cap = torch.full((tokens.shape[0],), self.L, dtype=torch.long, device=tokens.device)  # [B]
        if self.policy is not None:  # the cost policy cuts the chain; the cap is its ceiling
            self.cap.fill_(self.max_length)

    # -- drafting ---------------------------------------------------------------------------------

    def _confidence(self, logits, tokens, q) -> torch.Tensor:
        """The draft's probability of its drawn tokens [B]: their law q [B, V] (the softmax at the
        draft temperature, already computed) at draft temperature > 0, the softmax of the logits
        [B, V] at temperature 1 at draft temperature 0 (q one-hot; as transformers does)."""
        probs = q if self._temperature() > 0 else probabilities(logits, 1.0)  # [B, V]
        return probs.gather(1, tokens.unsqueeze(1)).squeeze(1)

    def _forward(self, prefix, parents, real, anchor, guess, glen):
        """ONE draft forward of prefix columns (tokens / parents in forest numbering / real: [B, P])
        then each row's guesses (guess [B, k], the first glen [B] real) hung as a chain below the
        prefix column `anchor` [B] -> the `_Forward`."""
        B, P = prefix.shape
        k, device = guess.shape[1], prefix.device
        m = self.kv.uncommitted
        j = torch.arange(k, device=device)
        guess_parents = torch.where(j == 0, m + anchor.unsqueeze(1), m + P + j - 1)  # [B, k]
        tokens = torch.cat([prefix, guess], dim=1)  # [B, P + k]
        real = torch.cat([real, j < glen.unsqueeze(1)], dim=1)  # [B, P + k]
        logits = self.kv.append(tokens, torch.cat([parents, guess_parents], dim=1), real)  # [B, P + k, V]
        self.draft_rows += int(real.sum())
        return _Forward(logits, m, P, anchor, guess, glen)

    def _guesses(self, rows, chain: "_Chain"):
        """Prompt-lookup guesses of each row's next tokens from its context plus its chain so far
        -> (guess [B, k], glen [B]); glen is cut to the tokens whose q the row still needs."""
        k = self.guess_length
        B, device = chain.depth.shape[0], chain.depth.device
        useful = (chain.lengths - chain.depth - 1).clamp(min=0)  # [B]
        if k == 0 or rows is None or not bool((useful > 0).any()):
            return torch.zeros(B, 0, dtype=torch.long, device=device), torch.zeros_like(useful)
        L = chain.paths.shape[2]
        ctx = torch.cat([rows.ctx, rows.ctx.new_zeros(B, L)], dim=1)  # [B, S + L]
        i = torch.arange(L, device=device)
        at = (rows.ctx_len.unsqueeze(1) + i).clamp(max=ctx.shape[1] - 1)  # [B, L]
        ctx.scatter_(1, at, torch.where(i < chain.depth.unsqueeze(1), chain.paths[:, 0], ctx.gather(1, at)))
        guess, found = prompt_lookup_batch(ctx, rows.ctx_len + chain.depth, self.max_ngram, k,
                                           min(GUESS_MIN_NGRAM, self.max_ngram))  # [B, k], [B]
        glen = torch.minimum(found, useful)
        return guess[:, :int(glen.max())], glen  # no column that no row fills: it would cost a row

    def _draws(self, forward: _Forward, chain: "_Chain", going) -> None:
        """Draw each going row's next tokens from `forward`: from column `anchor`'s q, then,
        while the drawn token equals the row's next guess, from that guess column's q (its
        logits saw exactly the chain drawn so far). Rows stop at the first mismatch; their next
        forward feeds the last drawn token below the column it was drawn from."""
        logits, m, P, guess, glen = forward.logits, forward.m, forward.P, forward.guess, forward.glen
        Td, B, V = self._temperature(), logits.shape[0], logits.shape[-1]
        col = forward.anchor.clone()  # [B]
        for j in range(guess.shape[1] + 1):
            if not bool(going.any()):
                break
            step = logits.gather(1, col.view(B, 1, 1).expand(B, 1, V)).squeeze(1)  # [B, V]
            q, greedy = next_token_law(step, Td)  # [B, V], [B] or None
            token = draw(q, chain.uniforms(self.source, going), greedy)  # [B]
            chain.record(going, token, q)
            confidence = self._confidence(step, token, q)  # [B]
            stop = confidence < self.confidence_threshold if self.policy is None else self.policy.stops(
                confidence, chain.depth, going, chain.lengths, step if self.temperature == 0 else None, token)
            low = going & stop & (chain.lengths > chain.depth + 1)
            chain.lengths = torch.where(low, chain.depth + 1, chain.lengths)
            chain.depth = chain.depth + going.long()
            more = going & (j < glen) & (chain.lengths > chain.depth)
            more &= _matches(token, guess, j)
            chain.set_fed(more, m + P + j)  # the guess column holds the token just drawn
            chain.parent = torch.where(going & ~more, m + col, chain.parent)
            col = torch.where(more, P + j, col)
            going = more

    def _chain(self, caps: torch.Tensor, rows=None):
        """Draft-model chains of at most caps[b] tokens (0: none; the pending tokens are still
        fed), each stopped after a low-confidence token -> (paths [B, 1, L], lengths [B], q
        [B, 1 + l, V]); L = max cap, l = max(lengths) (q has no rows for depths no row reached).
        One draft forward per depth while a row still drafts, fewer where the draft's tokens
        match the prompt-lookup guesses (guess_length > 0) that ride in the same forwards."""
        B, P, device = self.pending.shape[0], self.pending.shape[1], self.pending.device
        if self.policy is not None:
            self.policy.begin(rows.ctx_len)
        chain = _Chain(caps, max(int(caps.max()), 1))
        guess, glen = self._guesses(rows, chain)
        parents = (torch.arange(P, device=device) - 1).expand(B, P)
        real = torch.arange(P, device=device) < self.pending_count.unsqueeze(1)  # [B, P]
        root = self.pending_count - 1
        self._draws(self._forward(self.pending, parents, real, root, guess, glen), chain, torch.ones_like(real[:, 0]))
        while True:
            active = chain.lengths > chain.depth  # rows that draft another token: feed their last one
            if not bool(active.any()):
                break
            guess, glen = self._guesses(rows, chain)
            last = chain.paths[:, 0].gather(1, (chain.depth - 1).clamp(min=0).unsqueeze(1))  # [B, 1]
            chain.set_fed(active, self.kv.uncommitted)
            forward = self._forward(last, chain.parent.unsqueeze(1), active.unsqueeze(1),
                                    torch.zeros_like(root), guess, glen)
            self._draws(forward, chain, active)
        self.fed = chain.fed
        return chain.paths, chain.lengths, chain.q_table()

    def _chain_tree(self, last, paths, lengths, q) -> DraftTree:
        """The tree of chains paths [B, 1, L] (lengths [B]) whose nodes have q [B, 1 + l, V]:
        only the l <= L depths some row reached get nodes, while the paths keep their width L
        (the verifier's uniform reads depend on it, not on l). Logs the lengths and caps."""
        self._drafted = lengths
        self._lengths.append(lengths.cpu())
        self._caps.append(self.cap.cpu())
        l = q.shape[1] - 1
        tree = self._tree(last, paths[:, :, :l], lengths.unsqueeze(1), q)
        if l < paths.shape[2]:
            tree.paths = torch.cat([tree.paths, tree.paths.new_full((paths.shape[0], 1, paths.shape[2] - l), -1)], 2)
        return tree

    @staticmethod
    def _in_budget(caps: torch.Tensor, rows) -> torch.Tensor:
        """caps [B] cut to the tokens each row still needs, less the correction/bonus token the
        verification adds (at least 1, which costs no forward beyond the pending tokens' one):
        tokens past max_new_tokens would be thrown away after costing draft forwards and target
        rows. The cut is fixed before the iteration's draws, so the law is kept;
        transformers' assistant cuts its drafts the same way."""
        remaining = getattr(rows, "remaining", None)  # [B]; the engine's `Rows` has it
        return caps if remaining is None else torch.minimum(caps, (remaining - 1).clamp(min=1))

    def draft(self, rows) -> DraftTree:
        paths, lengths, q = self._chain(self._in_budget(self.cap, rows), rows)
        tree = self._chain_tree(rows.last, paths, lengths, q)
        return tree if self.policy is None else self.policy.grow(tree, self)

    # -- after verification -------------------------------------------------------------------------

    def accept(self, tree: DraftTree, verdict) -> None:
        self._commit_and_queue(tree, verdict, ran=True)
        self._update_caps(verdict, torch.ones_like(self.cap, dtype=torch.bool))

    def _update_caps(self, verdict, drafted_by_model: torch.Tensor) -> None:
        """transformers' heuristic: +2 when the row accepted every drafted token, else -1 (rows
        the draft model drafted for; the others keep their cap). Under a cost policy: its calibration
        learns from the iteration instead, and the cap stays at max_draft_length."""
        tau = verdict.tau  # [B]
        if self.policy is not None:
            self.policy.observe(self._drafted, tau, drafted_by_model, verdict.nodes)
        elif self.schedule != "constant":
            grown = torch.where(tau >= self._drafted, self.cap + 2, self.cap - 1).clamp(1, self.max_length)
            self.cap = torch.where(drafted_by_model, grown, self.cap)

    def _commit_and_queue(self, tree: DraftTree, verdict, ran: bool) -> None:
        """Keep in the draft cache the pending tokens (fed this iteration when `ran`) and the
        accepted nodes it ran; queue the accepted tokens it did not run, then the new token."""
        nodes, tau, y = verdict.nodes, verdict.tau, verdict.token  # [B, D], [B], [B]
        on = nodes >= 0
        fed = self._commit_fed(nodes) if ran else torch.full_like(nodes, -1)
        P = self.pending.shape[1]
        old = torch.arange(P, device=nodes.device) < self.pending_count.unsqueeze(1)  # [B, P]
        accepted = tree.tokens.gather(1, nodes.clamp(min=0))  # [B, D]
        parts = torch.cat([self.pending, accepted, y.unsqueeze(1)], dim=1)  # [B, P + D + 1]
        mask = torch.cat([old & (not ran), on & (fed < 0), torch.ones_like(on[:, :1])], dim=1)
        order = torch.sort((~mask).long(), dim=1, stable=True).indices  # queued tokens first, in order
        width = int(mask.sum(1).max())
        self.pending = parts.gather(1, order)[:, :max(width, 2)]
        self.pending_count = mask.sum(1)

    def select(self, rows: torch.Tensor) -> None:
        super().select(rows)
        self.cap = self.cap[rows]

    def logs(self) -> dict:
        if not self._lengths:
            return {}
        extra = {} if self.policy is None else self.policy.logs()  # runner-up leaves
        return {"chain_lengths": torch.cat(self._lengths), "caps": torch.cat(self._caps), **extra}


class HybridDrafter(AdaptiveChainDrafter):
    """Prompt lookup where the context has an n-gram match, the adaptive draft-model chain
    elsewhere. Rows of one batch may differ; the draft model runs only when some row needs it.
    Tokens emitted while the draft model was idle are fed to it, all in one forward, the next time
    it drafts ("pending" tokens, any number per row).

    Args (besides `AdaptiveChainDrafter`'s): lookup_length: tokens of a lookup phrase (>= 1);
    max_ngram: the longest suffix n-gram looked up. Logs also "lookup" (bool per row and iteration).
    """

    @renamed_keywords(threshold="confidence_threshold")
    def __init__(self, draft_length: int, max_draft_length: int, confidence_threshold: float = 0.4,
                 schedule: str = "heuristic", lookup_length: int = 10, max_ngram: int = 3,
                 *, draft_temperature: float | None = None, guess_length: int = 0):
        super().__init__(draft_length, max_draft_length, confidence_threshold, schedule, draft_temperature,
                         guess_length, max_ngram)
        self.lookup_length = lookup_length
        self._lookups = []

    def draft(self, rows) -> DraftTree:
        phrases, found = prompt_lookup_batch(rows.ctx, rows.ctx_len, self.max_ngram, self.lookup_length)  # [B, l], [B]
        lookup = found > 0  # [B]
        self._ran = not bool(lookup.all())
        self._lookup = lookup
        self._lookups.append(lookup.cpu())
        if self._ran:
            paths, lengths, q = self._chain(torch.where(lookup, 0, self._in_budget(self.cap, rows)), rows)
        else:
            paths, lengths, q = self._empty(found)
        paths, lengths, q = self._with_phrases(paths, lengths, q, phrases, found, lookup)
        return self._chain_tree(rows.last, paths, lengths, q)

    def _empty(self, found):
        """No draft-model chain: paths [B, 1, 1], lengths 0, q zeros [B, 1 + max(found), V] (the
        rows the phrases fill)."""
        B, device = found.shape[0], found.device
        V = self.model.vocab_size
        self.fed = torch.full((B, 1), -1, dtype=torch.long, device=device)
        return (torch.zeros(B, 1, 1, dtype=torch.long, device=device), torch.zeros_like(found),
                torch.zeros(B, 1 + max(int(found.max()), 1), V, dtype=torch.float64, device=device))

    @staticmethod
    def _with_phrases(paths, lengths, q, phrases, found, lookup):
        """Rows with a lookup match take their phrase as a point-mass chain (q one-hot on each
        next token) -> (paths [B, 1, L], lengths [B], q [B, 1 + l, V]) with L wide enough and l
        the deepest drafted depth. Writes into q (a fresh tensor of the drafter's)."""
        B, V = q.shape[0], q.shape[-1]
        longest = int(torch.where(lookup, found, 0).max())
        L = max(paths.shape[2], longest)
        if L > paths.shape[2]:
            paths = torch.cat([paths, paths.new_zeros(B, 1, L - paths.shape[2])], dim=2)
        if longest > q.shape[1] - 1:
            q = torch.cat([q, q.new_zeros(B, longest - q.shape[1] + 1, V)], dim=1)
        phrase = torch.zeros(B, L, dtype=torch.long, device=paths.device)
        phrase[:, :phrases.shape[1]] = phrases[:, :L]
        paths[:, 0] = torch.where(lookup.unsqueeze(1), phrase, paths[:, 0])
        j = torch.arange(L, device=paths.device)
        point = lookup.unsqueeze(1) & (j < found.unsqueeze(1))  # [B, L]: node d holds q of token d + 1
        b, d = point.nonzero(as_tuple=True)  # only these rows of q become one-hot
        q[b, d] = 0.0
        q[b, d, phrase[b, d]] = 1.0
        return paths, torch.where(lookup, found, lengths), q

    def accept(self, tree: DraftTree, verdict) -> None:
        if not self._ran:
            self.fed = torch.full_like(tree.tokens, -1)
        else:
            self.fed = torch.cat([self.fed, self.fed.new_full((self.fed.shape[0], max(
                tree.tokens.shape[1] - self.fed.shape[1], 0)), -1)], dim=1)
            self.fed[self._lookup] = -1  # phrase nodes were never fed to the draft model
        self._commit_and_queue(tree, verdict, ran=self._ran)
        self._update_caps(verdict, ~self._lookup)

    def logs(self) -> dict:
        out = super().logs()
        if self._lookups:
            out["lookup"] = torch.cat(self._lookups)
        return out


#: The chain verifiers the methods take (`verispec.reference.adaptive.VERIFIERS`).
VERIFIERS = ("token", "block")


def _check(draft_length, max_draft_length, confidence_threshold, schedule, verifier, guess_length):
    L = check_positive(draft_length, "draft_length")
    top = 4 * L if max_draft_length is None else check_positive(max_draft_length, "max_draft_length")
    if top < L:
        raise ValueError(f"max_draft_length: must be >= draft_length ({L}), got {top}")
    c = confidence_threshold
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not 0 <= c <= 1:
        raise ValueError(f"confidence_threshold: expected a number in [0, 1], got {c!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule: expected one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if verifier not in VERIFIERS:
        raise ValueError(f"verifier: expected one of {', '.join(VERIFIERS)}, got {verifier!r}")
    return L, top, c, check_int(guess_length, "guess_length", 0)


@renamed_keywords(threshold="confidence_threshold")
def adaptive_method(draft_length: int = 4, max_draft_length: int | None = None, confidence_threshold: float = 0.4,
                    schedule: str = "heuristic", draft_temperature: float | None = None, verifier: str = "token",
                    guess_length: int = 0):
    """`AdaptiveChainDrafter` + token or block verification as a `TorchMethod` ("adaptive").

    Args: draft_length: the initial cap L0 >= 1; max_draft_length: the cap's ceiling (default
    4 L0); confidence_threshold in [0, 1] (default 0.4, transformers' default); schedule: `SCHEDULES`;
    verifier: `VERIFIERS` (default "token"); guess_length: prompt-lookup tokens the draft model
    checks in each of its forwards (0, the default: none; `AdaptiveChainDrafter`).

    Raises:
        ValueError: a parameter out of range. TypeError: a guess_length that is not an int.
    """
    L, top, c, g = _check(draft_length, max_draft_length, confidence_threshold, schedule, verifier, guess_length)
    return TorchMethod("adaptive", lambda: AdaptiveChainDrafter(L, top, c, schedule, draft_temperature, g),
                       PathRule(verifier), {"draft_length": L, "max_draft_length": top, "confidence_threshold": c,
                                            "schedule": schedule, "verifier": verifier, "guess_length": g})


@renamed_keywords(threshold="confidence_threshold")
def hybrid_method(draft_length: int = 4, max_draft_length: int | None = None, confidence_threshold: float = 0.4,
                  schedule: str = "heuristic", lookup_length: int = 10, max_ngram: int = 3, *,
                  draft_temperature: float | None = None, verifier: str = "token", guess_length: int = 0):
    """`HybridDrafter` + token or block verification as a `TorchMethod` ("hybrid"); arguments as
    `adaptive_method`, plus lookup_length (tokens of a lookup phrase, default 10 as transformers'
    prompt lookup) and max_ngram (default 3; also the guesses' n-gram).

    Raises:
        ValueError: a parameter out of range. TypeError: a guess_length that is not an int.
    """
    L, top, c, g = _check(draft_length, max_draft_length, confidence_threshold, schedule, verifier, guess_length)
    n, k = check_positive(lookup_length, "lookup_length"), check_positive(max_ngram, "max_ngram")
    return TorchMethod("hybrid", lambda: HybridDrafter(L, top, c, schedule, n, k,
                                                       draft_temperature=draft_temperature, guess_length=g),
                       PathRule(verifier), {"draft_length": L, "max_draft_length": top, "confidence_threshold": c,
                                            "schedule": schedule, "lookup_length": n, "max_ngram": k,
                                            "verifier": verifier, "guess_length": g})
