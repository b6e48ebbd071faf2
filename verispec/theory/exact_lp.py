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

__all__ = ["ExactCertificate", "certify_lp", "single_path_certificate", "multi_path_certificate"]


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


def _solve_exact(equations, n):
    """The unique solution of sparse equations [(row {col: Fraction}, rhs)] in n unknowns, or None
    when they are inconsistent or do not determine every unknown (Gauss-Jordan in Fractions)."""
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
    if len(pivots) < n:
        return None
    return [pivots[i][1] for i in range(n)]


def _float_dual(c, rows, b, upper):
    """HiGHS's float solution (x, row duals, upper-bound duals) of max c.x s.t. rows, bounds."""
    n = len(c)
    data, ri, ci = [], [], []
    for j, row in enumerate(rows):
        for col, v in row.items():
            data.append(float(v))
            ri.append(j)
            ci.append(col)
    a_ub = csr_matrix((data, (ri, ci)), shape=(len(rows), n)) if rows else None
    res = linprog(-np.array([float(v) for v in c]), A_ub=a_ub,
                  b_ub=np.array([float(v) for v in b]) if rows else None,
                  bounds=[(0, float(u)) for u in upper], method="highs")
    if res.status != 0:
        return None, f"HiGHS status {res.status}: {res.message}"
    y = -np.asarray(res.ineqlin.marginals) if rows else np.zeros(0)  # [rows], >= 0 for a max problem
    z = -np.asarray(res.upper.marginals)  # [n]
    return (np.asarray(res.x), y, z), ""


def certify_lp(c, rows, b, upper, x=None, tol: float = 1e-7) -> ExactCertificate:
    """Certify max c.x s.t. rows x <= b, 0 <= x <= upper exactly (all data Fractions).

    Args:
        c: [n] objective. rows: list of sparse rows {column: coefficient}. b: [len(rows)].
        upper: [n] upper bounds. x: a float primal to start from (default: HiGHS's); the dual
            always comes from HiGHS. tol: slack below which a float constraint counts as active.
    """
    n, m = len(c), len(rows)
    solved, reason = _float_dual(c, rows, b, upper)
    if solved is None:
        return ExactCertificate(False, None, None, None, reason, n, m)
    x_float, y_float, z_float = solved
    if x is not None:
        x_float = np.asarray(x, dtype=np.float64)
    # 1. the primal vertex, exactly
    equations = []
    for i in range(n):
        if abs(x_float[i]) <= tol:
            equations.append(({i: Fraction(1)}, Fraction(0)))
        elif abs(x_float[i] - float(upper[i])) <= tol:
            equations.append(({i: Fraction(1)}, upper[i]))
    for row, rhs in zip(rows, b):
        if abs(float(rhs) - sum(float(v) * x_float[col] for col, v in row.items())) <= tol:
            equations.append((row, rhs))
    x_exact = _solve_exact(equations, n)
    if x_exact is None:
        return ExactCertificate(False, None, None, None, "the active constraints do not determine a vertex", n, m)
    primal = sum(ci * xi for ci, xi in zip(c, x_exact))
    if any(xi < 0 or xi > ui for xi, ui in zip(x_exact, upper)) or any(
            sum(v * x_exact[col] for col, v in row.items()) > rhs for row, rhs in zip(rows, b)):
        return ExactCertificate(False, None, primal, None, "the rational primal is infeasible", n, m)
    # 2. the dual on HiGHS's support, by complementary slackness
    y_support = [j for j in range(m) if y_float[j] > tol]
    z_support = [i for i in range(n) if z_float[i] > tol]
    unknowns = {("y", j): k for k, j in enumerate(y_support)}
    unknowns.update({("z", i): len(y_support) + k for k, i in enumerate(z_support)})
    columns: list[dict] = [dict() for _ in range(n)]  # A^T restricted to the support
    for j in y_support:
        for col, v in rows[j].items():
            columns[col][unknowns[("y", j)]] = v
    for i in z_support:
        columns[i][unknowns[("z", i)]] = Fraction(1)
    dual_eqs = [(columns[i], c[i]) for i in range(n) if x_exact[i] > 0]
    dual_eqs += [({unknowns[key]: Fraction(1)}, Fraction(0)) for key in []]
    solution = _solve_exact(dual_eqs, len(unknowns))
    if solution is None:
        return ExactCertificate(False, None, primal, None, "the dual support does not determine the dual", n, m)
    if any(v < 0 for v in solution):
        return ExactCertificate(False, None, primal, None, "the rational dual has a negative entry", n, m)
    if any(sum(coef * solution[k] for k, coef in columns[i].items()) < c[i] for i in range(n)):
        return ExactCertificate(False, None, primal, None, "the rational dual is infeasible", n, m)
    dual = sum(b[j] * solution[unknowns[("y", j)]] for j in y_support) + \
        sum(upper[i] * solution[unknowns[("z", i)]] for i in z_support)
    if dual != primal:
        return ExactCertificate(False, None, primal, dual, f"duality gap {dual - primal}", n, m)
    return ExactCertificate(True, primal, primal, dual, "", n, m)


# --------------------------------------------------------------------------------------------------
# the tree LPs in exact arithmetic

def _exact_probs(model, prefix):
    return [Fraction(v) if not isinstance(v, Fraction) else v for v in model.probs(prefix)]


def _tree(target, draft, context, draft_length):
    """Nodes of depths 1..L in `lp`'s breadth-first order, with exact p(t | parent), q(u), parent index."""
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
    nodes, p_cond, q_joint, parent = _tree(target, draft, context, draft_length)
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
    nodes, p_cond, q_joint, parent = _tree(target, draft, context, draft_length)
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
