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

import functools
import itertools
from fractions import Fraction

import numpy as np
from scipy.optimize import linprog

from ..draft_sets import draft_set_law
from ..models import check_positive_int
from ..probability import accept_probability, is_exact, is_symbolic, residual
from ..simplex import maximize
from .multidraft import top_down

#: Denominator used to turn LP selection probabilities into exact Fractions.
_GRID = 10 ** 12


def _linprog(c, a_ub, b_ub, a_eq=None, b_eq=None):
    """minimise c x s.t. a_ub x <= b_ub, a_eq x = b_eq, 0 <= x <= 1 (scipy HiGHS) -> x."""
    result = linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=(0, 1), method="highs")
    if not result.success:  # pragma: no cover - the LPs here are always feasible and bounded
        raise RuntimeError(f"selection LP failed: {result.message}")
    return result.x


def _exact_law(values, exact: bool):
    """Clip LP values to [0, 1] and make them a probability vector summing to exactly 1."""
    values = [min(max(float(v), 0.0), 1.0) for v in values]
    if exact:
        out = [Fraction(round(v * _GRID), _GRID) for v in values]
        out[-1] = 1 - sum(out[:-1])
        if out[-1] < 0:  # round-off pushed the others above 1: renormalise exactly
            out[-1] = Fraction(0)
            total = sum(out)
            out = [v / total for v in out]
        return out
    total = sum(values)
    return [v / total for v in values] if total > 0 else [1.0 / len(values)] * len(values)


# ---------------------------------------------------------------------------------------------
# Khisti et al.'s two-draft LP


@functools.lru_cache(maxsize=4096)
def _pair_weights(p_key, q1_key, q2_key, offset_key=None) -> np.ndarray:
    """w [V, V] (float64) maximising sum_i min(p_i, q_I(i; w)) for drafts x_1 ~ q_1, x_2 ~ q_2;
    `offset` [V] (default 0) is selection mass q_I(i) gets from pairs outside these V tokens."""
    p, q1, q2 = (np.asarray(k, dtype=np.float64) for k in (p_key, q1_key, q2_key))
    V = len(p)
    offset = np.zeros(V) if offset_key is None else np.asarray(offset_key, dtype=np.float64)
    pairs = [(i, j) for i in range(V) for j in range(V) if i != j]
    n_w = len(pairs)
    # variables: w[i, j] for ordered pairs (n_w), then z_i (V); minimise -sum z
    c = np.concatenate([np.zeros(n_w), -np.ones(V)])
    a_ub = np.zeros((2 * V, n_w + V))
    b_ub = np.zeros(2 * V)
    for i in range(V):
        a_ub[i, n_w + i] = 1.0
        b_ub[i] = p[i]
        # z_i - sum_j q1_i q2_j w[i,j] + sum_j q1_j q2_i w[j,i] <= q1_i q2_i + sum_{j != i} q1_j q2_i
        row = V + i
        a_ub[row, n_w + i] = 1.0
        b_ub[row] = q1[i] * q2[i] + offset[i]
        for k, (a, b) in enumerate(pairs):
            if a == i:
                a_ub[row, k] -= q1[i] * q2[b]
            elif b == i:
                a_ub[row, k] += q1[a] * q2[i]
                b_ub[row] += q1[a] * q2[i]
    x = _linprog(c, a_ub, b_ub)
    w = np.full((V, V), 0.5)
    for k, (a, b) in enumerate(pairs):
        w[a, b] = x[k]
    return w


def _key(probs):
    """A hashable copy of a probability vector (Fractions kept exact)."""
    return tuple(probs.tolist()) if is_exact(probs) else tuple(float(v) for v in probs)


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
        return _memo_exact_pair_selection(_key(p), _key(q1), _key(q2))
    return _pair_selection(_key(p), _key(q1), _key(q2), exact)


