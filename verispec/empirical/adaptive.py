"""Cheaper drafts on the engine: adaptive chains and hybrid (n-gram or draft model) chains.

Two levers against the cost of drafting (one draft forward per drafted token), both verified by
token-level speculative sampling (Leviathan et al. 2023, arXiv 2211.17192, Algorithm 1) or, with
``verifier="block"``, by block verification (Sun et al. 2024, arXiv 2403.10444, Algorithm 2: at
least as many tokens per target call in expectation from the same chain, no forward more);
lossless at every temperature (block verification: checked, not proved, see below):

- `AdaptiveChainDrafter`: a chain from the draft model that stops after a token whose draft
  confidence falls below `threshold` (transformers' ``assistant_confidence_threshold``), with a
  per-row length cap that follows the acceptance history (transformers' "heuristic" schedule:
  +2 after an iteration that accepted every drafted token, -1 otherwise, within
  [1, max_draft_length]; a chain is also cut to the tokens its row still needs). The stop is
  decided AFTER the token is drawn and keeps it: whether to draft one more token is then a
  function of the drafted prefix, which token verification allows (a chain's length may be any
  stopping time of its own tokens). Dropping the
  low-confidence token instead would condition its law on q(x) >= threshold while the verifier
  divides by the unconditioned q: biased (`verispec.reference.adaptive` plants exactly that).
  The cap is fixed before an iteration's draws, so every iteration is the reference
  `adaptive_chain(cap, threshold)` for some cap.
  Confidence: q of the drawn token at the draft temperature; at draft temperature 0 (greedy
  drafts, q one-hot) the softmax of the draft logits at temperature 1, as transformers does.
- `HybridDrafter`: per row and iteration, the prompt-lookup phrase (Saxena 2023) when the context
  has an n-gram match (a point-mass chain, q one-hot: no draft forward), the adaptive chain of the
  draft model otherwise. Tokens emitted while the draft model was idle are fed to it, all in one
  forward, the next time it drafts ("pending" tokens, any number per row).

Reference twins (exact laws checked by `verispec.testing.assert_lossless`):
`verispec.reference.adaptive.adaptive_chain` / `hybrid`. Token verification of these chains is
lossless for any stopping time; block verification is proved for fixed-length chains and its law
on these ones is checked exactly, not proved (`verispec.reference.adaptive`).
"""

from __future__ import annotations

import torch

from .drafters import DraftTree, PathsDrafter, draw, next_token_law, probabilities
from .lookup import prompt_lookup_batch

__all__ = ["AdaptiveChainDrafter", "HybridDrafter", "SCHEDULES", "VERIFIERS", "adaptive_method", "hybrid_method"]

#: Length-cap schedules: transformers' "heuristic" (+2 when every drafted token was accepted,
#: else -1) and "constant" (the cap stays at draft_length; transformers 5.x's default, with 20).
SCHEDULES = ("heuristic", "constant")


