"""Importance-sampling (IS) multi-draft verification: select ONE draft, then single-draft
speculative sampling (Khisti, Ebrahimi, Dbouk, Behboodi, Memisevic, Louizos 2024, "Multi-Draft
Speculative Sampling: Canonical Architectures and Theoretical Limits", arXiv 2410.18234, ICLR 2025).

Khisti et al.'s canonical decomposition: an optimal K-draft rule (1) picks one token Y_I among the
drafts x_1..x_K with selection probabilities that depend only on the drafts, giving Y_I the law
q_I, then (2) runs single-draft speculative sampling of Y_I against p with proposal q_I. Step (2)
is lossless for ANY selection rule as long as q_I is the exact law of the selected token; the
selection only decides how much is accepted: sum_x min(p(x), q_I(x)). Drafts are K i.i.d. tokens
from q at every node (`drafters.iid_paths`).

- `khisti_step`: the paper's two-draft LP (as the GBV authors' public code `khisti.py`, `node.py`
  implements it), over the full vocabulary, with a pairwise tournament for k > 2 drafts.
- `optimal_is_step`: the optimal selection law for k i.i.d. drafts, whose value is the one-step
  optimum alpha* = min_H p(H) + 1 - q(H)^k (Hu et al. 2025, arXiv 2502.18779).
- `khisti_truncated_step`, `optimal_is_truncated_step`: the same with the LP restricted to s tokens.

Provenance: the papers' full texts were not read (only abstracts / first pages); the two-draft LP
is as the GBV authors' code implements it, and the optimality of the selection law is checked
numerically against alpha* (closed form) and the transport LP. Exactness: for float64 input the
LPs are solved by scipy HiGHS; for exact (Fraction) or symbolic input by the exact simplex of
`verispec.reference.simplex` (closed forms at V = 2), so the rules are exactly lossless and exactly
optimal there, and `verispec prove` runs them on symbolic probabilities at every V. The truncated
variants still solve their LPs in float64 (rounded to exact Fractions for exact input).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..memo import MEMO_VOCAB, by_value
from ..models import check_positive_int
from ..probability import accept_probability, is_exact, is_symbolic, residual
from .multidraft import top_down
from .selection_lp import (TruncatedSelection, TruncatedSetSelection, exact_pair_selection, exact_selection,
                           lp_pair_selection, lp_selection)

__all__ = ["pair_selection", "two_token_pair_selection", "exact_pair_selection", "lp_pair_selection", "khisti_step",
           "TruncatedSelection", "truncated_pair_selection", "khisti_truncated_step", "khisti_truncated_verify",
           "optimal_selection", "two_token_selection", "exact_selection", "lp_selection", "TruncatedSetSelection",
           "truncated_set_selection", "optimal_is_step", "optimal_is_truncated_step", "optimal_is_truncated_verify",
           "khisti_verify", "optimal_is_verify"]

# ---------------------------------------------------------------------------------------------
# Khisti et al.'s two-draft selection


def _float64(probs) -> np.ndarray:
    """A probability vector as float64 [V] (exact entries rounded): one float64 operand makes a
    selection LP float64."""
    return probs if probs.dtype == np.float64 else np.array([float(v) for v in probs], dtype=np.float64)


def pair_selection(p, q1, q2):
    """Khisti et al.'s optimal two-draft IS weights and the law of the selected token.

    Args:
        p: target [V]; q1, q2: laws of the first and second draft [V].

    Returns:
        (keep, q_I): keep[x1][x2] = probability of keeping x_1 (exact Fractions when p, q1, q2 are
        exact); q_I [V] the exact law of the selected token. Memoised; treat as read-only.

    Exact or symbolic p, q1, q2: the LP is solved exactly, in closed form at V = 2
    (`two_token_pair_selection`), else by the exact simplex (`exact_pair_selection`; Fractions
    memoised, symbolic values never). No float64, so `verispec prove` can run the rule on symbolic
    probabilities. Float64 input: scipy HiGHS.
    """
    exact = is_exact(p) and is_exact(q1) and is_exact(q2)
    if exact and len(p) == 2:
        return two_token_pair_selection(p, q1, q2)
    if exact:
        if any(is_symbolic(x) for x in (p, q1, q2)):
            return exact_pair_selection(p, q1, q2)
        return _memo_exact_pair_selection(p, q1, q2)
    return lp_pair_selection(_float64(p), _float64(q1), _float64(q2))


#: `exact_pair_selection` memoised by value (looked up at each call, so a planted replacement counts).
_memo_exact_pair_selection = by_value(lambda p, q1, q2: exact_pair_selection(p, q1, q2))


def two_token_pair_selection(p, q1, q2):
    """Khisti et al.'s two-draft selection at V = 2 in closed form (exact in, exact out).

    q_I(0) = q_1(0) q_2(0) + q_1(0) q_2(1) w[0, 1] + q_1(1) q_2(0) (1 - w[1, 0]) ranges over
    [lo, lo + m] (lo = q_1(0) q_2(0), m = q_1(0) q_2(1) + q_1(1) q_2(0)), and the objective
    min(p(0), q_I(0)) + min(p(1), 1 - q_I(0)) = 1 - |q_I(0) - p(0)| is maximised exactly by
    q_I(0) = clip(p(0), lo, lo + m). That optimum is reached by many w; this one keeps token 0 with
    the same probability f = (q_I(0) - lo) / m whichever draft it is (w[0, 1] = f, w[1, 0] = 1 - f;
    f = 1/2 when m = 0, the pair is then never drafted). The float64 LP (HiGHS) may return another
    optimal vertex: same acceptance, another selection. Not memoised (symbolic probabilities must
    ask the prover on every run).

    Args:
        p, q1, q2: exact distributions [V = 2] (dtype=object).

    Returns:
        (keep, q_I) as `pair_selection`.
    """
    lo = q1[0] * q2[0]
    m = q1[0] * q2[1] + q1[1] * q2[0]
    f = Fraction(1, 2)
    if m > 0:
        f = min(max((p[0] - lo) / m, 0), 1)
    keep = [[1, f], [1 - f, 1]]
    q_sel = q1 * 0  # [2]
    q_sel[0] = lo + m * f
    q_sel[1] = q1[1] * q2[1] + m * (1 - f)
    return keep, q_sel


def _single_draft(p, proposal, y, rand):
    """Single-draft speculative sampling of token y ~ proposal against p (arXiv 2211.17192)."""
    if rand.bernoulli(accept_probability(p[y], proposal[y])):
        return y
    return rand.categorical(residual(p, proposal))


def khisti_step(p, q, drafts, rand) -> int:
    """Khisti et al.'s IS step (pairwise tournament for k > 2), then single-draft SD.

    The two-draft scheme (the LP of the paper's Appendix I, as the GBV authors' code cites it): for
    an ordered pair (x_1, x_2), keep x_1 with probability w[x_1, x_2]; q_I(i) = q_1(i) q_2(i) +
    sum_{j != i} (q_1(i) q_2(j) w[i, j] + q_1(j) q_2(i) (1 - w[j, i])); w maximises
    sum_i min(p(i), q_I(i)) (an LP: max sum z_i, z_i <= p_i, z_i <= q_I(i; w), 0 <= w <= 1). We
    solve it over the FULL vocabulary; the GBV authors' code (`khisti.py::khisti_lp_solver`) keeps
    only the top s = 5 tokens by p - q_1 q_2, and its fixed s = 5 raises IndexError when V < 5.
    For k > 2 drafts we follow that code's pairwise tournament (`node.py::khisti_otlp_solver`):
    the running winner (law q_I) meets the next draft (law q) in a fresh two-draft LP with
    (q_1, q_2) = (q_I, q). With k = 2 this reaches alpha*; with k > 2 it is in general below it.

    Args:
        p, q: target and draft distributions [V] at the node; drafts: the k drafted tokens in
            path order (k i.i.d. draws from q); rand: `Randomness`.
    """
    winner, law = drafts[0], q
    for challenger in drafts[1:]:
        keep, law_next = pair_selection(p, law, q)
        if not rand.bernoulli(keep[winner][challenger]):
            winner = challenger
        law = law_next
    return _single_draft(p, law, winner, rand)


# ---------------------------------------------------------------------------------------------
# The s-truncated two-draft LP (the GBV authors' `khisti_lp_solver`, for large vocabularies)


def truncated_pair_selection(p, q1, q2, s: int) -> TruncatedSelection:
    """`TruncatedSelection(p, q1, q2, s)`: the s-truncated two-draft selection and its law q_I.

    Args:
        p: target [V]; q1, q2: laws of the first and second draft [V]; s: LP tokens, int >= 1.

    Raises:
        TypeError / ValueError: s not an int >= 1.
    """
    s = check_positive_int(s, "truncation")
    if len(p) > MEMO_VOCAB:
        return TruncatedSelection(p, q1, q2, s)
    return _memo_truncated_pair_selection(p, q1, q2, s)


_memo_truncated_pair_selection = by_value(lambda p, q1, q2, s: TruncatedSelection(p, q1, q2, s))


def khisti_truncated_step(p, q, drafts, rand, s: int) -> int:
    """`khisti_step` with the s-truncated selection of every tournament round."""
    winner, law = drafts[0], q
    for challenger in drafts[1:]:
        selection = truncated_pair_selection(p, law, q, s)
        if not rand.bernoulli(selection.keep(winner, challenger)):
            winner = challenger
        law = selection.law
    return _single_draft(p, law, winner, rand)


def khisti_truncated_verify(s: int):
    """Khisti et al.'s IS verifier with the s-truncated LP, top-down on the tree of K i.i.d. paths."""
    def khisti_truncated(p, q, drafts, rand) -> int:
        return khisti_truncated_step(p, q, drafts, rand, s)

    return top_down(khisti_truncated)