@functools.lru_cache(maxsize=4096)
def _memo_exact_pair_selection(p_key, q1_key, q2_key):
    return exact_pair_selection(*(np.array(k, dtype=object) for k in (p_key, q1_key, q2_key)))


def exact_pair_selection(p, q1, q2):
    """Khisti et al.'s two-draft LP solved exactly (`verispec.reference.simplex`), any V.

    The LP of `khisti_step` in the variables v[i, j] = q_1(i) q_2(j) w[i, j] (the mass of the
    ordered pair (i, j) that keeps x_1 = i) and z_i: maximise sum_i z_i subject to z_i <= p(i),
    z_i <= q_I(i) = q_2(i) + sum_{j != i} (v[i, j] - v[j, i]) (as q_1 sums to 1) and
    0 <= v[i, j] <= q_1(i) q_2(j).
    Its matrix is concrete (entries 0, 1, -1): the symbolic data of the prover sit in the bounds
    only, so the simplex branches only on its ratio tests. Then w[i, j] = v[i, j] / (q_1(i) q_2(j))
    (1/2 for a pair of mass 0: never drafted). Not memoised (`pair_selection` memoises Fractions).

    Args:
        p, q1, q2: exact (Fraction) or symbolic distributions [V] (dtype=object).

    Returns:
        (keep, q_I) as `pair_selection`, exact: an optimum of the LP, not a tolerance of it.
    """
    V = len(p)
    pairs = [(i, j) for i in range(V) for j in range(V) if i != j]
    n = len(pairs)  # variables: v[pairs] (n), then z (V)
    rows = [[0] * (n + V) for _ in range(2 * V + n)]
    bounds = [p[i] for i in range(V)] + [q2[i] for i in range(V)] + [q1[a] * q2[b] for a, b in pairs]
    for i in range(V):
        rows[i][n + i] = rows[V + i][n + i] = 1  # z_i <= p(i); z_i - q_I(i) + q_2(i) <= q_2(i)
    for k, (a, b) in enumerate(pairs):
        rows[V + a][k], rows[V + b][k], rows[2 * V + k][k] = -1, 1, 1
    x, _ = maximize([0] * n + [1] * V, rows, bounds)
    keep = [[1] * V for _ in range(V)]
    for k, (a, b) in enumerate(pairs):
        mass = bounds[2 * V + k]
        keep[a][b] = x[k] / mass if mass > 0 else Fraction(1, 2)
    q_sel = q1 * 0  # [V]
    for i in range(V):
        q_sel[i] = q2[i] + sum(x[k] if a == i else -x[k] for k, (a, b) in enumerate(pairs) if i in (a, b))
    return keep, q_sel


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


@functools.lru_cache(maxsize=4096)
def _pair_selection(p_key, q1_key, q2_key, exact: bool):
    dtype = object if exact else np.float64
    p, q1, q2 = (np.array(k, dtype=dtype) for k in (p_key, q1_key, q2_key))
    w = _pair_weights(*(tuple(float(v) for v in k) for k in (p_key, q1_key, q2_key)))
    V = len(p)
    keep = [[1 if i == j else _exact_law([w[i, j], 1 - w[i, j]], exact)[0] for j in range(V)]
            for i in range(V)]
    q_sel = q1 * 0  # [V]
    for i, j in itertools.product(range(V), range(V)):
        mass = q1[i] * q2[j]
        if mass != 0:
            q_sel[i] = q_sel[i] + mass * keep[i][j]
            q_sel[j] = q_sel[j] + mass * (1 - keep[i][j])
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