class AdaptiveChainDrafter(PathsDrafter):
    """A draft-model chain with a confidence stop and a scheduled length cap (module docstring).

    Args:
        draft_length: the initial cap L0 >= 1. max_draft_length: the cap's ceiling (>= L0).
        threshold: stop after a drafted token of confidence < threshold (0: never stop).
        schedule: one of `SCHEDULES`. draft_temperature: as `PathsDrafter` (default: T).

    Logs: "chain_lengths" (tokens drafted per row and iteration), "caps" (the cap in force).
    """

    def __init__(self, draft_length: int, max_draft_length: int, threshold: float = 0.4,
                 schedule: str = "heuristic", draft_temperature: float | None = None):
        super().__init__(draft_length, 1, True, draft_temperature)
        self.max_length, self.threshold, self.schedule = max_draft_length, threshold, schedule
        self._lengths, self._caps = [], []

    def start(self, draft, tokens, lengths, temperature, source, storage="padded") -> None:
        super().start(draft, tokens, lengths, temperature, source, storage)
        self.cap = torch.full((tokens.shape[0],), self.L, dtype=torch.long, device=tokens.device)  # [B]

    # -- drafting ---------------------------------------------------------------------------------

    def _temperature(self) -> float:
        return self.temperature if self.draft_temperature is None else self.draft_temperature

    def _confidence(self, logits, tokens) -> torch.Tensor:
        """The draft's probability of its drawn tokens: logits [B, V], tokens [B] -> [B]."""
        Td = self._temperature()
        probs = probabilities(logits, Td if Td > 0 else 1.0)  # [B, V]
        return probs.gather(1, tokens.unsqueeze(1)).squeeze(1)

    def _feed_pending(self, temperature: float):
        """ONE draft forward of every row's pending tokens (a chain of 1..P per row) -> (the law
        at the root (`next_token_law`: q [B, V], greedy ids or None), the root's forest id [B],
        the root's logits [B, V])."""
        B, P = self.pending.shape
        device = self.pending.device
        parents = (torch.arange(P, device=device) - 1).expand(B, P)
        real = torch.arange(P, device=device) < self.pending_count.unsqueeze(1)  # [B, P]
        logits = self.kv.append(self.pending, parents, real)  # [B, P, V]
        self.draft_rows += int(real.sum())
        root = self.pending_count - 1
        last = logits[torch.arange(B, device=device), root]  # [B, V]
        return next_token_law(last, temperature), root, last

    def _chain(self, caps: torch.Tensor):
        """Draft-model chains of at most caps[b] tokens (0: none; the pending tokens are still
        fed), each stopped after a low-confidence token -> (paths [B, 1, L], lengths [B], q
        [B, 1 + l, V]); L = max cap, l = max(lengths) (q has no rows for depths no row reached).
        One draft forward per depth while a row still drafts."""
        Td = self._temperature()
        (q_root, greedy), root, logits = self._feed_pending(Td)  # [B, V], [B] or None, [B], [B, V]
        B, V, device = q_root.shape[0], q_root.shape[-1], q_root.device
        L = max(int(caps.max()), 1)
        paths = torch.zeros(B, 1, L, dtype=torch.long, device=device)
        q_rows = [q_root]  # q of nodes 0, 1, ...: [B, V] each
        self.fed = torch.full((B, 1 + L), -1, dtype=torch.long, device=device)
        token = draw(q_root, self.source.take(B, 1, device)[:, 0], greedy)  # [B]
        paths[:, 0, 0] = token
        lengths = torch.where((caps > 1) & (self._confidence(logits, token) < self.threshold), 1, caps)
        parent = root
        for d in range(1, L):
            active = lengths > d  # rows that draft a depth-(d + 1) token: feed node d
            if not bool(active.any()):
                break
            m = self.kv.uncommitted
            step = self.kv.append(paths[:, :, d - 1], parent.unsqueeze(1), active.unsqueeze(1))[:, 0]  # [B, V]
            self.draft_rows += int(active.sum())
            self.fed[:, d] = torch.where(active, m, -1)
            q_d, greedy = next_token_law(step, Td)  # [B, V], [B] or None
            q_rows.append(q_d if bool(active.all()) else torch.where(active.unsqueeze(1), q_d, 0.0))
            token = draw(q_d, self.source.take(B, 1, device)[:, 0], greedy)
            paths[:, 0, d] = token
            low = active & (self._confidence(step, token) < self.threshold) & (lengths > d + 1)
            lengths = torch.where(low, d + 1, lengths)
            parent = torch.full_like(parent, m)
        q_rows.append(torch.zeros_like(q_root))  # the deepest node drew no child
        return paths, lengths, torch.stack(q_rows, dim=1)

    def _chain_tree(self, last, paths, lengths, q) -> DraftTree:
        """The tree of chains paths [B, 1, L] (lengths [B]) whose nodes have q [B, 1 + l, V]:
        only the l <= L depths some row reached get nodes, while the paths keep their width L
        (the verifier's uniform reads depend on it, not on l)."""
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
        rows. The cut is fixed before the iteration's draws, so the law is kept (module docstring);
        transformers' assistant cuts its drafts the same way."""
        remaining = getattr(rows, "remaining", None)  # [B]; the engine's `Rows` has it
        return caps if remaining is None else torch.minimum(caps, (remaining - 1).clamp(min=1))

    def draft(self, rows) -> DraftTree:
        paths, lengths, q = self._chain(self._in_budget(self.cap, rows))
        self._drafted = lengths
        self._lengths.append(lengths.cpu())
        self._caps.append(self.cap.cpu())
        return self._chain_tree(rows.last, paths, lengths, q)

    # -- after verification -------------------------------------------------------------------------

    def accept(self, tree: DraftTree, verdict) -> None:
        self._commit_and_queue(tree, verdict, ran=True)
        self._update_caps(verdict.num_accepted, torch.ones_like(self.cap, dtype=torch.bool))

    def _update_caps(self, tau: torch.Tensor, drafted_by_model: torch.Tensor) -> None:
        """transformers' heuristic: +2 when the row accepted every drafted token, else -1 (rows
        the draft model drafted for; the others keep their cap)."""
        if self.schedule == "constant":
            return
        grown = torch.where(tau >= self._drafted, self.cap + 2, self.cap - 1).clamp(1, self.max_length)
        self.cap = torch.where(drafted_by_model, grown, self.cap)

    def _commit_and_queue(self, tree: DraftTree, verdict, ran: bool) -> None:
        """Keep in the draft cache the pending tokens (fed this iteration when `ran`) and the
        accepted nodes it ran; queue the accepted tokens it did not run, then the new token."""
        nodes, tau, y = verdict.nodes, verdict.num_accepted, verdict.token  # [B, D], [B], [B]
        B, device = nodes.shape[0], nodes.device
        on = nodes >= 0
        fed = torch.where(on, self.fed.gather(1, nodes.clamp(min=0)), -1) if ran else torch.full_like(nodes, -1)
        P = self.pending.shape[1]
        old = torch.arange(P, device=device) < self.pending_count.unsqueeze(1)  # [B, P]
        if ran:
            m = self.kv.uncommitted
            keep = torch.zeros(B, m + 1, dtype=torch.bool, device=device)  # column m absorbs -1
            keep[:, :P] = old
            keep.scatter_(1, torch.where(fed >= 0, fed, m), True)
            self.kv.commit(keep[:, :m])
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
        return {"chain_lengths": torch.cat(self._lengths), "caps": torch.cat(self._caps)}


