"""Exact certificates of LP optima: a rational primal and a rational dual with equal objectives.

A float LP solution says "about this value". For the tree LPs of `verispec.theory.lp` this module
turns it into a proof about the LP whose data are the exact rationals of the instance (Fractions for
rational models; for float64 models, the exact binary rationals of their float64 probabilities):

1. rationalise the primal: the constraints the float solution makes active (within `tol`) are
   solved as equalities in Fractions (Gaussian elimination): the vertex x* the solver was at;
2. rationalise the dual: the dual's support is read off HiGHS's float dual (`scipy.optimize.linprog`,
   method "highs"), and complementary slackness (A^T y + z = c on every x_i > 0) is solved in
   Fractions for y, z on that support;
3. check in Fractions: x* feasible (every row, 0 <= x <= upper), (y, z) >= 0 and dual feasible
   (A^T y + z >= c on every column), and c.x* == b.y + upper.z.

Equality rows (the lossy frontier's, `verispec.theory.lossy`) are active by definition and their
duals are free in sign.

Then x* is optimal by weak duality and its value is exact; "certified exactly" is said only then.
Any step that does not go through (a degenerate vertex, a dual support that does not determine the
dual, a solver status other than optimal) gives `certified=False` with the reason, never a claim.
Reference for the LPs: Thomas & Pal 2026, arXiv 2602.16961 (single-path LP, coverage bound).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import csr_matrix

from ..reference.models import LanguageModel, check_positive_int, check_pair, check_prefix

__all__ = ["ExactCertificate", "certify_lp", "tree_lists", "single_path_certificate", "multi_path_certificate"]


@dataclass
class ExactCertificate:
    """The outcome of an exact certification.

    Attributes:
        certified: True when the rational primal and dual pass every check with equal objectives.
        value: the exact optimum (a Fraction) when certified, else None.
        primal_value, dual_value: the objectives of the rational primal and dual that were built
            (None where a step failed).
        reason: why it is not certified ("" when it is).
        num_variables, num_constraints: the LP's size (rows besides 0 <= x <= upper).
    """

    certified: bool
    value: Fraction | None
    primal_value: Fraction | None
    dual_value: Fraction | None
    reason: str
    num_variables: int
    num_constraints: int


def _solve_exact(equations, n, free_values=None):
    """The unique solution of sparse equations [(row {col: Fraction}, rhs)] in n unknowns, or None
    when they are inconsistent or do not determine every unknown (Gauss-Jordan in Fractions).
    With `free_values` [n], unknowns left free are set to those values (and the solution is one
    of many) instead of giving None."""
    rows = [(dict(r), Fraction(b)) for r, b in equations]
    pivots: dict[int, tuple[dict, Fraction]] = {}
    for row, rhs in rows:
        for col, (prow, prhs) in pivots.items():  # reduce by the existing pivots
            factor = row.get(col)
            if factor:
                for c, v in prow.items():
                    row[c] = row.get(c, 0) - factor * v
                rhs -= factor * prhs
        row = {c: v for c, v in row.items() if v != 0}
        if not row:
            if rhs != 0:
                return None  # inconsistent
            continue
        col = min(row)
        pivot = row[col]
        row = {c: v / pivot for c, v in row.items()}
        rhs /= pivot
        for other, (orow, orhs) in list(pivots.items()):  # keep the pivot rows reduced
            factor = orow.get(col)
            if factor:
                new = dict(orow)
                for c, v in row.items():
                    new[c] = new.get(c, 0) - factor * v
                pivots[other] = ({c: v for c, v in new.items() if v != 0}, orhs - factor * rhs)
        pivots[col] = (row, rhs)
    if len(pivots) < n and free_values is None:
        return None
    # each pivot row is its pivot plus free unknowns only (Gauss-Jordan keeps them reduced)
    free = {i: Fraction(free_values[i]) for i in range(n) if i not in pivots}
    return [free[i] if i in free else pivots[i][1] - sum(v * free[c] for c, v in pivots[i][0].items() if c != i)
            for i in range(n)]


def _sparse(rows, n):
    data, ri, ci = [], [], []
    for j, row in enumerate(rows):
        for col, v in row.items():
            data.append(float(v))
            ri.append(j)
            ci.append(col)
    return csr_matrix((data, (ri, ci)), shape=(len(rows), n)) if rows else None


def _float_dual(c, rows, b, upper, eq_rows, eq_b):
    """HiGHS's float solution (x, <= row duals, == row duals, upper-bound duals) of
    max c.x s.t. rows x <= b, eq_rows x = eq_b, 0 <= x <= upper."""
    n = len(c)
    res = linprog(-np.array([float(v) for v in c]), A_ub=_sparse(rows, n),
                  b_ub=np.array([float(v) for v in b]) if rows else None, A_eq=_sparse(eq_rows, n),
                  b_eq=np.array([float(v) for v in eq_b]) if eq_rows else None,
                  bounds=[(0, float(u)) for u in upper], method="highs")
    if res.status != 0:
        return None, f"HiGHS status {res.status}: {res.message}"
    y = -np.asarray(res.ineqlin.marginals) if rows else np.zeros(0)  # [rows], >= 0 for a max problem
    w = -np.asarray(res.eqlin.marginals) if eq_rows else np.zeros(0)  # [eq rows], free sign
    z = -np.asarray(res.upper.marginals)  # [n]
    return (np.asarray(res.x), y, w, z), ""


def _rational_primal(x_float, rows, b, upper, eq_rows, eq_b, tol):
    """The point of the face of the constraints the float x makes active (within tol), in
    Fractions: the vertex when they determine one, else pinned by x's values (to 9 digits) on the
    unknowns they leave free. Feasibility is checked exactly afterwards."""
    n = len(upper)
    equations = list(zip(eq_rows, eq_b))
    for i in range(n):
        if abs(x_float[i]) <= tol:
            equations.append(({i: Fraction(1)}, Fraction(0)))
        elif abs(x_float[i] - float(upper[i])) <= tol:
            equations.append(({i: Fraction(1)}, upper[i]))
    for row, rhs in zip(rows, b):
        if abs(float(rhs) - sum(float(v) * x_float[col] for col, v in row.items())) <= tol:
            equations.append((row, rhs))
    return _solve_exact(equations, n, [Fraction(float(v)).limit_denominator(10 ** 9) for v in x_float])


def _primal_feasible(x, rows, b, upper, eq_rows, eq_b) -> bool:
    def value(row):
        return sum(v * x[col] for col, v in row.items())

    return all(0 <= xi <= ui for xi, ui in zip(x, upper)) and \
        all(value(row) <= rhs for row, rhs in zip(rows, b)) and \
        all(value(row) == rhs for row, rhs in zip(eq_rows, eq_b))


def _rational_dual(c, x_exact, rows, upper, eq_rows, duals, tol):
    """Duals on HiGHS's support solved exactly from complementary slackness (A^T y + z = c on every
    x_i > 0, and on every column HiGHS's dual makes tight) -> ({("y"|"w"|"z", index): Fraction}, "")
    or (None, reason). A degenerate dual face is pinned by HiGHS's values (to 9 digits) on the
    unknowns these equations leave free; the exact checks below decide either way."""
    y_float, w_float, z_float = duals
    support = [("y", j) for j in range(len(rows)) if y_float[j] > tol] + \
        [("w", j) for j in range(len(eq_rows)) if abs(w_float[j]) > tol] + \
        [("z", i) for i in range(len(upper)) if z_float[i] > tol]
    unknowns = {key: k for k, key in enumerate(support)}
    columns: list[dict] = [dict() for _ in range(len(c))]  # A^T restricted to the support
    for kind, j in support:
        entries = {j: Fraction(1)} if kind == "z" else (rows if kind == "y" else eq_rows)[j]
        for col, v in entries.items():
            columns[col][unknowns[(kind, j)]] = v
    floats = {**{("y", j): v for j, v in enumerate(y_float)}, **{("w", j): v for j, v in enumerate(w_float)},
              **{("z", i): v for i, v in enumerate(z_float)}}
    guess = [Fraction(float(floats[key])).limit_denominator(10 ** 9) for key in support]
    tight = [i for i in range(len(c)) if x_exact[i] > 0 or abs(
        sum(float(v) * float(guess[k]) for k, v in columns[i].items()) - float(c[i])) <= tol]
    solution = _solve_exact([(columns[i], c[i]) for i in tight], len(unknowns), guess)
    if solution is None:
        return None, "the dual support does not determine the dual"
    if any(solution[k] < 0 for key, k in unknowns.items() if key[0] != "w"):
        return None, "the rational dual has a negative entry"
    if any(sum(coef * solution[k] for k, coef in columns[i].items()) < c[i] for i in range(len(c))):
        return None, "the rational dual is infeasible"
    return {key: solution[k] for key, k in unknowns.items()}, ""


def certify_lp(c, rows, b, upper, x=None, *, tol: float = 1e-7, eq_rows=(), eq_b=()) -> ExactCertificate:
    """Certify max c.x s.t. rows x <= b, eq_rows x = eq_b, 0 <= x <= upper exactly (all data
    Fractions; the duals of equality rows are free in sign).

    Args:
        c: [n] objective. rows: list of sparse rows {column: coefficient}. b: [len(rows)].
        upper: [n] upper bounds. x: a float primal to start from (default: HiGHS's); the dual
            always comes from HiGHS. tol: slack below which a float constraint counts as active.
        eq_rows, eq_b: equality rows (same format) and their right-hand sides.
    """
    n, m = len(c), len(rows) + len(eq_rows)
    eq_rows, eq_b = list(eq_rows), list(eq_b)
    solved, reason = _float_dual(c, rows, b, upper, eq_rows, eq_b)
    if solved is None:
        return ExactCertificate(False, None, None, None, reason, n, m)
    x_float = solved[0] if x is None else np.asarray(x, dtype=np.float64)
    x_exact = _rational_primal(x_float, rows, b, upper, eq_rows, eq_b, tol)
    if x_exact is None:
        return ExactCertificate(False, None, None, None, "the active constraints do not determine a vertex", n, m)
    primal = sum(ci * xi for ci, xi in zip(c, x_exact))
    if not _primal_feasible(x_exact, rows, b, upper, eq_rows, eq_b):
        return ExactCertificate(False, None, primal, None, "the rational primal is infeasible", n, m)
    duals, reason = _rational_dual(c, x_exact, rows, upper, eq_rows, solved[1:], tol)
    if duals is None:
        return ExactCertificate(False, None, primal, None, reason, n, m)
    rhs = {"y": b, "w": eq_b, "z": upper}
    dual = sum(rhs[kind][j] * value for (kind, j), value in duals.items())
    if dual != primal:
        return ExactCertificate(False, None, primal, dual, f"duality gap {dual - primal}", n, m)
    return ExactCertificate(True, primal, primal, dual, "", n, m)


# --------------------------------------------------------------------------------------------------
# the tree LPs in exact arithmetic

def _exact_probs(model, prefix):
    return [Fraction(v) if not isinstance(v, Fraction) else v for v in model.probs(prefix)]


def tree_lists(target, draft, context, draft_length):
    """The full V-ary tree of depths 1..L below `context` in `lp`'s breadth-first order, exactly:
    (nodes [n] as token tuples, p(t | parent) [n], joint draft probability q(u) [n], parent index [n]
    with None at depth 1), all Fractions (float64 models are read as their exact binary rationals).

    Raises:
        TypeError / ValueError: mismatched models, draft None, bad context, draft_length < 1.
    """
    check_pair(target, draft)
    if not isinstance(draft, LanguageModel):
        raise TypeError("draft: expected a LanguageModel, got NoneType")
    context = check_prefix(context, target.vocab_size, "context")
    L = check_positive_int(draft_length, "draft_length")
    V = target.vocab_size
    nodes, p_cond, q_joint, parent = [], [], [], []
    level, level_q, level_index = [()], [Fraction(1)], [None]
    for _ in range(L):
        next_level, next_q, next_index = [], [], []
        for u, qu, iu in zip(level, level_q, level_index):
            p, q = _exact_probs(target, context + u), _exact_probs(draft, context + u)
            for t in range(V):
                next_index.append(len(nodes))
                nodes.append(u + (t,))
                p_cond.append(p[t])
                q_joint.append(qu * q[t])
                parent.append(iu)
                next_level.append(u + (t,))
                next_q.append(qu * q[t])
        level, level_q, level_index = next_level, next_q, next_index
    return nodes, p_cond, q_joint, parent


def _target_rows(p_cond, parent):
    rows, b = [], []
    for i, (p, j) in enumerate(zip(p_cond, parent)):
        if j is None:
            rows.append({i: Fraction(1)})
            b.append(p)
        else:
            rows.append({i: Fraction(1), j: -p})
            b.append(Fraction(0))
    return rows, b


def single_path_certificate(target, draft, context=(), draft_length: int = 1, result=None) -> ExactCertificate:
    """Exact certificate of the single-path LP optimum (`lp.single_path`): max sum a(u) s.t.
    0 <= a(u) <= q(u), a(t) <= p(t), a(u t) <= p(t | u) a(u).

    Args:
        result: an `lp.LPResult` of the same instance whose primal is certified (default: HiGHS's).
    """
    nodes, p_cond, q_joint, parent = tree_lists(target, draft, context, draft_length)
    rows, b = _target_rows(p_cond, parent)
    x = None if result is None else [result.node_budgets[u] for u in nodes]
    return certify_lp([Fraction(1)] * len(nodes), rows, b, q_joint, x)


def _coverage(mass, K):
    return 1 - (1 - min(mass, Fraction(1))) ** K


def multi_path_certificate(target, draft, context=(), draft_length: int = 1, num_paths: int = 1,
                           result=None, max_level_support: int = 12) -> ExactCertificate:
    """Exact certificate of the multi-path coverage LP (`lp.multi_path`, all subsets): max sum a(u)
    s.t. target matching and sum_{u in S} a(u) <= 1 - (1 - q(S))^K for every set S of same-depth
    nodes (singletons as upper bounds).

    Raises:
        ValueError: a depth with more than `max_level_support` positive-probability nodes (the rows
            are every subset).
    """
    K = check_positive_int(num_paths, "num_paths")
    nodes, p_cond, q_joint, parent = tree_lists(target, draft, context, draft_length)
    rows, b = _target_rows(p_cond, parent)
    depth = [len(u) for u in nodes]
    for level in sorted(set(depth)):
        support = [i for i in range(len(nodes)) if depth[i] == level and q_joint[i] > 0]
        if len(support) > max_level_support:
            raise ValueError(f"max_level_support: depth {level} has {len(support)} positive-probability "
                             f"nodes (> {max_level_support}); the exact certificate enumerates every subset")
        for size in range(2, len(support) + 1):
            for subset in itertools.combinations(support, size):
                rows.append({i: Fraction(1) for i in subset})
                b.append(_coverage(sum(q_joint[i] for i in subset), K))
    upper = [_coverage(q, K) for q in q_joint]
    x = None if result is None else [result.node_budgets[u] for u in nodes]
    return certify_lp([Fraction(1)] * len(nodes), rows, b, upper, x)