class TruncatedSelection:
    """Khisti et al.'s two-draft selection with the LP restricted to s tokens.

    Tokens are ranked by p - q_1 q_2, descending (ties: lower id first); Omega = the top s. A pair
    with both drafts in Omega is selected by the two-draft LP over Omega (w[x_1, x_2] = probability
    of keeping x_1); any other pair keeps the draft of lower rank. The law of the selected token is
    then, exactly, with T_m(i) = q_m-mass of the tokens ranked after i and Q_m = q_m(outside Omega):

        i outside Omega: q_I(i) = q_1(i) q_2(i) + q_1(i) T_2(i) + T_1(i) q_2(i)
        i in Omega:      q_I(i) = q_1(i) q_2(i) + q_1(i) Q_2 + Q_1 q_2(i)
                                  + sum_{j in Omega, j != i} q_1(i) q_2(j) w[i, j] + q_1(j) q_2(i) (1 - w[j, i])

    and the LP maximises sum_{i in Omega} min(p(i), q_I(i)). With s >= V it is `pair_selection`.
    O(V log V) numpy plus an LP with s(s - 1) variables. The truncation and the lower-rank rule
    are those of the GBV authors' public code (`khisti.py::khisti_lp_solver`,
    `khisti_pair_select`); the closed form of q_I is derived here and exact (Fractions in, Fractions
    out), so the rule stays lossless for every s.

    Attributes:
        omega: the s tokens of Omega in token-id order; law: q_I [V].
    """

    def __init__(self, p, q1, q2, s: int):
        exact = is_exact(p) and is_exact(q1) and is_exact(q2)
        V = len(p)
        order, self.rank = _ranking(p, q1 * q2, exact)
        self.omega = tuple(sorted(int(t) for t in order[:min(s, V)]))
        q1_out = q1.sum() - sum(q1[t] for t in self.omega)
        q2_out = q2.sum() - sum(q2[t] for t in self.omega)
        sub = list(self.omega)
        offset = q1[sub] * q2_out + q1_out * q2[sub]  # [s]
        w = _pair_weights(*(tuple(float(v) for v in x) for x in (p[sub], q1[sub], q2[sub], offset)))
        self.keep_in = {(a, b): _exact_law([w[i, j], 1 - w[i, j]], exact)[0]
                        for i, a in enumerate(sub) for j, b in enumerate(sub) if i != j}
        self.law = self._law(q1, q2, order, sub)

    def keep(self, x1: int, x2: int):
        """Probability of keeping the first draft x1 against the second draft x2."""
        if x1 == x2:
            return 1
        if (x1, x2) in self.keep_in:
            return self.keep_in[(x1, x2)]
        return 1 if self.rank[x1] < self.rank[x2] else 0

    def _law(self, q1, q2, order, sub):
        tail1 = np.cumsum(q1[order][::-1])[::-1] - q1[order]  # [V] by rank: mass ranked after
        tail2 = np.cumsum(q2[order][::-1])[::-1] - q2[order]
        law = q1 * 0  # [V]
        law[order] = q1[order] * q2[order] + q1[order] * tail2 + tail1 * q2[order]
        q1_out = q1.sum() - sum(q1[t] for t in sub)
        q2_out = q2.sum() - sum(q2[t] for t in sub)
        for a in sub:
            mass = q1[a] * q2[a] + q1[a] * q2_out + q1_out * q2[a]
            for b in sub:
                if a != b:
                    mass = mass + q1[a] * q2[b] * self.keep_in[(a, b)] + q1[b] * q2[a] * (1 - self.keep_in[(b, a)])
            law[a] = mass
        return law


def _ranking(p, mass, exact: bool):
    """Tokens by p - mass descending, ties to the lower id -> (order [V]: rank -> token, rank [V])."""
    V = len(p)
    if exact:  # rank on the exact scores
        order = np.array(sorted(range(V), key=lambda i: (-(p[i] - mass[i]), i)), dtype=np.int64)
    else:
        order = np.argsort(-(np.asarray(p, dtype=np.float64) - np.asarray(mass, dtype=np.float64)), kind="stable")
    rank = np.empty(V, dtype=np.int64)
    rank[order] = np.arange(V)
    return order, rank


