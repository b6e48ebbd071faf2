"""The optimal lossy frontier BE*(eps): the best block efficiency of ANY single-path verifier whose
one-iteration output is within total variation eps of the target (docs/theory.md).

The information-agnostic single-path LP of Thomas & Pal 2026 (arXiv 2602.16961) with its lossless
equality relaxed to TV <= eps. Over the full V-ary tree of depths 1..L below the context:

    a(u) in [0, q(u)]  P(the accepted prefix extends u)        (u must have been drafted)
    c(u) >= 0          P(the iteration stops at u's parent and corrects to u's last token)
    o(u)               P(the first |u| output tokens are u); every token after the iteration's
                       emission is the target's (its bonus token included)
    e(v) >= 0          |o(v) - P(v)| for v at depth L, P the target's joint law (TV made linear)

    flow    sum_t a(u t) + c(u t) = a(u),  a(root) = 1
    output  o(u t) = a(u t) + c(u t) + (o(u) - a(u)) p(t | u),  o(root) = 1
    TV      e(v) >= o(v) - P(v),  e(v) >= P(v) - o(v),  1/2 sum_v e(v) <= eps

maximise sum_u a(u) = E[tau]; BE*(eps) = E[tau] + 1. At eps = 0 this is the lossless LP (value =
block verification's E[tau]); at eps >= TV(Q_L, P_L) its value is L. Every feasible point is
attained by some verifier, so the value is the optimum, not only a bound (docs/theory.md).

- `frontier_program` / `total_variation_rows`: the LP's rows, in the number type of the inputs.
- `lossy_single_path`: solved in float64 (HiGHS through cvxpy) -> `lp.LPResult`.
- `lossy_certificate`: the optimum certified in Fractions (`exact_lp.certify_lp`).
- `iteration_total_variation`: the TV the frontier constrains, for any method's iteration.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import scipy.sparse as sp

from ..reference import exact
from ..reference.methods import Method
from ..reference.models import LanguageModel
from . import exact_lp, lp
from .closed_forms import check_tv_budget


@dataclass
class FrontierProgram:
    """max c.x s.t. rows x <= b, eq_rows x = eq_b, 0 <= x <= upper; rows are sparse
    {column: coefficient} dicts. Columns: a at [0, n), c at [n, 2n), o at [2n, 3n), e at
    [3n, 3n + len(leaves)); `leaves` are the node indices of depth L."""

    c: list
    rows: list
    b: list
    eq_rows: list
    eq_b: list
    upper: list
    num_nodes: int
    leaves: list


def _unit(tv):
    """1 in eps's number system (a Fraction for int or Fraction eps, so that 1/2 stays exact)."""
    return Fraction(1) if isinstance(tv, (int, Fraction)) else tv * 0 + 1


def total_variation_rows(output_columns, target_joint, aux_offset: int, tv):
    """Rows of TV(o, P) <= eps through auxiliary e(v) >= |o(v) - P(v)|: o(v) - e(v) <= P(v),
    -o(v) - e(v) <= -P(v) for every leaf v, and 1/2 sum_v e(v) <= eps.

    Args:
        output_columns: the column of o(v) per leaf [m]; target_joint: P(v) per leaf [m];
        aux_offset: the column of e of the first leaf; tv: eps.
    Returns:
        (rows [2m + 1] as {column: coefficient}, rhs [2m + 1]).
    """
    one = _unit(tv)
    rows, rhs = [], []
    for k, (col, target) in enumerate(zip(output_columns, target_joint)):
        rows += [{col: one, aux_offset + k: -one}, {col: -one, aux_offset + k: -one}]
        rhs += [target, -target]
    rows.append({aux_offset + k: one / 2 for k in range(len(output_columns))})
    rhs.append(tv)
    return rows, rhs


def frontier_program(p_cond, q_joint, parent, tv) -> FrontierProgram:
    """The lossy frontier LP of the tree given level by level in breadth-first order (as
    `exact_lp.tree_lists`): p(t | parent) [n], q(u) [n], parent index [n] (None at depth 1).
    Exact when the inputs and tv are Fractions."""
    n = len(p_cond)
    one = _unit(tv)
    depth, joint, children = [], [], {None: []}
    for i, j in enumerate(parent):
        depth.append(1 if j is None else depth[j] + 1)
        joint.append(p_cond[i] * (one if j is None else joint[j]))  # P(u)
        children.setdefault(j, []).append(i)
        children.setdefault(i, [])
    eq_rows, eq_b = [], []
    for u in [None] + list(range(n)):  # flow: the mass through u goes on or stops and corrects
        if children[u]:
            row = {col: one for i in children[u] for col in (i, n + i)}
            if u is not None:
                row[u] = -one
            eq_rows.append(row)
            eq_b.append(one if u is None else 0 * one)
    for i, j in enumerate(parent):  # output: accepted, corrected, or earlier output continued by p
        row = {2 * n + i: one, i: -one, n + i: -one}
        if j is not None and p_cond[i] != 0:
            row.update({j: p_cond[i], 2 * n + j: -p_cond[i]})
        eq_rows.append(row)
        eq_b.append(0 * one)
    leaves = [i for i in range(n) if depth[i] == max(depth)]
    rows, b = total_variation_rows([2 * n + i for i in leaves], [joint[i] for i in leaves], 3 * n, tv)
    upper = list(q_joint) + [one] * (2 * n + len(leaves))
    c = [one] * n + [0 * one] * (2 * n + len(leaves))
    return FrontierProgram(c, rows, b, eq_rows, eq_b, upper, n, leaves)


