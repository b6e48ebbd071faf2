"""Planted bugs of the phrase (Ouroboros) and adaptive chain drafts: each must fail `assert_lossless`.

- `greedy_match_method`: Ouroboros' phrases verified by the paper's greedy matching (Zhao et al.
  2024, arXiv 2402.13720): a child is entered exactly when it is the target's argmax. Lossless at
  T = 0 only.
- `trust_pool_method`: after a fully accepted chain, the first pool phrase hung there is emitted
  without verification.
- `drop_low_confidence`: the adaptive chain (transformers' ``assistant_confidence_threshold``)
  drops the low-confidence token it drew instead of keeping it, so the drafted tokens are q
  conditioned on q >= threshold while the verifier divides by q.
- `stop_on_target`: the chain's stop peeks at the target's probability of the drawn token.
- `peeking_policy`: the cost-aware drafting policy (`verispec.reference.policy`) decides whether a
  drawn token is worth verifying from its true acceptance chance min(1, p(x) / q(x)), read off the
  target, and ends the chain without it when it is not.

The honest methods are `verispec.reference.ouroboros.ouroboros_method`,
`verispec.reference.adaptive.adaptive_method` and `verispec.reference.policy.chain_method`.
"""

from __future__ import annotations

from ..reference.adaptive import VERIFIERS, check_verifier
from ..reference.drafters import Draft, Drafter, draw_counts
from ..reference.methods import Method
from ..reference.models import check_positive_int
from ..reference.policy import expected_tokens
from ..reference.ouroboros import check_pool, ouroboros_phrases, phrase_chain, point_mass_tree_verify
from ..reference.probability import argmax

__all__ = ["greedy_match_method", "trust_pool_method", "drop_low_confidence", "stop_on_target", "peeking_policy"]


def _greedy_match_verify(target, draft_model, context, draft, rand) -> tuple[int, ...]:
    """The paper's greedy rule at any T: enter the child equal to the target's argmax, else emit a
    draw from p (the argmax is over-weighted when T > 0)."""
    node: tuple[int, ...] = ()
    while True:
        p = target.probs(tuple(context) + node)  # [V]
        best = argmax(p)
        if best in draft.children(node):
            node += (best,)
            continue
        return node + (rand.categorical(p),)


def greedy_match_method(draft_length: int, pool, num_candidates: int = 3, guess_set: int = 20) -> Method:
    """PLANTED BUG: `ouroboros_phrases` verified by the paper's greedy matching (a child is accepted
    exactly when it is the target's argmax): lossless only at T = 0."""
    drafter = ouroboros_phrases(draft_length, pool, num_candidates, guess_set)
    return Method("greedy_match", drafter, _greedy_match_verify, dict(drafter.params))


def trust_pool_method(draft_length: int, pool, num_candidates: int = 3, guess_set: int = 20) -> Method:
    """PLANTED BUG: after a fully accepted chain, the first pool phrase hung there is emitted
    without verification (then a bonus from p)."""
    drafter = ouroboros_phrases(draft_length, pool, num_candidates, guess_set)
    phrases = check_pool(pool)

    def verify(target, draft_model, context, draft, rand):
        out = point_mass_tree_verify(target, draft_model, context, draft, rand)
        chain = phrase_chain(draft_model, tuple(context), phrases, draft_length, guess_set)
        if out[:-1] != chain or not draft.children(chain):
            return out
        node = chain
        while draft.children(node):  # trusted: the first phrase, unverified
            node += (draft.children(node)[0],)
        return node + (rand.categorical(target.probs(tuple(context) + node)),)

    return Method("trust_pool", drafter, verify, dict(drafter.params))


def _discarding_chain(name: str, draft_length: int, keep, verifier: str = "token") -> Method:
    """A chain that draws each token from q and ends (discarding it) where `keep(prefix, q, t)` is
    False, with token (or block) verification; the two planted bugs below differ only in `keep`."""
    L = check_positive_int(draft_length, "draft_length")
    rule = VERIFIERS[check_verifier(verifier)]

    def build(draft_model, context, rand):
        def expand(node, k):
            if len(node) == L:
                return (), None
            q = draft_model.probs(context + node)  # [V]
            drawn = tuple(t for t, c in draw_counts(q, k, rand).items() for _ in range(c))
            kept = tuple(t for t in drawn if keep(context + node, q, t))
            return (kept, q) if kept else ((), None)

        return Draft(1, expand, rand)

    return Method(name, Drafter(name, build, draft_length=L), rule, {"draft_length": L, "verifier": verifier})


def drop_low_confidence(draft_length: int, threshold: float, verifier: str = "token") -> Method:
    """PLANTED BUG: ends the chain before a token of draft probability < threshold (the token is
    drawn, then discarded), so the drafted tokens are q conditioned on q >= threshold while the
    verifier divides by q."""
    return _discarding_chain("drop_low_confidence", draft_length, lambda prefix, q, t: q[t] >= threshold, verifier)


def stop_on_target(target, draft_length: int, threshold: float, verifier: str = "token") -> Method:
    """PLANTED BUG: peeks at the target: a drawn token whose target probability is below
    `threshold` is discarded and the chain ends there."""
    # target.probs(prefix): what a drafter must not read
    return _discarding_chain("stop_on_target", draft_length,
                             lambda prefix, q, t: target.probs(prefix)[t] >= threshold, verifier)


def peeking_policy(target, draft_length: int, costs, verifier: str = "token") -> Method:
    """PLANTED BUG: a cost-aware policy that peeks at the target: a drawn token x is kept only when
    verifying it is predicted to pay, E[tokens] = 1 + a over `costs.chain_seconds(1)` against one
    token over `costs.chain_seconds(0)`, with a = min(1, p(x) / q(x)) its true acceptance chance
    (read from the target); otherwise it is discarded and the chain ends. The honest policy
    (`verispec.reference.policy.cost_chain`) prices tokens from q alone and keeps every drawn one."""

    def keep(prefix, q, t):
        p = target.probs(prefix)  # [V]: what a drafter must not read
        a = min(1, p[t] / q[t])
        return expected_tokens([a]) * costs.chain_seconds(0) > costs.chain_seconds(1)

    return _discarding_chain("peeking_policy", draft_length, keep, verifier)
