"""Exact laws of a causal LM pair in float64: the target law of the first N tokens and the expected
acceptance counters of the speculative rule an engine claims to run.

`ConditionalTable` reads a Hugging Face checkpoint (the `tiny_pair` models) in float64 and gives
p(. | prompt + prefix) at a sampling temperature T (softmax(logits / T); T = 0 or ``greedy=True``:
the point mass on the argmax, ties to the lower id) for any prefixes, each computed once.
`target_law` multiplies the conditionals into the joint law of the first N tokens, [V^N] in base-V
order (the first token most significant), the law every lossless engine must emit.

`expected_acceptance` is the exact expectation of an engine's acceptance counters per request under
token-level speculative sampling (Leviathan et al. 2023, arXiv:2211.17192, Algorithm 1) run on the
engine's schedule (`SpeculationClaim`): from an emitted prefix s with a draft of length l, the
iteration accepts x_1..x_i with probability prod_j m(x_j) where m = min(p, q) at each prefix, then
emits a correction y with probability r(y) = max(p - q, 0)(y) (i < l) or a bonus b ~ p (i = l); the
next iteration starts from the longer prefix, until N tokens are out. The dynamic program carries, for
every prefix where an iteration starts, its probability and the first two moments of the accepted
count so far, so the variance of the per-request total is exact too. Greedy drafts use q = the point
mass on the draft's argmax (what the draft sampled from). Branches of probability below ``prune``
are dropped and their total mass reported: every expectation is exact to within that mass times the
largest count.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from ..reference.models import check_positive_int

__all__ = ["ConditionalTable", "target_law", "SpeculationClaim", "ExpectedAcceptance", "expected_acceptance"]


class ConditionalTable:
    """p(. | prompt + prefix) of one checkpoint in float64, computed once per prefix.

    Args:
        model_path: a folder with a Hugging Face causal LM (loaded with transformers, float64).
        prompt: the token ids every prefix follows.
        temperature: T >= 0 (0: the argmax point mass). greedy: the argmax point mass at any T.
        chunk: sequences per forward pass.
    """

    def __init__(self, model_path: str, prompt, *, temperature: float = 1.0, greedy: bool = False,
                 chunk: int = 4096):
        import torch  # optional dependency
        from transformers import AutoModelForCausalLM  # optional dependency

        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
            raise ValueError(f"temperature: expected a number >= 0, got {temperature!r}")
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float64).eval()
        self.vocab_size = int(self.model.config.vocab_size)
        self.prompt = tuple(int(t) for t in prompt)
        self.temperature, self.greedy, self.chunk = float(temperature), bool(greedy or temperature == 0), chunk
        self.cache: dict = {}

    def _compute(self, prefixes: list) -> None:
        import torch  # optional dependency

        for length in sorted({len(p) for p in prefixes}):
            todo = [p for p in prefixes if len(p) == length]
            for start in range(0, len(todo), self.chunk):
                rows = todo[start:start + self.chunk]
                ids = torch.tensor([self.prompt + p for p in rows], dtype=torch.long)  # [rows, P + length]
                with torch.inference_mode():
                    logits = self.model(ids).logits[:, -1].double()  # [rows, V]
                if self.greedy:
                    probs = torch.nn.functional.one_hot(logits.argmax(-1), self.vocab_size).double()
                else:
                    probs = torch.softmax(logits / self.temperature, dim=-1)  # [rows, V]
                for p, row in zip(rows, probs.numpy()):
                    self.cache[p] = row

    def probs(self, prefixes) -> np.ndarray:
        """float64 [len(prefixes), V]: the conditional after each prefix (a tuple of token ids)."""
        prefixes = [tuple(p) for p in prefixes]
        missing = list(dict.fromkeys(p for p in prefixes if p not in self.cache))
        if missing:
            self._compute(missing)
        return np.stack([self.cache[p] for p in prefixes]) if prefixes else np.zeros((0, self.vocab_size))

    def dense(self, length: int) -> np.ndarray:
        """float64 [V^length, V]: the conditional after every prefix of `length` tokens, base-V order."""
        return self.probs(list(itertools.product(range(self.vocab_size), repeat=length)))


def target_law(table, num_tokens: int) -> np.ndarray:
    """The joint law of the first `num_tokens` tokens, float64 [V^N] (base-V order, first token most
    significant), from a table with ``dense(length)`` (`ConditionalTable`)."""
    N = check_positive_int(num_tokens, "num_tokens")
    law = np.ones(1)
    for length in range(N):
        law = (law[:, None] * table.dense(length)).reshape(-1)  # [V^(length + 1)]
    return law


@dataclass(frozen=True)
class SpeculationClaim:
    """The rule and schedule an engine claims to run: token-level speculative sampling with drafts
    of `draft_length` tokens; `greedy_draft`: the draft's argmax chain (q = its point mass) instead of
    samples from q; `first_token_from_target`: the first token is sampled by the target alone (vLLM's
    prefill step); `draft_capped`: each draft is cut to the tokens still to emit minus one
    (transformers' assisted generation)."""

    draft_length: int
    greedy_draft: bool = False
    first_token_from_target: bool = False
    draft_capped: bool = False

    def __post_init__(self):
        check_positive_int(self.draft_length, "draft_length")

    def length_at(self, emitted: int, num_tokens: int) -> int:
        """The draft length of an iteration that starts after `emitted` tokens."""
        L = self.draft_length
        return max(0, min(L, num_tokens - emitted - 1)) if self.draft_capped else L


@dataclass
class ExpectedAcceptance:
    """Expected counters per request (exact up to `pruned_mass` x the largest count).

    Attributes:
        drafts: iterations that verify a draft. draft_tokens: tokens drafted. accepted: accepted
        draft tokens (mean of the per-request total X). accepted_sq: E[X^2]. per_position:
        [L] expected iterations accepting at least j + 1 tokens. pruned_mass: probability dropped.
    """

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    accepted_sq: float = 0.0
    per_position: list = field(default_factory=list)
    pruned_mass: float = 0.0

    @property
    def accepted_variance(self) -> float:
        return max(self.accepted_sq - self.accepted ** 2, 0.0)


def _transitions(nodes, probs, accepted, prune, terminal):
    """(state index, emitted block, conditional probability, accepted) of the blocks that end an
    iteration: nodes = list of (state index, accepted tuple, path probability W, state probability w);
    probs [m, V] the law of the block's last token (residual or bonus). `terminal(node)`: the block
    completes the request, so its tokens do not matter (one entry, block None). Non-terminal branches
    below `prune` go to the returned dropped mass."""
    out, dropped = [], 0.0
    for node, row in zip(nodes, probs):
        index, a, W, w = node
        if terminal(node):
            out.append((index, None, W * float(row.sum()), accepted))
            continue
        weights = W * row  # [V]
        keep = weights * w >= prune
        dropped += float((weights * w)[~keep].sum())
        out.extend((index, a + (int(y),), float(weights[y]), accepted) for y in np.flatnonzero(keep))
    return out, dropped


def _iterate(states, ell, tables, totals, prune, num_tokens):
    """One iteration from each state (all of one length) with drafts of `ell` tokens; returns the
    ending blocks as (state index, block, probability, accepted) and the dropped mass."""
    target, draft = tables
    nodes = [(i, (), 1.0, w) for i, (s, (w, _, _)) in enumerate(states)]
    terminal = lambda node: len(states[node[0]][0]) + len(node[1]) + 1 >= num_tokens  # noqa: E731
    ends, dropped = [], 0.0
    for j in range(ell + 1):
        if not nodes:
            break
        P = target.probs([states[i][0] + a for i, a, _, _ in nodes])  # [m, V]
        if j == ell:
            found, lost = _transitions(nodes, P, j, prune, terminal)
            ends, dropped = ends + found, dropped + lost
            break
        Q = draft.probs([states[i][0] + a for i, a, _, _ in nodes])  # [m, V]
        M, R = np.minimum(P, Q), np.maximum(P - Q, 0.0)  # accept / reject-and-correct masses  # [m, V]
        found, lost = _transitions(nodes, R, j, prune, terminal)
        ends, dropped = ends + found, dropped + lost
        totals.per_position[j] += sum(w * W * float(m.sum()) for (_, _, W, w), m in zip(nodes, M))
        children = []
        for (i, a, W, w), m in zip(nodes, M):
            for x in np.flatnonzero(m > 0):
                if w * W * m[x] >= prune:
                    children.append((i, a + (int(x),), W * float(m[x]), w))
                else:
                    dropped += w * W * float(m[x])
        nodes = children
    return ends, dropped


def _advance(frontier, states, ends, num_tokens, totals):
    """Move each iteration's probability and accepted-count moments to the next state (or, at N
    tokens, into the per-request totals)."""
    for index, block, prob, a in ends:
        s, (w, s1, s2) = states[index]
        moved = (prob * w, prob * (s1 + a * w), prob * (s2 + 2 * a * s1 + a * a * w))
        following = None if block is None else s + block
        if following is None or len(following) >= num_tokens:
            totals.accepted += moved[1]
            totals.accepted_sq += moved[2]
        else:
            old = frontier.get(following, (0.0, 0.0, 0.0))
            frontier[following] = tuple(x + y for x, y in zip(old, moved))


def expected_acceptance(target, draft, claim: SpeculationClaim, num_tokens: int,
                        prune: float = 1e-10) -> ExpectedAcceptance:
    """Exact expected acceptance counters per request of `claim` run until `num_tokens` are emitted.

    Args:
        target, draft: tables with ``probs(prefixes) -> [m, V]`` (`ConditionalTable`; for the draft,
            at the engine's temperature, or ``greedy=True`` for greedy drafts).
        claim: the engine's rule and schedule. num_tokens: N, the tokens each request emits.
        prune: branches of smaller probability are dropped (their mass is reported).

    Returns:
        an `ExpectedAcceptance` (see there).
    """
    N = check_positive_int(num_tokens, "num_tokens")
    totals = ExpectedAcceptance(per_position=[0.0] * claim.draft_length)
    if claim.first_token_from_target:
        first = target.probs([()])[0]  # [V]
        frontier = {(int(x),): (float(first[x]), 0.0, 0.0) for x in np.flatnonzero(first >= prune)}
        totals.pruned_mass += float(first[first < prune].sum())
    else:
        frontier = {(): (1.0, 0.0, 0.0)}
    for length in range(N):
        states = [(s, v) for s, v in frontier.items() if len(s) == length]
        if not states:
            continue
        for s, _ in states:
            del frontier[s]
        ell = claim.length_at(length, N)
        weight = sum(v[0] for _, v in states)
        totals.drafts += weight if ell else 0.0
        totals.draft_tokens += weight * ell
        ends, dropped = _iterate(states, ell, (target, draft), totals, prune, N)
        totals.pruned_mass += dropped
        _advance(frontier, states, ends, N, totals)
    return totals
