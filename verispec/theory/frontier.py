"""Where the newer verifiers sit against the bounds: one-step acceptance against the transport
optimum, and the point-mass-draft comparison of block and token verification.

- `one_step_acceptance`: P(the emitted token is a drafted one) of a method at one position, by
  exact enumeration (draft length 1, context-free models p, q).
- `cut_bound`: the transport-LP optimum of any draft-SET law by max-flow/min-cut,
  min over token sets H of p(H) + P(some draft outside H) (SpecTr, arXiv 2310.15141; Hu et al.
  2025, arXiv 2502.18779) — by brute force over all 2^V sets, so it covers draft laws with no
  sorted-prefix shortcut (SpecHub's hub pairs).
- `hub_set_law`: the law of SpecHub's drafted pair {first, second} (arXiv 2411.05289).
- `point_mass_comparison`: token vs block verification with point-mass (q = 1) drafts, exactly.
- `draft_law_bound`: the multi-path LP bound on E[tau] for ANY drafter, from the exact law of its
  drafted node sets (`drafted_node_law`); for i.i.d. paths it equals `lp.multi_path`.
"""

from __future__ import annotations

import itertools

import numpy as np
import scipy.sparse as sp

from ..reference import drafters, exact, methods, models
from ..reference.deprecation import renamed_keywords
from ..reference.models import check_positive_int
from ..reference.probability import as_probs
from ..reference.randomness import enumerate_law
from ..reference.verifiers.spechub import hub_pair
from . import lp


@renamed_keywords(num_drafts="num_paths")
def one_step_acceptance(name: str, p, q, num_paths: int = 2):
    """P(Y is drafted) of built-in method `name` at ONE position (draft length 1), target p and
    draft q [V] (context-free), K = num_paths paths (ignored by methods without K). Exact for
    Fraction inputs (except spectr, float).

    Raises:
        ValueError / TypeError: unknown method, p or q not distributions, K < 1.
    """
    p, q = as_probs(p, "p"), as_probs(q, "q", None)
    K = check_positive_int(num_paths, "num_paths")
    method = methods.get_compatible(name, draft_length=1, num_paths=K)
    law = exact.iteration_distribution(models.iid(p), models.iid(q), method)
    return sum(prob for tokens, prob in law.items() if len(tokens) == 2)


def cut_bound(p, set_law: dict):
    """min over all token sets H of p(H) + P(S not within H): the best one-step acceptance of any
    valid verifier whose drafted token set S has law `set_law` ({sorted token tuple: prob}).

    Exact (Fractions in, Fractions out); costs 2^V, so V <= 16.

    Raises:
        ValueError: V > 16.
    """
    p = as_probs(p, "p")
    V = len(p)
    if V > 16:
        raise ValueError(f"p: cut_bound enumerates 2^V token sets; V = {V} > 16")
    best = None
    for size in range(V + 1):
        for H in itertools.combinations(range(V), size):
            inside = set(H)
            value = sum((p[t] for t in H), p[0] * 0) + sum(
                (prob for S, prob in set_law.items() if not inside.issuperset(S)), p[0] * 0)
            best = value if best is None or value < best else best
    return best


def hub_set_law(q) -> dict:
    """The law of the SET of SpecHub's two drafts from q: {sorted token tuple: prob}, exactly."""
    q = as_probs(q, "q")
    return enumerate_law(lambda rand: tuple(sorted(hub_pair(q, rand)))).law


def point_mass_comparison(target, phrase, context=()) -> dict:
    """Token vs block verification of ONE point-mass draft `phrase` (q = one-hot on each drafted
    token, as n-gram / prompt-lookup drafters propose), exactly.

    Returns:
        {"token": law of tau, "block": law of tau, "expected": {name: E[tau]},
         "acceptance_rate": {name: E[tau] / L}} — both laws are {tau: prob}.
    """
    phrase = tuple(int(t) for t in phrase)
    L = len(phrase)
    drafter = drafters.point_mass(lambda ctx: phrase, draft_length=L, vocab_size=target.vocab_size)
    out = {"token": None, "block": None, "expected": {}, "acceptance_rate": {}}
    for name, verify in (("token", methods.token(L).verify), ("block", methods.block(L).verify)):
        method = methods.Method(name, drafter, verify, {"draft_length": L})
        law = exact.accepted_length_distribution(target, None, method, context)
        out[name] = law
        out["expected"][name] = sum(tau * prob for tau, prob in law.items())
        out["acceptance_rate"][name] = out["expected"][name] / L
    return out


def drafted_node_law(drafter, draft_model, context=()) -> dict:
    """The exact law of the SETS of drafted nodes, depth by depth, of any drafter:
    {(nodes at depth 1, nodes at depth 2, ...) as sorted tuples: prob}. Reads only which children
    were drafted, never their order."""

    def node_sets(rand):
        draft = drafter(draft_model, tuple(context), rand)
        levels, frontier_nodes = [], [()]
        while True:
            level = sorted(u + (t,) for u in frontier_nodes for t in draft.counts(u))
            if not level:
                return tuple(levels)
            levels.append(tuple(level))
            frontier_nodes = level

    return enumerate_law(node_sets).law


def draft_law_bound(target, draft_model, drafter, draft_length: int, context=(), solver=None):
    """Upper bound on E[tau] of ANY valid verifier of the drafts of `drafter` (any draft law, not
    only i.i.d. paths): the information-agnostic LP of Thomas & Pal 2026 (arXiv 2602.16961) with its
    coverage constraints taken from the drafter's exact node-set law — for every depth l and every
    set S of depth-l nodes, sum_{u in S} a(u) <= P(some node of S is drafted) (one accepted path
    passes through at most one node of S); target matching a(u t) <= a(u) p(t | u).

    All subsets are enumerated, so it is for tiny trees (at most 16 possibly-drafted nodes per
    depth). Returns the LP value (float, accepted draft tokens).

    Raises:
        ValueError: a depth with more than 16 possibly-drafted nodes.
    """
    L = check_positive_int(draft_length, "draft_length")
    tree = lp.full_tree(target, draft_model, context, L)
    law = drafted_node_law(drafter, draft_model, context)
    rows, rhs = [lp.target_matching(tree)[0]], [lp.target_matching(tree)[1]]
    upper = np.zeros(tree.size)
    for depth in range(L):
        index = {u: tree.offsets[depth] + i for i, u in enumerate(tree.nodes[depth])}
        outcomes = [(set(levels[depth]) if depth < len(levels) else set(), float(prob))
                    for levels, prob in law.items()]
        possible = sorted(set().union(*(s for s, _ in outcomes)))
        if len(possible) > 16:
            raise ValueError(f"drafter: {len(possible)} possibly-drafted nodes at depth {depth + 1} (> 16)")
        for size in range(1, len(possible) + 1):
            for S in itertools.combinations(possible, size):
                cover = sum(prob for drafted, prob in outcomes if drafted.intersection(S))
                if size == 1:
                    upper[index[S[0]]] = cover
                    continue
                row = np.zeros(tree.size)
                row[[index[u] for u in S]] = 1.0
                rows.append(sp.csr_matrix(row))
                rhs.append(np.array([cover]))
    a_ub, b_ub = sp.vstack(rows, format="csr"), np.concatenate(rhs)
    return lp.solve_lp(np.ones(tree.size), a_ub, b_ub, upper, solver)[1]