# ---------------------------------------------------------------------------------------------
# The optimal selection law for k i.i.d. drafts


def optimal_selection(p, q, k: int):
    """The alpha*-optimal selection law for k i.i.d. drafts from q and the law q_I it induces.

    For each set S of distinct drafted tokens, P(select i | S) solves the LP
    max sum_i min(p(i), q_I(i)), q_I(i) = sum_S Q(S) P(i | S), whose value is alpha*
    (Hu et al. 2025, arXiv 2502.18779; the LP of Khisti et al.). One LP per (p, q, k) with at most
    2^V - 1 sets: a reference for small vocabularies (`global_resolution.Resolution` reaches alpha*
    at any vocabulary size, after Thomas & Pal, arXiv 2511.15898).

    Exactness: for float64 p, q the LP is solved by scipy HiGHS (optimal up to its tolerance,
    ~1e-9). For exact or symbolic p, q it is solved exactly: in closed form at V = 2
    (`two_token_selection`), else by the exact simplex (`exact_selection`, Fractions memoised,
    symbolic values never), so the rule is exactly lossless and exactly optimal, free of float64,
    and `verispec prove` runs it on symbolic probabilities at every V.

    Returns:
        (select, q_I): select[S] = probabilities [len(S)] of choosing each token of the sorted set S
        of distinct drafts (exact Fractions for exact p, q); q_I [V] the exact law of the choice.
        Memoised; treat as read-only.
    """
    exact = is_exact(p) and is_exact(q)
    if exact and len(p) == 2:
        return two_token_selection(p, q, int(k))
    if exact:
        if is_symbolic(p) or is_symbolic(q):
            return exact_selection(p, q, int(k))
        return _memo_exact_selection(p, q, int(k))
    return lp_selection(_float64(p), _float64(q), int(k))