class HybridDrafter(AdaptiveChainDrafter):
    """Prompt lookup where the context has an n-gram match, the adaptive draft-model chain
    elsewhere (module docstring). Rows of one batch may differ; the draft model runs only when
    some row needs it.

    Args (besides `AdaptiveChainDrafter`'s): lookup_length: tokens of a lookup phrase (>= 1);
    max_ngram: the longest suffix n-gram looked up. Logs also "lookup" (bool per row and iteration).
    """

    def __init__(self, draft_length: int, max_draft_length: int, threshold: float = 0.4,
                 schedule: str = "heuristic", lookup_length: int = 10, max_ngram: int = 3,
                 draft_temperature: float | None = None):
        super().__init__(draft_length, max_draft_length, threshold, schedule, draft_temperature)
        self.lookup_length, self.max_ngram = lookup_length, max_ngram
        self._lookups = []

    def draft(self, rows) -> DraftTree:
        phrases, found = prompt_lookup_batch(rows.ctx, rows.ctx_len, self.max_ngram, self.lookup_length)  # [B, l], [B]
        lookup = found > 0  # [B]
        self._ran = not bool(lookup.all())
        self._lookup = lookup
        self._lookups.append(lookup.cpu())
        if self._ran:
            paths, lengths, q = self._chain(torch.where(lookup, 0, self._in_budget(self.cap, rows)))
        else:
            paths, lengths, q = self._empty(found)
        paths, lengths, q = self._with_phrases(paths, lengths, q, phrases, found, lookup)
        self._drafted = lengths
        self._lengths.append(lengths.cpu())
        self._caps.append(self.cap.cpu())
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
        width = phrases.shape[1]
        phrase = torch.zeros(B, L, dtype=torch.long, device=paths.device)
        phrase[:, :min(L, width)] = phrases[:, :L]
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
        self._update_caps(verdict.num_accepted, ~self._lookup)

    def logs(self) -> dict:
        out = super().logs()
        if self._lookups:
            out["lookup"] = torch.cat(self._lookups)
        return out


