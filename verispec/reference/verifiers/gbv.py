"""Greedy multi-path block verification, GBV (Thomas & Pal 2026, arXiv 2602.16961).

Drafts: K i.i.d. paths from q. (1) At every node u rank tokens by r_u(t) = p(t|u) / q(t|u)
ascending (ties by token id); this orders whole paths lexicographically. (2) Select the
lexicographic maximum X* of the K drafted paths (descend, always to the highest-ranked drafted
child). (3) X* is the maximum of K i.i.d. paths, so its conditionals are the skewed draft
q_skew(t|u) ∝ (A + y(t) + z(t))^K - (A + y(t))^K. (4) Run block verification on X* with q_skew.
With K = 1, q_skew = q and GBV is exactly block verification.
"""

from __future__ import annotations

from ..probability import align, ratio
from .block import block_rule


def rank_key(p, q, t):
    """Sort key of token t at a node: r(t) = p(t)/q(t) ascending, ties by token id."""
    return (ratio(p[t], q[t]), t)


def mass_below(p, q) -> dict:
    """{t: sum of q(t') over tokens t' ranked strictly below t} (the cdf before t in rank order)."""
    below, cumulative = {}, 0
    for t in sorted(range(len(q)), key=lambda t: rank_key(p, q, t)):
        below[t] = cumulative
        cumulative = cumulative + q[t]
    return below


def skewed_proposal(p, q, A, x, num_paths):
    """q_skew(. | u) of the best-of-K path at node u -> [V].

    Args:
        p, q: target and draft distributions at u [V].
        A: mass of full paths ranked strictly below every path through u.
        x: q(u), the joint draft probability of u.
        num_paths: K.

    Uses the factorised form q(t) * sum_{i<K} a^i b^(K-1-i) with a = (A + y + z)/s,
    b = (A + y)/s, s = A + x in [.., 1]: (a^K - b^K) without catastrophic cancellation, and exact
    for Fractions. Returns a normalised [V] vector.
    """
    zero = q[0] * 0  # Fraction(0) for exact q: int / int would turn into a float below
    A, x = A + zero, x + zero
    below = mass_below(p, q)
    scale = A + x
    weights = q * 0  # [V], same number system as q
    for t in range(len(q)):
        a = (A + x * (below[t] + q[t])) / scale
        b = (A + x * below[t]) / scale
        weights[t] = q[t] * sum(a ** i * b ** (num_paths - 1 - i) for i in range(num_paths))
    return weights / weights.sum()


def best_path(target, context, draft, num_paths):
    """Descend to X*, the lexicographic maximum of the drafted paths; return (X*, q_skew list)."""
    node, A, x = (), 0, 1
    skews = []
    while draft.num_paths(node) and draft.counts(node):
        p, q = align(target.probs(context + node), draft.proposal(node))  # [V], [V]
        best = max(draft.child_set(node), key=lambda t: rank_key(p, q, t))
        skews.append(skewed_proposal(p, q, A, x, num_paths))
        A, x = A + x * mass_below(p, q)[best], x * q[best]
        node = node + (best,)
    return node, skews


def gbv_verify(target, draft_model, context, draft, rand) -> tuple[int, ...]:
    """GBV: block verification of the best drafted path against its skewed draft law."""
    path, skews = best_path(target, context, draft, draft.num_paths(()))
    pairs = [align(target.probs(context + path[:i]), skew) for i, skew in enumerate(skews)]  # ([V], [V])
    ps = [p for p, _ in pairs] + [target.probs(context + path)]
    qs = [skew for _, skew in pairs]
    return block_rule(ps, qs, path, rand)
