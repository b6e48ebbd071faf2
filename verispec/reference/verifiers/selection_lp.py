"""The selection LPs behind the importance-sampling (IS) rules (`verifiers.importance`), solved
exactly or in float64.

Khisti et al. 2024 ("Multi-Draft Speculative Sampling: Canonical Architectures and Theoretical
Limits", arXiv 2410.18234): an optimal K-draft rule picks one drafted token with selection
probabilities that depend only on the drafts, then verifies it by single-draft speculative sampling
against the law q_I of the pick; the selection maximises sum_x min(p(x), q_I(x)), a linear program.

- Two drafts (`khisti`): the paper's two-draft LP over keep-probabilities w[x_1, x_2], exactly
  (`exact_pair_selection`, the simplex of `verispec.reference.simplex`) or by scipy HiGHS
  (`lp_pair_selection`), and restricted to the top s tokens (`TruncatedSelection`, after the GBV
  authors' public code `khisti.py::khisti_lp_solver`).
- k i.i.d. drafts (`optimal_is`): the selection law per set of distinct drafts, whose value is the
  one-step optimum alpha* = min_H p(H) + 1 - q(H)^k (Hu et al. 2025, arXiv 2502.18779): exactly
  (`exact_selection`), by HiGHS (`lp_selection`), and restricted to s tokens
  (`TruncatedSetSelection`, derived here).

Float64 LP solutions are rounded onto a grid of 1e-12 and renormalised exactly when the
distributions are exact (Fractions), so the rules stay exactly lossless: lossless for ANY selection
whose law q_I is exact. The float64 solutions are memoised by value (`verispec.reference.memo`).
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
from scipy.optimize import linprog

from ..draft_sets import draft_set_law
from ..memo import by_value
from ..probability import is_exact
from ..simplex import maximize

__all__ = ["exact_pair_selection", "lp_pair_selection", "TruncatedSelection", "exact_selection", "lp_selection",
           "TruncatedSetSelection"]

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

def _floats(values) -> np.ndarray:
    """float64 [V] of a probability vector (exact entries rounded; a symbolic one raises its
    SymbolicError: the float64 LPs have no symbolic meaning)."""
    return np.array([float(v) for v in values], dtype=np.float64)


@by_value
def _pair_weights(p, q1, q2, offset=None) -> np.ndarray:
    """w [V, V] (float64) maximising sum_i min(p_i, q_I(i; w)) for drafts x_1 ~ q_1, x_2 ~ q_2
    (float64 [V] each); `offset` [V] (default 0) is selection mass q_I(i) gets from pairs outside
    these V tokens. Memoised by value: treat the result as read-only."""
    V = len(p)
    offset = np.zeros(V) if offset is None else offset
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


def exact_pair_selection(p, q1, q2):
    """Khisti et al.'s two-draft LP solved exactly (`verispec.reference.simplex`), any V.

    The LP of `khisti_step` in the variables v[i, j] = q_1(i) q_2(j) w[i, j] (the mass of the
    ordered pair (i, j) that keeps x_1 = i) and z_i: maximise sum_i z_i subject to z_i <= p(i),
    z_i <= q_I(i) = q_2(i) + sum_{j != i} (v[i, j] - v[j, i]) (as q_1 sums to 1) and
    0 <= v[i, j] <= q_1(i) q_2(j).
    Its matrix is concrete (entries 0, 1, -1): the symbolic data of the prover sit in the bounds
    only, so the simplex branches only on its ratio tests. Then w[i, j] = v[i, j] / (q_1(i) q_2(j))
    (1/2 for a pair of mass 0: never drafted). Not memoised (`importance.pair_selection` memoises Fractions).

    Args:
        p, q1, q2: exact (Fraction) or symbolic distributions [V] (dtype=object).

    Returns:
        (keep, q_I) as `importance.pair_selection`, exact: an optimum of the LP, not a tolerance of it.
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


@by_value
def lp_pair_selection(p, q1, q2):
    """Khisti et al.'s two-draft selection from the float64 LP (scipy HiGHS, `_pair_weights`).

    Args:
        p, q1, q2: target and the two drafts' laws [V], all float64 or all exact (Fractions).

    Returns:
        (keep, q_I) as `importance.pair_selection`: float64, or exact Fractions (the LP's values on
        a 1e-12 grid, q_I their exact law) when p, q1, q2 are exact. Memoised by value.
    """
    exact = is_exact(p) and is_exact(q1) and is_exact(q2)
    w = _pair_weights(_floats(p), _floats(q1), _floats(q2))
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


class TruncatedSelection:
    """Khisti et al.'s two-draft selection with the LP restricted to s tokens.

    Tokens are ranked by p - q_1 q_2, descending (ties: lower id first); Omega = the top s. A pair
    with both drafts in Omega is selected by the two-draft LP over Omega (w[x_1, x_2] = probability
    of keeping x_1); any other pair keeps the draft of lower rank. The law of the selected token is
    then, exactly, with T_m(i) = q_m-mass of the tokens ranked after i and Q_m = q_m(outside Omega):

        i outside Omega: q_I(i) = q_1(i) q_2(i) + q_1(i) T_2(i) + T_1(i) q_2(i)
        i in Omega:      q_I(i) = q_1(i) q_2(i) + q_1(i) Q_2 + Q_1 q_2(i)
                                  + sum_{j in Omega, j != i} q_1(i) q_2(j) w[i, j] + q_1(j) q_2(i) (1 - w[j, i])

    and the LP maximises sum_{i in Omega} min(p(i), q_I(i)). With s >= V it is `importance.pair_selection`.
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
        w = _pair_weights(*(_floats(x) for x in (p[sub], q1[sub], q2[sub], offset)))
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


@by_value
def _set_selection(p, q, k: int):
    """{set S of distinct drafted tokens: [P(select S[j] | S)]} (float64) from the selection LP, for
    p, q float64 [V]. Memoised by value: treat the result as read-only."""
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


@by_value
def lp_selection(p, q, k: int):
    """The optimal selection law for k i.i.d. drafts from the float64 LP (scipy HiGHS, `_set_selection`).

    Args:
        p, q: target and draft laws [V], both float64 or both exact (Fractions). k: drafts, int >= 1.

    Returns:
        (select, q_I) as `importance.optimal_selection`: float64, or exact Fractions (the LP's
        values on a 1e-12 grid, q_I their exact law) when p and q are exact. Memoised by value.
    """
    exact = is_exact(p) and is_exact(q)
    dtype = object if exact else np.float64
    table = _set_selection(_floats(p), _floats(q), k)
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
