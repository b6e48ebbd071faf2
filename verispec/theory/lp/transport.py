"""The one-position transport LP of multi-draft selection (`multidraft`; SpecTr, Sun et al. 2023,
arXiv 2310.15141)."""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from ...reference.draft_sets import draft_set_law
from ...reference.deprecation import renamed_keywords
from ...reference.models import check_positive_int
from ...reference.probability import as_probs
from .solve import LPResult, solve_lp

__all__ = ["multidraft"]


@renamed_keywords(num_drafts="num_paths")
def multidraft(p, q, num_paths: int, replacement: bool = True, solver: str | None = None) -> LPResult:
    """The one-position transport LP (SpecTr, Sun et al. 2023, arXiv 2310.15141).

    Variables pi(S, y) >= 0 over drafted token sets S (law Q(S) from `draft_set_law`) and outputs y:
    sum_y pi(S, y) = Q(S), sum_S pi(S, y) = p(y) (posed as <= rows, same optimum); maximise sum_{y in S} pi(S, y) = P(Y in drafts).
    (Only the set of drafted tokens matters for the objective, so couplings of ordered tuples
    reduce to couplings of sets without loss.) With replacement the value equals
    `closed_forms.optimal_multidraft_acceptance` (Hu et al. 2025, arXiv 2502.18779; Khisti et al.
    2024, arXiv 2410.18234).

    Args:
        p, q: target and draft distributions [V] (float or Fraction; validated).
        num_paths: K >= 1. replacement: i.i.d. drafts (True) or distinct draws (False).

    Returns:
        LPResult; value = alpha*; node_budgets = {(S, y): pi(S, y)} for pi > 1e-12 (a full
        coupling: the LP's sub-coupling plus the product of the leftover marginals).

    Raises:
        TypeError / ValueError: p or q not a distribution, mismatched lengths, K < 1.
    """
    p = np.asarray(as_probs(p, "p"), dtype=np.float64)
    q = np.asarray(as_probs(q, "q", len(p)), dtype=np.float64)
    K = check_positive_int(num_paths, "num_paths")
    start = time.perf_counter()
    law = draft_set_law(q, K, replacement)
    sets = list(law)
    V, m = len(p), len(sets)
    n = m * V  # variable (i, y) at index i * V + y
    objective = np.zeros(n)
    for i, s in enumerate(sets):
        objective[i * V + np.array(s, dtype=int)] = 1.0
    row_sets = sp.kron(sp.identity(m), np.ones((1, V)), format="csr")  # [m, n]
    row_y = sp.kron(np.ones((1, m)), sp.identity(V), format="csr")  # [V, n]
    # Marginals as <= rows: a sub-coupling's success mass extends to a full coupling (couple the
    # leftover masses by their product), so the optimum is unchanged, and round-off in
    # sum Q != sum p cannot make the LP infeasible.
    a_ub = sp.vstack([row_sets, row_y], format="csr")
    b_ub = np.concatenate([np.array([law[s] for s in sets]), p])
    build = time.perf_counter() - start
    x, value, name, status, solve_time, compile_time = solve_lp(objective, a_ub, b_ub, None, solver)
    # Complete the sub-coupling to a coupling: leftover set mass x leftover target mass / total.
    pi = np.maximum(x, 0.0).reshape(m, V)  # [m, V]
    left_sets = np.maximum(b_ub[:m] - pi.sum(axis=1), 0.0)  # [m]
    left_y = np.maximum(p - pi.sum(axis=0), 0.0)  # [V]
    if left_y.sum() > 0:
        pi = pi + np.outer(left_sets, left_y) / left_y.sum()
    plan = {(sets[i], y): float(pi[i, y]) for i in range(m) for y in range(V) if pi[i, y] > 1e-12}
    return LPResult(value=value, node_budgets=plan, solver=name, status=status, solve_time=solve_time,
                    num_variables=n, num_constraints=m + V, method="transport",
                    setup_time=build + compile_time)