def truncated_pair_selection(p, q1, q2, s: int) -> TruncatedSelection:
    """`TruncatedSelection(p, q1, q2, s)`: the s-truncated two-draft selection and its law q_I.

    Args:
        p: target [V]; q1, q2: laws of the first and second draft [V]; s: LP tokens, int >= 1.

    Raises:
        TypeError / ValueError: s not an int >= 1.
    """
    return _memo(TruncatedSelection, (p, q1, q2), (check_positive_int(s, "truncation"),))


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


@functools.lru_cache(maxsize=4096)
def _set_selection(p_key, q_key, k: int):
    """{set S of distinct drafted tokens: [P(select S[j] | S)]} (float64) from the selection LP."""
    p, q = np.asarray(p_key, dtype=np.float64), np.asarray(q_key, dtype=np.float64)
    V = len(p)
    law = draft_set_law(q, k)
    sets = sorted(law)
    index = [(s, t) for s in sets for t in s]  # variables x[S, t] = Q(S) P(t | S)
    n = len(index)
    c = np.concatenate([np.zeros(n), -np.ones(V)])
    a_eq = np.zeros((len(sets), n + V))
    b_eq = np.array([float(law[s]) for s in sets])
    a_ub = np.zeros((2 * V, n + V))
    b_ub = np.concatenate([p, np.zeros(V)])
    for col, (s, t) in enumerate(index):
        a_eq[sets.index(s), col] = 1.0
        a_ub[V + t, col] = -1.0  # z_t - q_I(t) <= 0
    for t in range(V):
        a_ub[t, n + t] = 1.0
        a_ub[V + t, n + t] = 1.0
    x = _linprog(c, a_ub, b_ub, a_eq, b_eq)
    out = {}
    for s in sets:
        mass = float(law[s])
        out[s] = [x[index.index((s, t))] / mass for t in s]
    return out


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
        return _memo_exact_selection(_key(p), _key(q), int(k))
    return _optimal_selection(_key(p), _key(q), int(k), exact)


@functools.lru_cache(maxsize=4096)
def _memo_exact_selection(p_key, q_key, k: int):
    return exact_selection(np.array(p_key, dtype=object), np.array(q_key, dtype=object), k)


def exact_selection(p, q, k: int):
    """The optimal selection law for k i.i.d. drafts, its LP solved exactly (any V).

    Q(S) = sum_{R subset of S} (-1)^{|S| - |R|} q(R)^k is the probability that the distinct drafts
    are exactly S. Variables x[S, t] = Q(S) P(t | S) for |S| >= 2 and t in S but its last token
    (which takes the rest, Q(S) - sum_t x[S, t]) and z_t: maximise sum_t z_t subject to
    z_t <= p(t), z_t <= q_I(t) and sum_t x[S, t] <= Q(S), x >= 0. The matrix is concrete (0, 1, -1),
    so on the prover's symbolic reals the simplex (`verispec.reference.simplex`) branches only on
    its ratio tests. P(t | S) = x[S, t] / Q(S) (uniform when Q(S) = 0: S is never drafted).

    Args:
        p, q: exact (Fraction) or symbolic distributions [V] (dtype=object); k: drafts, int >= 1.

    Returns:
        (select, q_I) as `optimal_selection` (select also lists the sets of mass 0), exact.
    """
    V = len(p)
    sets = [S for size in range(1, min(k, V) + 1) for S in itertools.combinations(range(V), size)]
    mass = {S: sum((-1) ** (len(S) - len(R)) * sum(q[list(R)]) ** k
                   for j in range(1, len(S) + 1) for R in itertools.combinations(S, j)) for S in sets}
    choices = [(S, t) for S in sets if len(S) > 1 for t in S[:-1]]
    n, shared = len(choices), [S for S in sets if len(S) > 1]
    rows = [[0] * (n + V) for _ in range(2 * V + len(shared))]
    bounds = [p[t] for t in range(V)] + [sum(mass[S] for S in sets if S[-1] == t) for t in range(V)]
    bounds += [mass[S] for S in shared]
    for t in range(V):
        rows[t][n + t] = rows[V + t][n + t] = 1  # z_t <= p(t); z_t - q_I(t) <= 0
    for col, (S, t) in enumerate(choices):
        rows[V + t][col] -= 1
        rows[V + S[-1]][col] += 1  # the last token of S gets what the others do not
        rows[2 * V + shared.index(S)][col] = 1
    x, _ = maximize([0] * n + [1] * V, rows, bounds)
    select, q_sel = {}, q * 0  # q_sel [V]
    for S in sets:
        taken = [x[col] for col, (R, _) in enumerate(choices) if R == S]
        share = taken + [mass[S] - sum(taken)]  # [|S|]: Q(S) P(t | S)
        for t, value in zip(S, share):
            q_sel[t] = q_sel[t] + value
        if len(S) == 1:
            select[S] = np.array([1], dtype=object)
        elif mass[S] > 0:
            select[S] = np.array([v / mass[S] for v in share], dtype=object)
        else:
            select[S] = np.array([Fraction(1, len(S))] * len(S), dtype=object)
    return select, q_sel


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


