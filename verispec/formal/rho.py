"""SpecTr's rho as a solver variable with its defining equation (for `verispec prove`).

K-SEQ (Sun et al. 2023, "SpecTr: Fast Speculative Decoding via Optimal Transport", arXiv
2310.15141, Algorithm 3) accepts the k-th i.i.d. draft x_k ~ q with probability
min(1, p(x_k) / (rho q(x_k))), where rho in [1, K] solves

    f(rho) = 1 - (1 - beta(rho))^K - rho beta(rho) = 0,    beta(rho) = sum_x min(q(x), p(x) / rho).

The reference (`verispec.reference.verifiers.multidraft.spectr_rho`) finds rho by a float64
bisection, which has no symbolic meaning; for symbolic p, q it calls the hook `Sym.spectr_rho`,
which names rho a fresh z3 real here (`rho_symbol`) defined by (`defining_constraints`)

    f(1) <= 0 and rho = 1,   or   f(1) > 0, 1 <= rho <= K and f(rho) = 0.

They pick exactly the real root the reference approximates: f(1) >= 0, f(K) <= 0, f is continuous
and non-increasing, strictly decreasing on [1, K] when beta(1) > 0 and K >= 2, so the root there is
unique; when beta(1) = 0 (disjoint supports) f vanishes everywhere and the reference returns 1, as
the first case does. A comparison involving rho is then a decision of the replay like any other.
"""

from __future__ import annotations

import z3

__all__ = ["rho_symbol", "defining_constraints"]


def _min(a, b):
    return z3.If(a <= b, a, b)


def defining_constraints(p, q, K: int, rho) -> list:
    """The constraints that make the z3 real `rho` SpecTr's rho for the pair (p, q).

    Args:
        p, q: [V] z3 real terms (target and draft conditional at one node). K: drafts, >= 2.
        rho: the z3 real constant to constrain.
    Returns: a list of z3 boolean terms (their conjunction defines rho uniquely, see the module).
    """
    beta_one = z3.Sum([_min(qx, px) for px, qx in zip(p, q)])  # beta(1) = sum min(p, q)
    scaled = z3.Sum([_min(rho * qx, px) for px, qx in zip(p, q)])  # B = rho beta(rho)
    # f(1) = (1 - beta(1)) (1 - (1 - beta(1))^(K-1)) > 0  <=>  0 < beta(1) < 1 (K >= 2): linear.
    # rho^K f(rho) = rho^K - (rho - B)^K - rho^K B = B (sum_j rho^j (rho - B)^(K-1-j) - rho^K), and
    # B >= beta(1) > 0 in that case: the root is the zero of the second factor (degree K in rho).
    root = z3.Sum([rho ** j * (rho - scaled) ** (K - 1 - j) for j in range(K)]) == rho ** K
    interior = z3.And(beta_one > 0, beta_one < 1)
    return [rho >= 1, rho <= K, z3.Or(z3.And(z3.Not(interior), rho == 1), z3.And(interior, root))]


def rho_symbol(explorer, p, q, K: int):
    """The z3 real standing for SpecTr's rho of the pair (p, q) with K >= 2 drafts, in `explorer`.

    Args:
        explorer: the `verispec.formal.replay.Explorer` of the run (its `symbols` registry and
            `add_variable`). p, q: [V] z3 real terms. K: drafts, >= 2.
    Returns: a z3 real constant. The first time this (p, q, K) is met in the exploration, its
    `defining_constraints` join the constraints every path satisfies; every later replay reads the
    same symbol (rho is a function of the pair: one quantity, so the branch tree stays consistent).
    """
    key = ("spectr_rho", K, tuple(e.get_id() for e in p), tuple(e.get_id() for e in q))
    registry = explorer.symbols
    hit = registry.get(key)
    if hit is None:
        rho = z3.Real(f"spectr_rho!{len(registry)}")
        explorer.add_variable(rho, defining_constraints(p, q, K, rho))
        hit = registry[key] = (rho, p, q)  # the terms keep their AST ids theirs
    return hit[0]
