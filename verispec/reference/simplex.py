"""An exact dense simplex method, written once for any ordered field's numbers.

The importance-sampling selection rules (`verifiers.importance`) solve small LPs. In float64 they
use HiGHS; with exact input they use this tableau simplex instead (Dantzig 1947; Bland's
smallest-index rule, R. G. Bland, "New finite pivoting rules for the simplex method", Math. Oper.
Res. 2(2), 1977, which cannot cycle), so the optimum is exact. The code only adds, subtracts,
multiplies, divides and compares with the numbers it is given, so it runs unchanged on `Fraction`s
and on the symbolic reals of `verispec.formal`, where each comparison it makes (a reduced cost's
sign, a ratio test) is a branch of the prover's replay. Entries that are concrete zeros are skipped
without a comparison, so an LP whose matrix is concrete (symbolic data only in b) branches only on
its ratio tests.
"""

from __future__ import annotations

from fractions import Fraction
from numbers import Rational


def maximize(c, a_ub, b_ub):
    """Maximise c . x subject to a_ub x <= b_ub and x >= 0, where b_ub >= 0 (x = 0 is feasible).

    Args:
        c: objective [n]; a_ub: constraint rows [m][n]; b_ub: bounds [m], every entry >= 0. Any
            numbers of one ordered field (ints, Fractions, the prover's symbolic reals; floats work
            but the result is then only as exact as float64 pivoting).

    Returns:
        (x, y): an optimal vertex x [n] and an optimal dual solution y [m] (y >= 0, y a_ub >= c,
        y . b_ub = c . x: a certificate of optimality), in the input's number type.

    Raises:
        ValueError: ragged shapes or a concretely negative entry of b_ub.
        ArithmeticError: the LP is unbounded.
    """
    tableau, basis, n = _tableau(c, a_ub, b_ub)
    while True:
        column = _entering(tableau[-1])
        if column is None:
            break
        row = _leaving(tableau, basis, column)
        if row is None:
            raise ArithmeticError("the LP is unbounded")
        _pivot(tableau, row, column)
        basis[row] = column
    x = [0] * n
    for row, var in enumerate(basis):
        if var < n:
            x[var] = tableau[row][-1]
    y = [tableau[-1][n + i] for i in range(len(basis))]
    return x, y


def _tableau(c, a_ub, b_ub):
    """[A | I | b] rows and the reduced-cost row [-c | 0 | 0] (maximisation), slack basis."""
    c, a_ub, b_ub = list(c), [list(row) for row in a_ub], list(b_ub)
    m, n = len(a_ub), len(c)
    if len(b_ub) != m or any(len(row) != n for row in a_ub):
        raise ValueError(f"a_ub: expected {len(b_ub)} rows of {n} entries (len(b_ub) x len(c))")
    if any(isinstance(b, (Rational, float)) and b < 0 for b in b_ub):
        raise ValueError("b_ub: every bound must be >= 0 (the origin must be feasible)")
    rows = [a_ub[i] + [1 if j == i else 0 for j in range(m)] + [b_ub[i]] for i in range(m)]
    rows.append([-v for v in c] + [0] * (m + 1))
    return rows, list(range(n, n + m)), n


def _is_zero(value) -> bool:
    """True for a concrete zero only (a symbolic value is not compared: that would branch)."""
    return isinstance(value, (Rational, float)) and value == 0


def _entering(costs):
    """Bland: the first column with a negative reduced cost, or None at an optimum."""
    for column, cost in enumerate(costs[:-1]):
        if not _is_zero(cost) and cost < 0:
            return column
    return None


def _leaving(tableau, basis, column):
    """Bland's ratio test: the row of least b_i / a_i over a_i > 0, ties to the least basic
    variable; ratios compared by cross-multiplication (both a's positive), no division."""
    best = None
    for row in range(len(basis)):
        a = tableau[row][column]
        if _is_zero(a) or not a > 0:
            continue
        if best is None:
            best = row
            continue
        difference = tableau[row][-1] * tableau[best][column] - tableau[best][-1] * a
        # one comparison per row (a symbolic one is one branch): a tie goes to the lower variable
        if (difference <= 0) if basis[row] < basis[best] else (difference < 0):
            best = row
    return best


def _pivot(tableau, row, column) -> None:
    """Make `column` basic in `row` (Gauss-Jordan on the whole tableau, cost row included)."""
    inverse = Fraction(1) / tableau[row][column]  # int / int would be a float
    tableau[row] = [v if _is_zero(v) else v * inverse for v in tableau[row]]
    pivot_row = tableau[row]
    for other, entries in enumerate(tableau):
        factor = entries[column]
        if other == row or _is_zero(factor):
            continue
        tableau[other] = [v - factor * w if not _is_zero(w) else v for v, w in zip(entries, pivot_row)]