#: `exact_selection` memoised by value (looked up at each call, as `_memo_exact_pair_selection`).
_memo_exact_selection = by_value(lambda p, q, k: exact_selection(p, q, k))


def two_token_selection(p, q, k: int):
    """The optimal selection law for k i.i.d. drafts at V = 2, in closed form (exact in, exact out).

    Only the set S = {0, 1} has a choice: pick 0 with probability a. Its mass is
    Q(S) = 1 - q(0)^k - q(1)^k and q_I(0) = q(0)^k + Q(S) a, so the objective
    min(p(0), q_I(0)) + min(p(1), 1 - q_I(0)) = 1 - |q_I(0) - p(0)| is maximised by the unique
    a = clip((p(0) - q(0)^k) / Q(S), 0, 1) when Q(S) > 0 (the LP's optimum, not a tolerance of it);
    when Q(S) = 0 the set is never drafted and a = 1/2 is immaterial. Not memoised: every
    comparison is made afresh (symbolic probabilities must ask the prover on every run).

    Args:
        p, q: exact distributions [V = 2] (dtype=object). k: drafts, int >= 1.

    Returns:
        (select, q_I) as `optimal_selection`: select[(0,)] = [1], select[(1,)] = [1],
        select[(0, 1)] = [a, 1 - a]; q_I [2].
    """
    single = [q[0] ** k, q[1] ** k]  # Q({0}), Q({1})
    both = 1 - single[0] - single[1]  # Q({0, 1})
    a = Fraction(1, 2)
    if k > 1 and both > 0:
        a = min(max((p[0] - single[0]) / both, 0), 1)
    select = {(0,): np.array([1], dtype=object), (1,): np.array([1], dtype=object),
              (0, 1): np.array([a, 1 - a], dtype=object)}
    q_sel = q * 0  # [2]
    q_sel[0] = single[0] + both * a if k > 1 else q[0]
    q_sel[1] = single[1] + both * (1 - a) if k > 1 else q[1]
    return select, q_sel


