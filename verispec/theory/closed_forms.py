"""Closed forms for expected accepted length, checked against `verispec.reference.exact`.

Notation (docs/algorithms.md): target p, draft q, draft length L, accepted length tau;
block efficiency = E[tau] + 1.
"""

from __future__ import annotations

from numbers import Rational, Real

import numpy as np

from ..reference.draft_sets import draft_set_law
from ..reference.deprecation import renamed_keywords
from ..reference.models import LanguageModel, check_positive_int, check_pair, check_prefix
from ..reference.probability import accept_probability, align, as_probs, residual
from ..reference.verifiers import spectr_rho
from ..reference.verifiers.gbv import rank_key


def _tree_sum(target, draft, context, draft_length, combine):
    """sum over nodes x^l (1 <= l <= L) of the V-ary tree of a(x^l), where
    a(x^l) = combine(a(x^{l-1}), q(x_l | x^{l-1}), p(x_l | x^{l-1}), qjoint(x^{l-1}))."""
    check_pair(target, draft)
    if draft is None:
        raise TypeError("draft: the closed forms need a draft LanguageModel, got None")
    context = check_prefix(context, target.vocab_size, "context")
    L = check_positive_int(draft_length, "draft_length")
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
    L = check_positive_int(draft_length, "draft_length")
    a = acceptance_rate
    if not 0 <= a <= 1:
        raise ValueError(f"acceptance_rate: must lie in [0, 1], got {a!r}")
    if a == 1:
        return L + 1
    return (1 - a ** (L + 1)) / (1 - a)


# ---------------------------------------------------------------------------------------------
# One position, K drafts (docs/algorithms.md, "One-step multi-draft rules"; docs/theory.md, "One position,
# K drafts"). p, q: target and draft distributions [V] at one node; K drafts.
# ---------------------------------------------------------------------------------------------


def _one_step_inputs(p, q, num_paths):
    p = as_probs(p, "p")
    q = as_probs(q, "q", len(p))
    K = check_positive_int(num_paths, "num_paths")
    p, q = align(p, q)
    return p, q, K


def _sorted_by_ratio(p, q):
    """Token ids sorted by p/q ascending (q = 0 last, as ratio +inf); ties by token id — the
    ranking GBV uses (`verifiers.gbv.rank_key`)."""
    return sorted(range(len(p)), key=lambda t: rank_key(p, q, t))


@renamed_keywords(num_drafts="num_paths")
def optimal_multidraft_acceptance(p, q, num_paths: int):
    """alpha* = min over token sets H of p(H) + 1 - q(H)^K: the best one-step acceptance
    P(Y in drafts) of any valid verifier of K i.i.d. drafts from q (Hu et al. 2025,
    arXiv 2502.18779; Khisti et al. 2024, arXiv 2410.18234; the SpecTr transport LP,
    arXiv 2310.15141, by max-flow/min-cut).

    An optimal H is a prefix of the tokens sorted by p/q ascending (1 - m^K is concave in m, so
    for every tangent slope the best H is a ratio threshold set), so this costs O(V log V).

    Args:
        p, q: distributions [V] (float64 or Fraction; exact in, exact out). num_paths: K >= 1.

    Raises:
        TypeError / ValueError: p or q not a distribution, mismatched lengths, K < 1.
    """
    p, q, K = _one_step_inputs(p, q, num_paths)
    best = 1  # H = {} gives p({}) + 1 - 0 = 1
    p_h = q_h = 0
    for t in _sorted_by_ratio(p, q):
        p_h, q_h = p_h + p[t], q_h + q[t]
        best = min(best, p_h + 1 - min(q_h, 1) ** K)
    return best


@renamed_keywords(num_drafts="num_paths")
def multidraft_cut_value(p, q, num_paths: int, tokens, replacement: bool = True):
    """p(H) + P(some draft outside H) for the token set H = `tokens`: an upper bound on the
    one-step acceptance of any valid verifier (weak duality of the transport LP, arXiv 2310.15141).
    With replacement P(some draft outside H) = 1 - q(H)^K; without replacement it is 1 - P(all
    distinct draws lie in H), from `draft_set_law`."""
    p, q, K = _one_step_inputs(p, q, num_paths)
    H = set(int(t) for t in tokens)
    p_h = sum(p[t] for t in H)
    if replacement:
        return p_h + 1 - min(sum(q[t] for t in H), 1) ** K
    inside = sum(prob for drafted, prob in draft_set_law(q, K, replacement=False).items() if H.issuperset(drafted))
    return p_h + 1 - inside


