"""Linear programs that certify optimality of speculative-decoding verifiers (docs/theory.md).

Three LPs, all solved with cvxpy (HiGHS by default, Clarabel as fallback):

- `single_path`: the information-agnostic node-budget LP of Thomas & Pal 2026 (arXiv 2602.16961).
  Variables a(u) >= 0 for every node u of depth 1..L of the full V-ary tree below the context
  (a(u) = probability that the accepted prefix extends u); maximise sum_u a(u) = E[tau] subject to
  prefix matching a(u) <= q(u) and target matching a(u t) <= a(u) p(t | u), a(root) = 1.
  Its value equals block verification's E[tau] (Sun et al. 2024, arXiv 2403.10444).
- `multi_path`: the same LP for K i.i.d. draft paths, where prefix matching becomes the coverage
  constraint sum_{u in S} a(u) <= 1 - (1 - q(S))^K for every set S of same-depth nodes. Its value
  upper-bounds E[tau] of every valid K-path verifier.
- `multidraft`: the one-position transport LP of SpecTr (Sun et al. 2023, arXiv 2310.15141):
  a coupling of the law of the K drafts with p maximising P(Y in drafts) (the optimal acceptance
  alpha*; Hu et al. 2025, arXiv 2502.18779; Khisti et al. 2024, arXiv 2410.18234).

Modules: `solve` (the solver calls: cvxpy with HiGHS then Clarabel, and a warm incremental HiGHS
model), `trees` (the tree LPs `single_path` and `multi_path`, with exact separation of the coverage
constraints) and `transport` (`multidraft`). Every public name is importable from `lp` itself.
"""

from __future__ import annotations

from ...reference.draft_sets import draft_set_law
from .solve import DEFAULT_SOLVERS, SOLVER_OPTIONS, IncrementalHighs, LPResult, solve_lp
from .transport import multidraft
from .trees import (EXACT_SUBSET_LIMIT, FullTree, coverage, full_tree, most_violated_set, multi_path, single_path,
                    target_matching, violated_prefixes)

__all__ = ["LPResult", "solve_lp", "IncrementalHighs", "DEFAULT_SOLVERS", "SOLVER_OPTIONS", "FullTree", "full_tree",
           "target_matching", "single_path", "coverage", "most_violated_set", "violated_prefixes", "multi_path",
           "EXACT_SUBSET_LIMIT", "multidraft", "draft_set_law"]