@functools.lru_cache(maxsize=4096)
def _optimal_selection(p_key, q_key, k: int, exact: bool):
    dtype = object if exact else np.float64
    q = np.array(q_key, dtype=dtype)
    table = _set_selection(tuple(float(v) for v in p_key), tuple(float(v) for v in q_key), k)
    select = {s: np.array(_exact_law(v, exact), dtype=dtype) for s, v in table.items()}
    law = draft_set_law(q, k)
    q_sel = q * 0  # [V]
    for s, probs in select.items():
        for t, prob in zip(s, probs):
            q_sel[t] = q_sel[t] + law[s] * prob
    return select, q_sel


class TruncatedSetSelection:
    """The optimal IS selection law for k i.i.d. drafts with its LP restricted to s tokens.

    Tokens are ranked by p - q^k, descending (ties: lower id first; by analogy with the GBV
    authors' p - q_1 q_2 for two drafts); Omega = the top s. A set S of distinct drafted tokens
    inside Omega picks its token by the selection LP over the sets inside Omega (at most
    sum_{j <= k} C(s, j) sets); any other set picks its token of lowest rank. With T(i) the q-mass
    ranked after i and U(i) the q-mass of Omega ranked after i, the law of the pick is, exactly:

        i not in Omega: q_I(i) = (q(i) + T(i))^k - T(i)^k            (i is the lowest-ranked draft)
        i in Omega:     q_I(i) = (q(i) + T(i))^k - T(i)^k - (q(i) + U(i))^k + U(i)^k
                                 + sum_{S in Omega, i in S} Q(S) P(i | S)

    where Q(S) = sum_{R subset of S} (-1)^{|S| - |R|} q(R)^k is the probability that the distinct
    drafts are exactly S, and the LP maximises sum_{i in Omega} min(p(i), q_I(i)). Derived here (no
    public code truncates this LP); lossless for every s (Fractions in, Fractions out). O(V log V)
    numpy plus an LP with at most s sum_{j <= k} C(s, j) variables.

    Attributes:
        omega: the s tokens of Omega in token-id order; law: q_I [V].
    """

    def __init__(self, p, q, k: int, s: int):
        exact = is_exact(p) and is_exact(q)
        V = len(p)
        order, self.rank = _ranking(p, q ** k, exact)
        self.omega = tuple(sorted(int(t) for t in order[:min(s, V)]))
        tail = np.cumsum(q[order][::-1])[::-1] - q[order]  # [V] by rank: q-mass ranked after
        in_omega = np.zeros(V, dtype=bool)
        in_omega[list(self.omega)] = True
        inside = q[order] * in_omega[order]
        tail_in = np.cumsum(inside[::-1])[::-1] - inside  # [V] by rank: Omega's q-mass ranked after
        lowest = q * 0  # [V]: P(i is the lowest-ranked draft)
        lowest[order] = (q[order] + tail) ** k - tail ** k
        outside = q * 0  # [V]: ... and some draft lies outside Omega
        outside[order] = lowest[order] - in_omega[order] * ((q[order] + tail_in) ** k - tail_in ** k)
        sets = [S for j in range(1, min(k, len(self.omega)) + 1) for S in itertools.combinations(self.omega, j)]
        mass = {S: sum((-1) ** (len(S) - j) * sum(q[list(R)]) ** k for j in range(1, len(S) + 1)
                       for R in itertools.combinations(S, j)) for S in sets}
        table = _truncated_set_lp(tuple(float(p[t]) for t in self.omega), self.omega,
                                  tuple(float(outside[t]) for t in self.omega), tuple(float(mass[S]) for S in sets), sets)
        self.select = {S: _exact_law(table[S], exact) for S in sets}
        law = np.where(in_omega, outside, lowest)
        for S in sets:
            for t, prob in zip(S, self.select[S]):
                law[t] = law[t] + mass[S] * prob
        self.law = law

    def probabilities(self, drafted_set) -> list:
        """P(pick drafted_set[j]) for the sorted distinct drafts `drafted_set`."""
        drafted_set = tuple(drafted_set)
        if drafted_set in self.select:
            return self.select[drafted_set]
        lowest = min(drafted_set, key=lambda t: self.rank[t])
        return [1 if t == lowest else 0 for t in drafted_set]