@renamed_keywords(num_drafts="num_paths")
def sorted_prefix_dual(p, q, num_paths: int, replacement: bool = True):
    """min over prefixes H of the tokens sorted by p/q ascending of `multidraft_cut_value`.

    With replacement this IS alpha* (`optimal_multidraft_acceptance`). Without replacement it is
    an upper bound on alpha*; docs/theory.md reports it equal to the LP in random trials (unproven) —
    `verispec.theory.lp.multidraft(..., replacement=False)` decides.
    """
    order = _sorted_by_ratio(*_one_step_inputs(p, q, num_paths)[:2])
    return min(multidraft_cut_value(p, q, num_paths, order[:i], replacement)
               for i in range(len(order) + 1))


@renamed_keywords(num_drafts="num_paths")
def nss_acceptance(p, q, num_paths: int):
    """One-step acceptance of naive multi-draft sampling (Y ~ p, accepted when drafted; SpecInfer,
    Miao et al. 2024, arXiv 2305.09781): sum_x p(x) (1 - (1 - q(x))^K)."""
    p, q, K = _one_step_inputs(p, q, num_paths)
    return sum(p[x] * (1 - (1 - q[x]) ** K) for x in range(len(p)))


@renamed_keywords(num_drafts="num_paths")
def rrs_acceptance(p, q, num_paths: int):
    """One-step acceptance of recursive rejection sampling with K i.i.d. drafts (SpecInfer,
    arXiv 2305.09781): 1 - prod_k (1 - sum_x min(p_k(x), q(x))), p_1 = p,
    p_{k+1} = norm(max(p_k - q, 0))."""
    p, q, K = _one_step_inputs(p, q, num_paths)
    reject, current = 1, p
    for _ in range(K):
        reject = reject * (1 - sum(min(current[x], q[x]) for x in range(len(p))))
        current = residual(current, q)
    return 1 - reject


@renamed_keywords(num_drafts="num_paths")
def spectr_acceptance(p, q, num_paths: int):
    """One-step acceptance of SpecTr's K-SEQ (Sun et al. 2023, arXiv 2310.15141):
    1 - (1 - beta(rho))^K, beta(rho) = sum_x min(q(x), p(x)/rho), rho in [1, K] from
    `verispec.reference.verifiers.spectr_rho` (bisection). float64."""
    p, q, K = _one_step_inputs(p, q, num_paths)
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    rho = spectr_rho(p, q, K)
    beta = q.clip(max=p / rho).sum()
    return 1 - (1 - beta) ** K


@renamed_keywords(num_drafts="num_paths")
def rrsw_acceptance(p, q, num_paths: int):
    """One-step acceptance of RRS without replacement (Jeon et al. 2024, arXiv 2402.14160):
    drafts are K successive draws from q renormalised over unused tokens; x_k is accepted with
    probability min(1, p_k(x_k)/q_k(x_k)); on rejection p_{k+1} = norm(max(p_k - q_k, 0)) and
    q_{k+1} = q_k with x_k zeroed and renormalised. Computed by recursion over the draws,
    O(V^K) (exact for Fractions)."""
    p, q, K = _one_step_inputs(p, q, num_paths)

    def accept(current, proposal, left):
        if left == 0 or not any(x > 0 for x in proposal):
            return 0
        total = 0
        for x in range(len(proposal)):
            if proposal[x] == 0:
                continue
            a = accept_probability(current[x], proposal[x])
            rest = 0
            if a != 1:
                nxt = proposal.copy()
                nxt[x] = 0
                if nxt.sum() > 0:
                    nxt = nxt / nxt.sum()
                rest = accept(residual(current, proposal), nxt, left - 1)
            total = total + proposal[x] * (a + (1 - a) * rest)
        return total

    return accept(p, q, K)