def _csr(rows, n):
    data = [float(v) for row in rows for v in row.values()]
    cols = [col for row in rows for col in row]
    rids = [r for r, row in enumerate(rows) for _ in row]
    return sp.csr_matrix((data, (rids, cols)), shape=(len(rows), n))


def lossy_single_path(target: LanguageModel, draft: LanguageModel, context=(), draft_length: int = 1,
                      tv=0.0, solver: str | None = None) -> lp.LPResult:
    """BE*(eps) - 1: the largest E[tau] of any single-path verifier of L draft tokens from `draft`
    whose one-iteration output law is within TV eps of the target's (module docstring).

    Args:
        target, draft: LanguageModels over one vocabulary of size V (read as float64).
        context: tuple of token ids. draft_length: L >= 1. tv: eps in [0, 1].
        solver: a cvxpy solver name (default: HiGHS, then Clarabel).

    Returns:
        LPResult with value = E[tau]* (accepted draft tokens; BE*(eps) = value + 1); node_budgets
        {node: a(u)}; info {"tv": eps, "output_law": {depth-L node: o(v)}, "x": every variable}.
        num_variables = 3 (V + ... + V^L) + V^L.

    Raises:
        TypeError / ValueError: non-models, vocab mismatch, bad context, draft_length < 1, tv not
            a number in [0, 1].
        RuntimeError: no solver produced an optimal solution.
    """
    check_tv_budget(tv)
    start = time.perf_counter()
    nodes, p_cond, q_joint, parent = exact_lp.tree_lists(target, draft, context, draft_length)
    prog = frontier_program([float(v) for v in p_cond], [float(v) for v in q_joint], parent, float(tv))
    size = len(prog.c)
    a_ub, a_eq = _csr(prog.rows, size), _csr(prog.eq_rows, size)
    build = time.perf_counter() - start
    x, value, name, status, solve_time, compile_time = lp.solve_lp(
        np.array(prog.c), a_ub, np.array(prog.b), np.array(prog.upper), solver, a_eq, np.array(prog.eq_b))
    n = prog.num_nodes
    output = {nodes[i]: float(x[2 * n + i]) for i in prog.leaves}
    return lp.LPResult(value=value, node_budgets=dict(zip(nodes, x[:n].tolist())), solver=name,
                       status=status, solve_time=solve_time, num_variables=size,
                       num_constraints=len(prog.rows) + len(prog.eq_rows), method="lossy",
                       setup_time=build + compile_time,
                       info={"tv": float(tv), "output_law": output, "x": x.tolist()})


def _renormalised(values, parent, joint: bool) -> list:
    """Exact conditionals (joint=False) or joint probabilities (joint=True) rescaled so that every
    node's children sum to it exactly (to 1 below the root): float64 rows read as exact binary
    rationals miss 1 by about 1e-16, and the flow and output rows need them exact. Rational
    models are unchanged."""
    totals: dict = {}
    for value, j in zip(values, parent):
        totals[j] = totals.get(j, 0) + value
    out: list = []
    for value, j in zip(values, parent):  # breadth-first: a parent precedes its children
        scale = out[j] if joint and j is not None else 1
        out.append(0 * value if totals[j] == 0 else value / totals[j] * scale)
    return out


def lossy_certificate(target, draft, context=(), draft_length: int = 1, tv=0, result=None):
    """The lossy frontier's optimum certified exactly: a rational primal and dual of the LP whose
    data are the exact rationals of the instance and of eps (`exact_lp.certify_lp`). Float64
    models' conditionals are read as their exact binary rationals divided by their exact sum
    (a change of about 1e-16), since the flow and output rows need each to sum to 1.

    Args:
        tv: eps (a Fraction, or a float read as its exact binary rational).
        result: a `lossy_single_path` result of the same instance whose primal is certified
            (default: HiGHS's).

    Returns:
        `exact_lp.ExactCertificate`; value = E[tau]* as a Fraction when certified.

    Raises:
        TypeError / ValueError: as `lossy_single_path`.
    """
    check_tv_budget(tv)
    _, p_cond, q_joint, parent = exact_lp.tree_lists(target, draft, context, draft_length)
    prog = frontier_program(_renormalised(p_cond, parent, False), _renormalised(q_joint, parent, True),
                            parent, Fraction(tv))
    x = None if result is None else result.info["x"]
    return exact_lp.certify_lp(prog.c, prog.rows, prog.b, prog.upper, x, eq_rows=prog.eq_rows, eq_b=prog.eq_b)


def iteration_total_variation(target: LanguageModel, draft: LanguageModel | None, method: Method, context=()):
    """The TV the frontier constrains, for any method: one iteration's emitted tokens (law
    `exact.iteration_distribution`) continued by the target up to the longest emission N, against
    the target's own law of N tokens. 0 for every lossless method; at draft length 1 it is the TV
    of the first emitted token. Exact for rational models.

    Raises:
        TypeError / ValueError: as `exact.iteration_distribution`.
    """
    law = exact.iteration_distribution(target, draft, method, context)
    N = max(len(tokens) for tokens in law)
    extended: dict = {}
    for tokens, prob in law.items():
        tails = exact.target_distribution(target, tuple(context) + tokens, N - len(tokens)) \
            if len(tokens) < N else {(): 1}
        for tail, tail_prob in tails.items():
            extended[tokens + tail] = extended.get(tokens + tail, 0) + prob * tail_prob
    return exact.total_variation(extended, exact.target_distribution(target, context, N))
