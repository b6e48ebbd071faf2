"""SpecTr's rho as a solver variable with its defining equation (for `verispec prove`).

K-SEQ (Sun et al. 2023, "SpecTr: Fast Speculative Decoding via Optimal Transport", arXiv
2310.15141, Algorithm 3) accepts the k-th i.i.d. draft x_k ~ q with probability
min(1, p(x_k) / (rho q(x_k))), where rho in [1, K] solves

    f(rho) = 1 - (1 - beta(rho))^K - rho beta(rho) = 0,    beta(rho) = sum_x min(q(x), p(x) / rho).

The reference (`verispec.reference.verifiers.multidraft.spectr_rho`) finds rho by a float64
bisection, which has no symbolic meaning. Here rho is a fresh z3 real, and what defines it joins
the constraints every path satisfies:

    f(1) <= 0 and rho = 1,   or   f(1) > 0, 1 <= rho <= K and f(rho) = 0,

written without division and in low degree: f(1) > 0 exactly when 0 < beta(1) < 1, and then
f(rho) = 0 exactly when sum_{j<K} rho^j (rho - B)^(K-1-j) = rho^K, B = rho beta(rho) =
sum_x min(rho q(x), p(x)) (an If per token; see `defining_constraints`). Why these pick exactly
the reference's rho (the real root it approximates): f(1) >= 0 always ((1 - beta)^K <= 1 - beta)
and f(K) <= 0 (Bernoulli's inequality), f is continuous and non-increasing (beta is non-increasing, rho beta is
non-decreasing), and strictly decreasing on [1, K] when beta(1) > 0 and K >= 2 — so a root in
[1, K] exists and is unique there; when beta(1) = 0 (disjoint supports) f vanishes everywhere and
the reference returns 1, as the first case does. K = 1 gives rho = 1 (plain speculative sampling).

A comparison involving rho (``p(x) / (rho q(x)) < 1``, the clip of q at p / rho) is then a decision
of the replay like any other: its feasibility is asked under the path condition, which holds these
constraints. The variable is named by the (p, q, K) it stands for, within one exploration: every
replay that reaches the same node reads the same symbol (rho is a function of the pair, so this is
one quantity, not a value cached across paths), and the branch tree stays consistent.
"""

from __future__ import annotations

from fractions import Fraction

import z3

from .symbolic import Sym, current_replay, to_z3

__all__ = ["spectr_rho", "defining_constraints"]


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


def spectr_rho(p, q, num_drafts: int):
    """rho for symbolic p, q ([V] numpy object arrays of `Sym`/numbers) inside a symbolic replay.

    Returns Fraction(1) when K = 1, else a `Sym` over a z3 real whose defining constraints
    (`defining_constraints`) are added to the exploration's base constraints the first time this
    (p, q, K) is met. Raises SymbolicError outside a replay.
    """
    K = int(num_drafts)
    if K == 1:
        return Fraction(1)
    explorer = current_replay().explorer
    ps, qs = [to_z3(x) for x in p], [to_z3(x) for x in q]
    key = ("spectr_rho", K, tuple(e.get_id() for e in ps), tuple(e.get_id() for e in qs))
    registry = explorer.symbols
    hit = registry.get(key)
    if hit is None:
        rho = z3.Real(f"spectr_rho!{len(registry)}")
        explorer.add_variable(rho, defining_constraints(ps, qs, K, rho))
        hit = registry[key] = (rho, ps, qs)  # the terms keep their AST ids theirs
    return Sym(hit[0])
