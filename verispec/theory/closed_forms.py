"""Closed forms for expected accepted length, checked against `verispec.reference.exact`.

Notation (ALGORITHMS.md): target p, draft q, draft length L, accepted length tau;
block efficiency = E[tau] + 1.
"""

from __future__ import annotations

from ..reference.models import LanguageModel, _check_positive_int, check_pair, check_prefix


def _tree_sum(target, draft, context, draft_length, combine):
    """sum over nodes x^l (1 <= l <= L) of the V-ary tree of a(x^l), where
    a(x^l) = combine(a(x^{l-1}), q(x_l | x^{l-1}), p(x_l | x^{l-1}), qjoint(x^{l-1}))."""
    check_pair(target, draft)
    context = check_prefix(context, target.vocab_size, "context")
    L = _check_positive_int(draft_length, "draft_length")
    total = 0
    frontier = [((), 1, 1)]  # (node, a(node), joint draft probability q(node))
    for _ in range(L):
        next_frontier = []
        for node, a, q_joint in frontier:
            p, q = target.probs(context + node), draft.probs(context + node)
            for t in range(target.vocab_size):
                if q[t] == 0:
                    continue
                a_child = combine(a, q[t], p[t], q_joint)
                total = total + a_child
                if a_child != 0:
                    next_frontier.append((node + (t,), a_child, q_joint * q[t]))
        frontier = next_frontier
    return total


def token_expected_accepted_length(target: LanguageModel, draft: LanguageModel, context=(),
                                   draft_length: int = 1):
    """E[tau] of token-level speculative sampling (Leviathan et al. 2023, arXiv 2211.17192):
    sum_{l=1..L} sum_{x^l} prod_{i<=l} min(q(x_i | x^{i-1}), p(x_i | x^{i-1})).

    Exact (Fraction) for rational models. Cost O(V^L).

    Raises:
        TypeError / ValueError: non-models, vocab mismatch, bad context, draft_length < 1.
    """
    return _tree_sum(target, draft, context, draft_length, lambda a, q_t, p_t, _: a * min(q_t, p_t))


def block_expected_accepted_length(target: LanguageModel, draft: LanguageModel, context=(),
                                   draft_length: int = 1):
    """E[tau] of block verification (Sun et al. 2024, arXiv 2403.10444; the LP optimum of Thomas
    & Pal 2026, arXiv 2602.16961): sum over nodes of a*(x^l), with
    a*(x^l) = min(q(x^l), a*(x^{l-1}) p(x_l | x^{l-1})), a*() = 1, q(x^l) the joint draft
    probability. Exact for rational models. Cost O(V^L).
    """
    return _tree_sum(target, draft, context, draft_length,
                     lambda a, q_t, p_t, q_joint: min(q_joint * q_t, a * p_t))


def leviathan_block_efficiency(acceptance_rate, draft_length: int):
    """(1 - a^(L+1)) / (1 - a): block efficiency under a constant acceptance rate a
    (Leviathan et al. 2023, arXiv 2211.17192, Eq. 1); L + 1 when a = 1.

    Raises:
        ValueError: acceptance_rate outside [0, 1] or draft_length < 1.
    """
    L = _check_positive_int(draft_length, "draft_length")
    a = acceptance_rate
    if not 0 <= a <= 1:
        raise ValueError(f"acceptance_rate: must lie in [0, 1], got {a!r}")
    if a == 1:
        return L + 1
    return (1 - a ** (L + 1)) / (1 - a)
