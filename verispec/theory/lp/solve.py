"""The LP solver calls of `verispec.theory.lp`: cvxpy (HiGHS, then Clarabel) with tolerances tight
enough for certificates, and a HiGHS model kept warm across rounds of constraint generation."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import cvxpy as cp
import highspy
import numpy as np
import scipy.sparse as sp

__all__ = ["LPResult", "solve_lp", "IncrementalHighs", "DEFAULT_SOLVERS", "SOLVER_OPTIONS"]

#: Solvers tried in order when `solver=None`.
DEFAULT_SOLVERS = ("HIGHS", "CLARABEL")

#: Solver options: tighter than the defaults (1e-7) so LP values match closed forms to ~1e-12.
SOLVER_OPTIONS = {
    "HIGHS": {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10},
    "CLARABEL": {"tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-10},
}

@dataclass
class LPResult:
    """The solution of one LP, with its cost.

    Attributes:
        value: the optimal objective (expected accepted draft tokens for the tree LPs; the optimal
            acceptance probability for `multidraft`).
        node_budgets: {node tuple: a(u)} for the tree LPs (nodes relative to the context); for
            `multidraft`, {(drafted token set as a sorted tuple, y): pi} for the positive entries.
        solver: the cvxpy solver name that produced the solution.
        status: cvxpy status string ("optimal", ...).
        solve_time: seconds spent in the solver (summed over rounds of constraint generation).
        num_variables: number of scalar LP variables.
        num_constraints: number of scalar inequality/equality rows, excluding the variables'
            non-negativity (for constraint generation: the rows of the final round).
        method: how the constraints were built ("full", "exact", "constraint_generation",
            "transport").
        rounds: LP solves performed (> 1 only for constraint generation).
        setup_time: seconds spent building the LP (model calls, matrices, cvxpy compilation).
        info: extra diagnostics (e.g. constraint-generation cut counts).
    """

    value: float
    node_budgets: dict
    solver: str
    status: str
    solve_time: float
    num_variables: int
    num_constraints: int
    method: str = "full"
    rounds: int = 1
    setup_time: float = 0.0
    info: dict = field(default_factory=dict)


def solve_lp(objective_vec, a_ub, b_ub, upper, solver, a_eq=None, b_eq=None):
    """maximise c^T x s.t. A_ub x <= b_ub, A_eq x = b_eq, 0 <= x <= upper, with cvxpy, trying
    `DEFAULT_SOLVERS` in turn (or only `solver`); an inexact status is refused (not a certificate).

    Returns (x [n], value, solver name, status, solver seconds, compile seconds)."""
    n = len(objective_vec)
    x = cp.Variable(n)
    constraints = [x >= 0]
    if upper is not None:
        constraints.append(x <= upper)
    if a_ub is not None and a_ub.shape[0]:
        constraints.append(a_ub @ x <= b_ub)
    if a_eq is not None and a_eq.shape[0]:
        constraints.append(a_eq @ x == b_eq)
    problem = cp.Problem(cp.Maximize(objective_vec @ x), constraints)
    names = DEFAULT_SOLVERS if solver is None else (solver,)
    installed = set(cp.installed_solvers())
    last_error = None
    for name in names:
        if name not in installed:
            last_error = RuntimeError(f"solver {name} is not installed")
            continue
        start = time.perf_counter()
        try:
            problem.solve(solver=name, **SOLVER_OPTIONS.get(name, {}))
        except cp.error.SolverError as err:  # pragma: no cover - depends on the solver build
            last_error = err
            continue
        wall = time.perf_counter() - start
        if problem.status != "optimal":  # "optimal_inaccurate" is refused: not a certificate
            last_error = RuntimeError(f"solver {name} returned status {problem.status}")
            continue
        stats = problem.solver_stats
        solve_time = stats.solve_time if stats is not None and stats.solve_time is not None else wall
        return (np.asarray(x.value, dtype=np.float64), float(problem.value), name, problem.status,
                float(solve_time), max(wall - float(solve_time), 0.0))
    raise RuntimeError(f"no LP solver succeeded ({last_error})")


class IncrementalHighs:
    """A HiGHS model kept alive across constraint-generation rounds: new cut rows are appended and
    the LP is re-solved warm (dual simplex from the previous basis). cvxpy would rebuild and cold
    solve every round, which made degenerate instances take hundreds of slow rounds."""

    def __init__(self, highs, hs):
        self.highs, self.hs = highs, hs

    @classmethod
    def create(cls, n, upper, rows, rhs):
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        for key, val in SOLVER_OPTIONS["HIGHS"].items():
            h.setOptionValue(key, val)
        h.addVars(n, np.zeros(n), np.asarray(upper, dtype=np.float64))
        h.changeColsCost(n, np.arange(n, dtype=np.int32), np.ones(n))
        h.changeObjectiveSense(highspy.ObjSense.kMaximize)
        out = cls(h, highspy)
        out._add(rows, rhs)
        return out

    def _add(self, rows, rhs):
        rows = sp.csr_matrix(rows)
        if rows.shape[0] == 0:
            return
        self.highs.addRows(rows.shape[0], np.full(rows.shape[0], -np.inf), np.asarray(rhs, dtype=np.float64),
                           rows.nnz, rows.indptr[:-1].astype(np.int32), rows.indices.astype(np.int32),
                           rows.data.astype(np.float64))

    def add_and_solve(self, rows, rhs):
        self._add(rows, rhs)
        start = time.perf_counter()
        self.highs.run()
        elapsed = time.perf_counter() - start
        status = self.highs.modelStatusToString(self.highs.getModelStatus())
        if self.highs.getModelStatus() != self.hs.HighsModelStatus.kOptimal:
            raise RuntimeError(f"HiGHS returned status {status}")
        x = np.asarray(self.highs.getSolution().col_value, dtype=np.float64)
        value = float(self.highs.getInfo().objective_function_value)
        return x, value, "optimal", elapsed
