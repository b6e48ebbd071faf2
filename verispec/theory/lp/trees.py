"""The tree LPs of `verispec.theory.lp` (Thomas & Pal 2026, arXiv 2602.16961): `single_path` (its value
is block verification's E[tau]) and `multi_path` (the coverage bound on K i.i.d. draft paths), over
the full V-ary tree below a context (`full_tree`), with exact separation of the coverage
constraints by sorting (`most_violated_set`) for constraint generation."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ...reference.models import LanguageModel, check_positive_int, check_pair, check_prefix
from .solve import IncrementalHighs, LPResult, solve_lp

__all__ = ["FullTree", "full_tree", "target_matching", "single_path", "coverage", "most_violated_set",
           "violated_prefixes", "multi_path", "EXACT_SUBSET_LIMIT"]

#: Largest number of positive-probability nodes at one depth for which `multi_path(method="exact")`
#: enumerates every subset (2^m - 1 constraint rows).
EXACT_SUBSET_LIMIT = 16


@dataclass
class FullTree:
    """The full V-ary tree of depth L below a context, level by level (breadth-first order).

    Node i at depth l (0-based index within the level) has parent i // V at depth l - 1 and last
    token i % V. Arrays are float64 of shape [V^l] per level; `offsets[l - 1]` is the global index
    of the level's first node, so the global variable vector has V + V^2 + ... + V^L entries.
    """

    V: int
    L: int
    nodes: list  # list over depth of lists of node tuples
    p_cond: list  # p(t | parent) per level, [V^l]
    q_joint: list  # joint draft probability per level, [V^l]
    offsets: list

    @property
    def size(self) -> int:
        return self.offsets[-1] + len(self.nodes[-1])

    def all_nodes(self) -> list:
        return [u for level in self.nodes for u in level]


def full_tree(target: LanguageModel, draft: LanguageModel, context, draft_length) -> FullTree:
    """The `FullTree` of depth L below `context`: the variables of the tree LPs here and of
    `verispec.theory.frontier.draft_law_bound`, which adds its own coverage rows.

    Raises:
        TypeError / ValueError: mismatched models, draft None, bad context, draft_length < 1.
    """
    check_pair(target, draft)
    if draft is None:
        raise TypeError("draft: expected a LanguageModel, got NoneType")
    context = check_prefix(context, target.vocab_size, "context")
    L = check_positive_int(draft_length, "draft_length")
    V = target.vocab_size
    nodes, p_cond, q_joint, offsets = [], [], [], []
    parents, parent_q, offset = [()], np.ones(1), 0
    for _ in range(L):
        p_rows = np.array([np.asarray(target.probs(context + u), dtype=np.float64) for u in parents])
        q_rows = np.array([np.asarray(draft.probs(context + u), dtype=np.float64) for u in parents])
        level = [u + (t,) for u in parents for t in range(V)]
        nodes.append(level)
        p_cond.append(p_rows.reshape(-1))  # [V^l]
        q_level = (parent_q[:, None] * q_rows).reshape(-1)  # [V^l]
        q_joint.append(q_level)
        offsets.append(offset)
        offset += len(level)
        parents, parent_q = level, q_level
    return FullTree(V, L, nodes, p_cond, q_joint, offsets)


def target_matching(tree: FullTree):
    """Sparse rows of target matching, shared by every tree LP: a(u t) - p(t|u) a(u) <= 0
    (depth >= 2), a(t) <= p(t) at depth 1. Returns (matrix [n, n] csr, rhs [n])."""
    n, V = tree.size, tree.V
    idx = np.arange(n)
    rows, cols, vals = [idx], [idx], [np.ones(n)]
    rhs = np.zeros(n)
    rhs[: V] = tree.p_cond[0]
    for l in range(1, tree.L):
        m = len(tree.nodes[l])
        child = tree.offsets[l] + np.arange(m)
        parent = tree.offsets[l - 1] + np.arange(m) // V
        rows.append(child)
        cols.append(parent)
        vals.append(-tree.p_cond[l])
    matrix = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                           shape=(n, n))
    return matrix, rhs


def single_path(target: LanguageModel, draft: LanguageModel, context=(), draft_length: int = 1,
                solver: str | None = None) -> LPResult:
    """The information-agnostic single-path LP (Thomas & Pal 2026, arXiv 2602.16961).

    maximise sum_u a(u) over nodes u of depth 1..L of the full V-ary tree, subject to
    0 <= a(u) <= q(u) (joint draft probability) and a(u t) <= a(u) p(t | u), a(root) = 1.
    The optimum equals block verification's E[tau] (`closed_forms.block_expected_accepted_length`).

    Args:
        target, draft: LanguageModels over one vocabulary of size V (exact models are read as float64).
        context: tuple of token ids. draft_length: L >= 1.
        solver: a cvxpy solver name (default: HiGHS, then Clarabel).

    Returns:
        LPResult; value in expected accepted draft tokens (block efficiency = value + 1);
        num_variables = V + ... + V^L; num_constraints = 2 * num_variables (prefix + target rows).

    Raises:
        TypeError / ValueError: non-models, vocab mismatch, bad context, draft_length < 1.
        RuntimeError: no solver produced an optimal solution.
    """
    start = time.perf_counter()
    tree = full_tree(target, draft, context, draft_length)
    matrix, rhs = target_matching(tree)
    upper = np.concatenate(tree.q_joint)  # [n]
    build = time.perf_counter() - start
    x, value, name, status, solve_time, compile_time = solve_lp(np.ones(tree.size), matrix, rhs, upper,
                                                                 solver)
    return LPResult(value=value, node_budgets=dict(zip(tree.all_nodes(), x.tolist())), solver=name,
                    status=status, solve_time=solve_time, num_variables=tree.size,
                    num_constraints=2 * tree.size, method="full", setup_time=build + compile_time)


def coverage(q_mass, num_paths: int):
    """1 - (1 - q(S))^K: the probability that at least one of K i.i.d. paths passes through a set
    of same-depth nodes of total joint draft probability q(S) (elementwise on arrays)."""
    return 1.0 - (1.0 - np.minimum(q_mass, 1.0)) ** num_paths


def _prefix_violations(budgets, q_joint, num_paths: int):
    """Nodes sorted by a(u)/q(u) descending, and the violation a(S) - coverage(q(S)) of every
    prefix S of that order -> (order [m], violation [m])."""
    a = np.asarray(budgets, dtype=np.float64)  # [m]
    q = np.asarray(q_joint, dtype=np.float64)  # [m]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(q > 0, a / np.where(q > 0, q, 1.0), np.where(a > 0, np.inf, 0.0))
    order = np.argsort(-ratio, kind="stable")
    return order, np.cumsum(a[order]) - coverage(np.cumsum(q[order]), num_paths)


def most_violated_set(budgets, q_joint, num_paths: int):
    """The set S of same-depth nodes maximising sum_{u in S} a(u) - (1 - (1 - q(S))^K).

    Exact by sorting whenever some set is violated: 1 - (1 - m)^K is concave in m, so it is the
    minimum of its tangent lines c(lam) + lam m; with lam the slope at q(S*) of a maximiser S*,
    the set {u : a(u) > lam q(u)} — a prefix of the nodes sorted by a(u)/q(u) descending, or
    empty — is at least as violated as S*. So if the best violation is positive it is attained
    by a prefix, and scanning all prefixes finds it. (When no set is violated the returned
    violation is <= 0 but need not be the largest non-positive one.)

    Args:
        budgets: a(u) at one depth [m]; q_joint: q(u) [m]; num_paths: K.

    Returns:
        (indices of S as an int array, violation = a(S) - coverage(q(S))).
    """
    order, gain = _prefix_violations(budgets, q_joint, num_paths)
    best = int(np.argmax(gain))
    return order[: best + 1], float(gain[best])


def violated_prefixes(budgets, q_joint, num_paths: int, tolerance: float = 0.0):
    """Every prefix of the nodes sorted by a(u)/q(u) descending whose coverage constraint is
    violated by more than `tolerance`: [(indices, violation)], most violated first (the first is
    `most_violated_set` when any violation exceeds the tolerance). Adding all of them per round
    makes constraint generation converge in far fewer rounds on degenerate LPs."""
    order, gain = _prefix_violations(budgets, q_joint, num_paths)
    hits = np.flatnonzero(gain > tolerance)
    hits = hits[np.argsort(-gain[hits], kind="stable")]
    return [(order[: i + 1], float(gain[i])) for i in hits]


def multi_path(target: LanguageModel, draft: LanguageModel, context=(), draft_length: int = 1,
               num_paths: int = 1, *, method: str = "auto", solver: str | None = None,
               tolerance: float = 1e-9, max_rounds: int = 500) -> LPResult:
    """Upper bound on E[tau] of any valid verifier of K i.i.d. draft paths (docs/theory.md; Thomas & Pal
    2026, arXiv 2602.16961).

    Variables a(u) as in `single_path`; target matching a(u t) <= a(u) p(t|u); prefix matching
    sum_{u in S} a(u) <= 1 - (1 - q(S))^K for every depth l and every set S of depth-l nodes.

    Args:
        target, draft: LanguageModels over one vocabulary. context: tuple of token ids.
        draft_length: L >= 1. num_paths: K >= 1.
        method: "exact" enumerates every subset of the positive-probability nodes of each depth
            (at most `EXACT_SUBSET_LIMIT` = 16 such nodes per depth); "constraint_generation" starts
            from singletons and whole levels and adds the most violated set (`most_violated_set`,
            exact separation by sorting; every violated sorted prefix is added) per depth until
            none is violated by more than `tolerance` — with HiGHS this runs on one incremental
            highspy model re-solved warm each round (`info["backend"]`), else via cvxpy;
            "auto" picks "exact" when every depth has at most 10 positive-probability nodes.
        solver: cvxpy solver name (default HiGHS, then Clarabel).
        tolerance: violation threshold that ends constraint generation.
        max_rounds: cap on constraint-generation rounds (RuntimeError if reached).

    Returns:
        LPResult with `method` saying which formulation ran; `num_constraints` counts target rows
        plus coverage rows (the final round's, for constraint generation).

    Raises:
        TypeError / ValueError: bad models/context, draft_length or num_paths < 1, unknown method,
            or method="exact" on a level with more than 16 positive-probability nodes.
        RuntimeError: no solver succeeded, or constraint generation did not converge.
    """
    K = check_positive_int(num_paths, "num_paths")
    if method not in ("auto", "exact", "constraint_generation"):
        raise ValueError(f"method: expected 'auto', 'exact' or 'constraint_generation', got {method!r}")
    start = time.perf_counter()
    tree = full_tree(target, draft, context, draft_length)
    target_rows, target_rhs = target_matching(tree)
    support = [np.flatnonzero(qj > 0) for qj in tree.q_joint]  # per depth, indices within level
    widest = max(len(s) for s in support)
    if method == "auto":
        method = "exact" if widest <= 10 else "constraint_generation"
    if method == "exact" and widest > EXACT_SUBSET_LIMIT:
        raise ValueError(f"method: 'exact' needs at most {EXACT_SUBSET_LIMIT} positive-probability "
                         f"nodes per depth, this tree has {widest}; use 'constraint_generation'")
    # Nodes with q(u) = 0 are pinned to 0 by their singleton; the per-node upper bound is the
    # singleton coverage constraint.
    upper = coverage(np.concatenate(tree.q_joint), K)  # [n]
    problem = _CoverageLP(tree, support, target_rows, target_rhs, upper, K, solver, start)
    if method == "exact":
        return _multi_path_exact(problem)
    return _multi_path_generated(problem, tolerance, max_rounds)


@dataclass(frozen=True)
class _CoverageLP:
    """The pieces of one `multi_path` LP: the tree, the positive-probability nodes per depth
    (`support`), the target-matching rows and right-hand side, the per-node upper bounds, K, the
    solver name (None: the default order) and the start time (perf_counter) of its setup."""

    tree: FullTree
    support: list
    target_rows: object
    target_rhs: np.ndarray
    upper: np.ndarray
    K: int
    solver: str | None
    start: float


def _multi_path_exact(problem: _CoverageLP) -> LPResult:
    """`multi_path` with every coverage set of >= 2 positive-probability nodes per depth."""
    tree, K, n = problem.tree, problem.K, problem.tree.size
    blocks, rhss = [problem.target_rows], [problem.target_rhs]
    for level, s in enumerate(problem.support):
        m = len(s)
        if m < 2:
            continue  # singletons are the variable bounds
        masks = np.arange(1, 2 ** m, dtype=np.int64)
        member = ((masks[:, None] >> np.arange(m)) & 1).astype(bool)  # [2^m - 1, m]
        member = member[member.sum(axis=1) >= 2]
        mat = sp.csr_matrix(member.astype(np.float64))
        cols = tree.offsets[level] + s
        mat = sp.csr_matrix((mat.data, cols[mat.indices], mat.indptr), shape=(mat.shape[0], n))
        blocks.append(mat)
        rhss.append(coverage(member.astype(np.float64) @ tree.q_joint[level][s], K))
    a_ub, b_ub = sp.vstack(blocks, format="csr"), np.concatenate(rhss)
    build = time.perf_counter() - problem.start
    x, value, name, status, solve_time, compile_time = solve_lp(np.ones(n), a_ub, b_ub, problem.upper, problem.solver)
    return LPResult(value=value, node_budgets=dict(zip(tree.all_nodes(), x.tolist())), solver=name,
                    status=status, solve_time=solve_time, num_variables=n,
                    num_constraints=a_ub.shape[0] + n, method="exact",
                    setup_time=build + compile_time)


def _violated_cuts(tree, x, K, tolerance, seen, cuts):
    """The sorted prefixes that x violates by more than tolerance and are not yet cuts: added to
    `seen` / `cuts` and returned as [(level, subset)], with the largest violation."""
    pending, worst = [], 0.0
    for level in range(tree.L):
        lo = tree.offsets[level]
        budgets = x[lo: lo + len(tree.nodes[level])]
        for subset, violation in violated_prefixes(budgets, tree.q_joint[level], K, tolerance):
            worst = max(worst, violation)
            key = (level, tuple(sorted(subset.tolist())))
            if key not in seen:
                seen.add(key)
                cuts.setdefault(level, []).append(subset)
                pending.append((level, subset))
    return pending, worst


def _solve_cuts(problem: _CoverageLP, cuts, pending, incremental):
    """One round's LP: the new cuts added to the warm HiGHS model, or every cut rebuilt via cvxpy."""
    tree, K, n = problem.tree, problem.K, problem.tree.size
    if incremental is not None:
        rows, rhs = _cut_rows(tree, pending, n, K)
        x, value, status, solve_time = incremental.add_and_solve(rows, rhs)
        return x, value, "HIGHS", status, solve_time, 0.0
    blocks, rhss = [problem.target_rows], [problem.target_rhs]
    for level, sets in cuts.items():
        mat, rhs = _cut_rows(tree, [(level, s) for s in sets], n, K)
        blocks.append(mat)
        rhss.append(rhs)
    a_ub, b_ub = sp.vstack(blocks, format="csr"), np.concatenate(rhss)
    return solve_lp(np.ones(n), a_ub, b_ub, problem.upper, problem.solver)


def _multi_path_generated(problem: _CoverageLP, tolerance, max_rounds) -> LPResult:
    """`multi_path` by constraint generation: start from whole levels, add every violated sorted
    prefix per depth until none is violated by more than `tolerance`."""
    tree, K, n = problem.tree, problem.K, problem.tree.size
    cuts = {level: [s] for level, s in enumerate(problem.support) if len(s) >= 2}
    seen = {(level, tuple(sorted(s.tolist()))) for level, sets in cuts.items() for s in sets}
    build = time.perf_counter() - problem.start
    incremental = IncrementalHighs.create(n, problem.upper, problem.target_rows, problem.target_rhs) \
        if problem.solver in (None, "HIGHS") else None
    total_solve, total_compile, rounds = 0.0, 0.0, 0
    pending = [(level, s) for level, sets in cuts.items() for s in sets]
    while True:
        rounds += 1
        if rounds > max_rounds:
            raise RuntimeError(f"constraint generation did not converge in {max_rounds} rounds")
        x, value, name, status, solve_time, compile_time = _solve_cuts(problem, cuts, pending, incremental)
        total_solve += solve_time
        total_compile += compile_time
        pending, worst = _violated_cuts(tree, x, K, tolerance, seen, cuts)
        if not pending:
            break
    num_cuts = sum(len(v) for v in cuts.values())
    return LPResult(value=value, node_budgets=dict(zip(tree.all_nodes(), x.tolist())), solver=name,
                    status=status, solve_time=total_solve, num_variables=n,
                    num_constraints=n + num_cuts, method="constraint_generation", rounds=rounds,
                    setup_time=build + total_compile,
                    info={"cuts": num_cuts, "max_violation": worst,
                          "backend": "highspy (incremental)" if incremental is not None else "cvxpy"})


def _cut_rows(tree: FullTree, cuts, n: int, K: int):
    """Coverage rows sum_{u in S} a(u) <= 1 - (1 - q(S))^K for [(level, S indices)] -> (csr, rhs)."""
    if not cuts:
        return sp.csr_matrix((0, n)), np.zeros(0)
    rows = np.concatenate([np.full(len(s), i) for i, (_, s) in enumerate(cuts)])
    cols = np.concatenate([tree.offsets[level] + np.asarray(s) for level, s in cuts])
    mat = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(cuts), n))
    rhs = coverage(np.array([tree.q_joint[level][s].sum() for level, s in cuts]), K)
    return mat, rhs