#: The chain verifiers the methods take (`verispec.reference.adaptive.VERIFIERS`).
VERIFIERS = ("token", "block")


def _check(draft_length, max_draft_length, threshold, schedule, verifier="token"):
    from .checks import _check_positive

    L = _check_positive(draft_length, "draft_length")
    top = 4 * L if max_draft_length is None else _check_positive(max_draft_length, "max_draft_length")
    if top < L:
        raise ValueError(f"max_draft_length: must be >= draft_length ({L}), got {top}")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold <= 1:
        raise ValueError(f"threshold: expected a number in [0, 1], got {threshold!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule: expected one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if verifier not in VERIFIERS:
        raise ValueError(f"verifier: expected one of {', '.join(VERIFIERS)}, got {verifier!r}")
    return L, top


def adaptive_method(draft_length: int = 4, max_draft_length: int | None = None, threshold: float = 0.4,
                    schedule: str = "heuristic", draft_temperature: float | None = None, verifier: str = "token"):
    """`AdaptiveChainDrafter` + token or block verification as a `TorchMethod` ("adaptive").

    Args: draft_length: the initial cap L0 >= 1; max_draft_length: the cap's ceiling (default
    4 L0); threshold in [0, 1] (default 0.4, transformers' default); schedule: `SCHEDULES`;
    verifier: `VERIFIERS` (default "token").

    Raises:
        ValueError: a parameter out of range.
    """
    from .engine import TorchMethod
    from .rules.nodes import PathRule

    L, top = _check(draft_length, max_draft_length, threshold, schedule, verifier)
    return TorchMethod("adaptive", lambda: AdaptiveChainDrafter(L, top, threshold, schedule, draft_temperature),
                       PathRule(verifier), {"draft_length": L, "max_draft_length": top, "threshold": threshold,
                                            "schedule": schedule, "verifier": verifier})


def hybrid_method(draft_length: int = 4, max_draft_length: int | None = None, threshold: float = 0.4,
                  schedule: str = "heuristic", lookup_length: int = 10, max_ngram: int = 3,
                  draft_temperature: float | None = None, verifier: str = "token"):
    """`HybridDrafter` + token or block verification as a `TorchMethod` ("hybrid"); arguments as
    `adaptive_method`, plus lookup_length (tokens of a lookup phrase, default 10 as transformers'
    prompt lookup) and max_ngram (default 3).

    Raises:
        ValueError: a parameter out of range.
    """
    from .checks import _check_positive
    from .engine import TorchMethod
    from .rules.nodes import PathRule

    L, top = _check(draft_length, max_draft_length, threshold, schedule, verifier)
    n, k = _check_positive(lookup_length, "lookup_length"), _check_positive(max_ngram, "max_ngram")
    return TorchMethod("hybrid", lambda: HybridDrafter(L, top, threshold, schedule, n, k, draft_temperature),
                       PathRule(verifier), {"draft_length": L, "max_draft_length": top, "threshold": threshold,
                                            "schedule": schedule, "lookup_length": n, "max_ngram": k,
                                            "verifier": verifier})
