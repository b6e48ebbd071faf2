"""A counterexample search at structured points of the simplex, run before the symbolic proof.

Counterexamples to lossy rules tend to sit at special points of the simplex: vertices (one-hot
conditionals), edges (two tokens share the mass) and points with small denominators, where ties
and zeros happen. Evaluating the exact engine (Fractions) at a few such pairs is much cheaper than
exploring a large branch tree, so sizes whose exploration is out of reach (e.g. K = 3 paths of
length 2) can still be refuted here.

A pair found here is a counterexample by the same standard as the solver's: the exact engine's law
of the first N tokens differs from the target's. Finding none proves nothing; the proof follows.
"""

from __future__ import annotations

import itertools
import random
import time
from fractions import Fraction

from ..reference import exact
from ..reference.randomness import enumerate_law
from ._internal.counterexamples import Counterexample, repro_code, table_model
from ._internal.problem import method_program, wrap

__all__ = ["structured_point", "search"]

#: Masses an edge point gives its first token.
EDGE_MASSES = (Fraction(1, 2), Fraction(1, 3), Fraction(2, 3), Fraction(1, 4), Fraction(3, 4))

#: Denominator of the interior points.
INTERIOR_DENOMINATOR = 12


def structured_point(V: int, rng: random.Random) -> list:
    """One conditional [V] of Fractions: a vertex, an edge point or a small-denominator point
    (each with probability 1/3)."""
    kind = rng.randrange(3)
    point = [Fraction(0)] * V
    if kind == 0:
        point[rng.randrange(V)] = Fraction(1)
    elif kind == 1:
        i, j = rng.sample(range(V), 2)
        mass = rng.choice(EDGE_MASSES)
        point[i], point[j] = mass, 1 - mass
    else:  # a uniformly drawn composition of INTERIOR_DENOMINATOR into V parts
        cuts = sorted(rng.sample(range(1, INTERIOR_DENOMINATOR + V), V - 1))
        bounds = [0] + cuts + [INTERIOR_DENOMINATOR + V]
        point = [Fraction(bounds[i + 1] - bounds[i] - 1, INTERIOR_DENOMINATOR) for i in range(V)]
    return point


def _prefixes(V: int, max_length: int):
    """Every prefix of at most `max_length` tokens."""
    return [u for n in range(max_length + 1) for u in itertools.product(range(V), repeat=n)]


def search(method, V: int, depth: int, temperatures, trials: int, deadline: float, *, seed: int = 0,
           context=(), source=None):
    """Up to `trials` seeded structured pairs through the exact engine, stopping at `deadline`
    (one iteration from `context`, then the target, as `prove` compares them).

    Returns a confirmed `Counterexample` (``found_by="point search"``) or None. A pair on which the
    rule raises is skipped (the symbolic exploration reports crashes with their branch); a rule whose
    law is not exact (float64 inside) ends the search: its differences may be round-off.
    `source`: the method's `MethodSource` for the reproducing code (default: named from `method`).
    """
    N = depth + 1
    rng = random.Random(seed)
    for _ in range(trials):
        if time.monotonic() > deadline:
            return None
        p_table = {context + u: structured_point(V, rng) for u in _prefixes(V, depth)}
        q_table = {context + u: structured_point(V, rng) for u in _prefixes(V, depth - 1)}
        target = wrap(table_model(p_table, V), temperatures[0])
        draft = wrap(table_model(q_table, V), temperatures[1])
        try:
            law = enumerate_law(method_program(method, target, draft, N, context)).law
        except Exception:  # noqa: BLE001 - the rule's crash is reported by the symbolic run
            continue
        if not all(isinstance(x, (Fraction, int)) for x in law.values()):
            return None  # float64 inside the rule: a difference could be round-off, not a counterexample
        ref = exact.target_distribution(target, context, N)
        tv = exact.total_variation(law, ref)
        if tv == 0:
            continue
        output = max(set(law) | set(ref), key=lambda s: (abs(law.get(s, 0) - ref.get(s, 0)), s))
        loop = exact.output_distribution(target, draft, method, context, N)
        return Counterexample(output=output, target=p_table, draft=q_table,
                              method_probability=Fraction(law.get(output, 0)),
                              target_probability=Fraction(ref.get(output, 0)),
                              tv_iteration=Fraction(tv), tv_loop=Fraction(exact.total_variation(loop, ref)),
                              confirmed=True, code=repro_code(p_table, q_table, V, temperatures, N, source or method,
                                                               context),
                              found_by="point search")
    return None