def truncated_set_selection(p, q, k: int, s: int) -> TruncatedSetSelection:
    """`TruncatedSetSelection(p, q, k, s)`.

    Raises:
        TypeError / ValueError: k or s not an int >= 1.
    """
    k, s = check_positive_int(k, "num_paths"), check_positive_int(s, "truncation")
    if len(p) > MEMO_VOCAB:
        return TruncatedSetSelection(p, q, k, s)
    return _memo_truncated_set_selection(p, q, k, s)


_memo_truncated_set_selection = by_value(lambda p, q, k, s: TruncatedSetSelection(p, q, k, s))


def optimal_is_truncated_step(p, q, drafted_set, k, rand, s: int) -> int:
    """`optimal_is_step` with the s-truncated selection LP (`TruncatedSetSelection`)."""
    selection = truncated_set_selection(p, q, k, s)
    probs = np.array(selection.probabilities(drafted_set), dtype=object if is_exact(q) else np.float64)
    y = drafted_set[rand.categorical(probs)]
    return _single_draft(p, selection.law, y, rand)


def optimal_is_truncated_verify(s: int):
    """The s-truncated optimal IS verifier, top-down on the tree of K i.i.d. paths."""
    def optimal_is_truncated(p, q, counts, rand) -> int:
        return optimal_is_truncated_step(p, q, tuple(sorted(counts)), sum(counts.values()), rand, s)

    return top_down(optimal_is_truncated, counts=True)


def optimal_is_step(p, q, drafted_set, k, rand) -> int:
    """Optimal IS selection among the distinct drafted tokens, then single-draft SD."""
    select, q_sel = optimal_selection(p, q, k)
    y = drafted_set[rand.categorical(select[tuple(drafted_set)])]
    return _single_draft(p, q_sel, y, rand)


# ---------------------------------------------------------------------------------------------
# Tree verifiers (top-down: enter the child equal to the emitted token)


def _optimal_is_node(p, q, counts, rand) -> int:
    """`optimal_is_step` on a node's drafted set and its number of i.i.d. drafts."""
    return optimal_is_step(p, q, tuple(sorted(counts)), sum(counts.values()), rand)


khisti_verify = top_down(khisti_step)
khisti_verify.__doc__ = "Khisti et al.'s IS verifier applied top-down on the tree of K i.i.d. paths."
optimal_is_verify = top_down(_optimal_is_node, counts=True)
optimal_is_verify.__doc__ = ("The alpha*-optimal IS verifier applied top-down on the tree of K i.i.d. paths (reads "
                             "only the set of drafted children and how many paths pass through the node).")