@renamed_keywords(num_drafts="num_paths")
def greedy_draft_acceptance(p, q, num_paths: int):
    """The optimal one-step acceptance of Hu et al.'s greedy draft sampling (arXiv 2502.18779):
    drafts G = the K - 1 most likely tokens of q (ties to the lower id; only q > 0, and at most
    m - 1 of them when q has m positive tokens) and one token from q_last = norm(q off G).

    By the transport dual alpha* = min_H p(H) + P(some draft outside H); an H missing a token of G
    costs >= 1, so alpha* = p(G) + sum_{y not in G} min(p(y), q_last(y)) (derived here; <= 1).
    Written from the definition, not from `verispec.reference.drafters.greedy_draft`, so the tests
    compare two independent computations.

    Args:
        p, q: distributions [V] (float64 or Fraction; exact in, exact out). num_paths: K >= 1.

    Raises:
        TypeError / ValueError: p or q not a distribution, mismatched lengths, K < 1.
    """
    p, q, K = _one_step_inputs(p, q, num_paths)
    support = [t for t in range(len(q)) if q[t] > 0]
    ranked = sorted(support, key=lambda t: (-q[t], t))
    greedy = set(ranked[:min(K - 1, len(support) - 1)])
    rest = sum(q[t] for t in support if t not in greedy)
    return sum(p[t] for t in greedy) + sum(min(p[t], q[t] / rest) for t in support if t not in greedy)


# ---------------------------------------------------------------------------------------------
# lossy verification at one position (docs/theory.md, "The optimal lossy frontier")


def check_tv_budget(tv, name: str = "tv"):
    """Validate a total-variation budget eps: a real number (float, int or Fraction) in [0, 1].

    Raises:
        TypeError: not a real number (bools and strings included).
        ValueError: NaN or outside [0, 1].
    """
    if isinstance(tv, bool) or not isinstance(tv, (Rational, Real)):
        raise TypeError(f"{name}: expected a real number in [0, 1], got {type(tv).__name__}")
    if not 0 <= tv <= 1:  # False for NaN too
        raise ValueError(f"{name}: a total variation budget must lie in [0, 1], got {tv!r}")
    return tv


def optimal_lossy_acceptance(p, q, tv):
    """alpha*(eps) = min(1, sum_t min(p(t), q(t)) + eps): the best one-step acceptance P(Y = X) of
    any verifier of one draft X ~ q whose output law r has TV(r, p) <= eps (proof in
    docs/theory.md: P(Y = X) <= 1 - TV(q, r) <= 1 - TV(q, p) + eps, attained by
    `optimal_lossy_output`). eps = 0 is speculative sampling's sum min(p, q) (Leviathan et al.
    2023, arXiv 2211.17192).

    Args:
        p, q: target and draft distributions [V] (float64 or Fraction; exact in, exact out).
        tv: the budget eps in [0, 1].

    Raises:
        TypeError / ValueError: p or q not a distribution, mismatched lengths, bad tv.
    """
    p, q, _ = _one_step_inputs(p, q, 1)
    tv = check_tv_budget(tv)
    return min(1, sum(np.minimum(p, q)) + tv)


def optimal_lossy_output(p, q, tv) -> np.ndarray:
    """r_eps = p + w (q - p) with w = min(1, eps / TV(p, q)) (w = 0 when p = q): an output law with
    TV(r_eps, p) = min(eps, TV(p, q)) and sum min(q, r_eps) = `optimal_lossy_acceptance`, so
    speculative sampling against r_eps attains the one-step frontier. It is DIVERSE's static
    ensemble target (1 - w) p + w q.

    Returns:
        [V], the dtype of p and q (Fractions in, Fractions out).

    Raises:
        TypeError / ValueError: as `optimal_lossy_acceptance`.
    """
    p, q, _ = _one_step_inputs(p, q, 1)
    tv = check_tv_budget(tv)
    distance = sum(abs(p - q)) / 2
    weight = 0 if distance == 0 else min(1, tv / distance)
    return p + weight * (q - p)