def _truncated_set_lp(p_omega, omega, offset, masses, sets):
    """{S: [x[S, t] / Q(S)] (float64)}: the selection LP over the sets inside Omega, where token t
    of Omega already gets `offset`[t] of q_I from the sets outside it."""
    s, index = len(omega), [(S, t) for S in sets for t in S]
    position = {t: i for i, t in enumerate(omega)}
    n = len(index)
    c = np.concatenate([np.zeros(n), -np.ones(s)])
    a_eq = np.zeros((len(sets), n + s))
    a_ub = np.zeros((2 * s, n + s))
    b_ub = np.concatenate([np.asarray(p_omega), np.asarray(offset)])
    for col, (S, t) in enumerate(index):
        a_eq[sets.index(S), col] = 1.0
        a_ub[s + position[t], col] = -1.0  # z_t - q_I(t) <= offset_t
    for i in range(s):
        a_ub[i, n + i] = 1.0
        a_ub[s + i, n + i] = 1.0
    x = _linprog(c, a_ub, b_ub, a_eq, np.maximum(np.asarray(masses), 0.0))
    return {S: [x[index.index((S, t))] / m if m > 0 else 1.0 for t in S] for S, m in zip(sets, masses)}


def truncated_set_selection(p, q, k: int, s: int) -> TruncatedSetSelection:
    """`TruncatedSetSelection(p, q, k, s)`.

    Raises:
        TypeError / ValueError: k or s not an int >= 1.
    """
    return _memo(TruncatedSetSelection, (p, q), (check_positive_int(k, "num_drafts"),
                                                 check_positive_int(s, "truncation")))


#: Vocabularies up to this size have their truncated selections memoised (the exact enumerator
#: asks for the same node many times); larger ones (real models) are computed afresh per node.
_MEMO_VOCAB = 256
_MEMO: dict = {}


def _memo(kind, arrays, params):
    """kind(*arrays, *params), memoised on the arrays' values for small vocabularies (read-only)."""
    if len(arrays[0]) > _MEMO_VOCAB:
        return kind(*arrays, *params)
    key = (kind, tuple(_key(a) for a in arrays), tuple(is_exact(a) for a in arrays), params)
    if key not in _MEMO:
        if len(_MEMO) >= 4096:
            _MEMO.clear()
        _MEMO[key] = kind(*arrays, *params)
    return _MEMO[key]


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
