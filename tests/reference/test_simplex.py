"""The exact simplex (`verispec.reference.simplex`): exact optima with a dual certificate, HiGHS's
value on random LPs, Bland's rule on a cycling example, and the exact IS selection LPs reaching the
one-step optimum alpha* exactly at V >= 3. Planted: a ratio test without the ratio is caught."""

import itertools
import random
from fractions import Fraction

import numpy as np
import pytest
from scipy.optimize import linprog

from verispec.reference import simplex
from verispec.reference.verifiers import importance
from verispec.theory.closed_forms import optimal_multidraft_acceptance


def _certified(c, a, b, x, y) -> bool:
    """x primal feasible, y dual feasible and c.x == y.b: both optimal (weak duality), exactly."""
    m, n = len(a), len(c)
    primal = all(v >= 0 for v in x) and all(sum(a[i][j] * x[j] for j in range(n)) <= b[i] for i in range(m))
    dual = all(v >= 0 for v in y) and all(sum(y[i] * a[i][j] for i in range(m)) >= c[j] for j in range(n))
    return primal and dual and sum(c[j] * x[j] for j in range(n)) == sum(y[i] * b[i] for i in range(m))


def _random_lp(rng, m, n):
    """Entries with denominator 6 (zeros and ties frequent: degenerate vertices); bounded by
    a row of ones."""
    def entry():
        return Fraction(rng.randint(-6, 12), 6)

    a = [[entry() for _ in range(n)] for _ in range(m)] + [[Fraction(1)] * n]
    b = [Fraction(rng.randint(0, 6), 6) for _ in range(m)] + [Fraction(rng.randint(1, 6))]
    c = [entry() for _ in range(n)]
    return c, a, b


def test_random_lps_are_solved_exactly_with_a_dual_certificate_and_match_highs():
    rng = random.Random(0)
    for trial in range(60):
        c, a, b = _random_lp(rng, rng.randint(1, 6), rng.randint(1, 6))
        x, y = simplex.maximize(c, a, b)
        assert all(isinstance(v, (int, Fraction)) for v in [*x, *y])
        assert _certified(c, a, b, x, y), trial
        highs = linprog([-float(v) for v in c], A_ub=np.array(a, dtype=float), b_ub=np.array(b, dtype=float),
                        bounds=(0, None), method="highs")
        assert abs(-highs.fun - float(sum(ci * xi for ci, xi in zip(c, x)))) < 1e-9, trial


def test_beales_cycling_example_terminates_at_the_optimum():
    # Beale (1955): Dantzig's largest-coefficient rule cycles here; Bland's rule must not.
    c = [Fraction(3, 4), -20, Fraction(1, 2), -6]
    a = [[Fraction(1, 4), -8, -1, 9], [Fraction(1, 2), -12, Fraction(-1, 2), 3], [0, 0, 1, 0]]
    b = [0, 0, 1]
    x, y = simplex.maximize(c, a, b)
    assert _certified(c, a, b, x, y)
    assert sum(ci * xi for ci, xi in zip(c, x)) == Fraction(5, 4)


def test_bad_input_and_unbounded():
    with pytest.raises(ValueError, match="b_ub"):
        simplex.maximize([1], [[1]], [-1])
    with pytest.raises(ValueError, match="a_ub"):
        simplex.maximize([1, 1], [[1]], [1])
    with pytest.raises(ArithmeticError, match="unbounded"):
        simplex.maximize([1, 0], [[0, 1]], [1])


def test_planted_ratio_test_without_the_ratio_is_caught(monkeypatch):
    """The first row with a positive entry leaves the basis (no minimum ratio): infeasible."""
    def first_positive(tableau, basis, column):
        rows = [row for row in range(len(basis)) if tableau[row][column] > 0]
        return rows[0] if rows else None

    monkeypatch.setattr(simplex, "_leaving", first_positive)
    rng = random.Random(0)
    caught = 0
    for _ in range(30):
        c, a, b = _random_lp(rng, 4, 4)
        x, y = simplex.maximize(c, a, b)
        caught += not _certified(c, a, b, x, y)
    assert caught > 0


def _rational(rng, V, den=8):
    cuts = sorted(rng.randint(0, den) for _ in range(V - 1))
    return np.array([Fraction(hi - lo, den) for lo, hi in zip([0, *cuts], [*cuts, den])], dtype=object)


@pytest.mark.parametrize("V", [3, 4])
def test_exact_selections_reach_alpha_star_exactly(V):
    """Both IS selection LPs, solved exactly, reach alpha* = min_H p(H) + 1 - q(H)^k (Hu et al. 2025)
    with exact selection laws: probabilities in [0, 1] summing to 1, q_I their exact law."""
    rng = random.Random(V)
    for _ in range(15):
        p, q = _rational(rng, V), _rational(rng, V)
        for k in (2, 3):
            select, q_sel = importance.optimal_selection(p, q, k)
            assert sum(min(p[t], q_sel[t]) for t in range(V)) == optimal_multidraft_acceptance(p, q, k)
            law = [Fraction(0)] * V
            for drafts in itertools.product(range(V), repeat=k):
                S = tuple(sorted(set(drafts)))
                weight = np.prod([q[t] for t in drafts])
                assert all(0 <= v <= 1 for v in select[S]) and sum(select[S]) == 1
                for t, prob in zip(S, select[S]):
                    law[t] += weight * prob
            assert law == list(q_sel)
        keep, q_pair = importance.pair_selection(p, q, q)
        assert sum(min(p[t], q_pair[t]) for t in range(V)) == optimal_multidraft_acceptance(p, q, 2)
        law = [Fraction(0)] * V
        for i, j in itertools.product(range(V), repeat=2):
            assert 0 <= keep[i][j] <= 1
            law[i] += q[i] * q[j] * keep[i][j]
            law[j] += q[i] * q[j] * (1 - keep[i][j])
        assert law == list(q_pair)
