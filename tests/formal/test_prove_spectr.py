"""`verispec prove` on SpecTr (K-SEQ, arXiv 2310.15141): rho is a solver variable with its defining
equation (`verispec.formal.rho`), so the same rule code `check` enumerates runs symbolically."""

import random
import time
from fractions import Fraction

import numpy as np
import pytest
import z3

from verispec.formal import prove
from verispec.formal.replay import Explorer
from verispec.formal.rho import defining_constraints
from verispec.formal.symbolic import Sym, SymbolicError
from verispec.reference import exact, methods, models
from verispec.reference.verifiers.multidraft import spectr_rho
from verispec.testing import LosslessnessError, assert_lossless, planted


def test_spectr_is_proved_at_v2_l1_k2():
    result = prove("spectr", 2, 1, 2, timeout=120, workers=1)  # a helper process costs more than it saves here
    assert result.verdict == "proved", result.summary()
    assert len(result.queries) == 4 and all(q.result == "unsat" for q in result.queries)
    assert result.branch_points > 0 and result.leaves > 0


@pytest.mark.slow
@pytest.mark.parametrize("V, L", [(2, 2), (3, 1)])
def test_spectr_is_proved_at_the_larger_base_sizes(V, L):
    result = prove("spectr", V, L, 2, timeout=300)
    assert result.verdict == "proved", result.summary()


def test_planted_spectr_bug_is_refuted_and_confirmed_by_the_engine():
    bug = planted.BUGS["spectr_unscaled_residual"](1)
    result = prove(bug, 2, 1, 2, timeout=120)
    assert result.verdict == "counterexample", result.summary()
    cx = result.counterexample
    assert cx.confirmed and cx.found_by == "smt"
    # spectr's law is float64 for numbers (its rho is a float64 root): confirmed far above round-off
    assert cx.arithmetic == "float64" and cx.tv_iteration > 1e-3
    assert "float64" in result.reason
    namespace = {"method": bug}
    with pytest.raises(LosslessnessError):
        exec(cx.code, namespace)  # the printed reproduction fails as printed
    # the same pair is fine for the real rule
    target = models.table(cx.target, default=[Fraction(1, 2)] * 2, vocab_size=2)
    draft = models.table(cx.draft, default=[Fraction(1, 2)] * 2, vocab_size=2)
    assert_lossless(methods.spectr(1, 2), target=target, draft=draft, num_tokens=2)


def _random_point(rng, V):
    kind = rng.randrange(3)
    if kind == 0:  # a vertex
        point = [Fraction(0)] * V
        point[rng.randrange(V)] = Fraction(1)
        return point
    weights = [rng.randrange(0 if kind == 1 else 1, 20) for _ in range(V)]
    if not any(weights):
        weights[0] = 1
    return [Fraction(w, sum(weights)) for w in weights]


def _solver_rho(p, q, K):
    """(the z3 model's rho, uniqueness: is a rho 1e-6 away from it also allowed?)"""
    rho = z3.Real("rho")
    constraints = defining_constraints([z3.RealVal(x) for x in p], [z3.RealVal(x) for x in q], K, rho)
    solver = z3.Solver()
    solver.set("timeout", 20000)
    solver.add(*constraints)
    assert solver.check() == z3.sat  # a rho exists for every pair
    value = solver.model().eval(rho)
    approx = value.approx(30) if z3.is_algebraic_value(value) else value
    found = Fraction(approx.numerator_as_long(), approx.denominator_as_long())
    other = z3.Solver()
    other.set("timeout", 20000)
    other.add(*constraints, z3.Or(rho < found - Fraction(1, 10 ** 6), rho > found + Fraction(1, 10 ** 6)))
    return found, other.check()


def _f(p, q, K, rho):
    """SpecTr's defining function f(rho) = 1 - (1 - beta)^K - rho beta, in float64."""
    beta = sum(min(float(qx), float(px) / rho) for px, qx in zip(p, q))
    return 1 - (1 - beta) ** K - rho * beta


@pytest.mark.parametrize("seed", range(6))
def test_rho_constraints_pick_the_references_rho(seed):
    rng = random.Random(seed)
    V, K = rng.choice([(2, 2), (3, 2), (3, 3), (4, 2)])
    p, q = _random_point(rng, V), _random_point(rng, V)
    found, other = _solver_rho(p, q, K)
    reference = spectr_rho(np.array(p, dtype=object), np.array(q, dtype=object), K)
    assert abs(float(found) - reference) <= 1e-9, (p, q, K, found, reference)
    assert 1 <= found <= K and abs(_f(p, q, K, float(found))) <= 1e-9
    assert other == z3.unsat, (p, q, K)  # the constraints define rho uniquely


@pytest.mark.parametrize("p, q, rho", [
    ([Fraction(1, 3), Fraction(2, 3)], [Fraction(1, 3), Fraction(2, 3)], 1),  # p = q: beta(1) = 1
    ([Fraction(1), Fraction(0)], [Fraction(0), Fraction(1)], 1),  # disjoint supports: f = 0 everywhere
    ([Fraction(1, 4), Fraction(3, 4)], [Fraction(0), Fraction(1)], Fraction(3, 2)),  # a rational root
])
def test_rho_constraints_at_edge_pairs(p, q, rho):
    found, other = _solver_rho(p, q, 2)
    assert found == rho and other == z3.unsat
    assert spectr_rho(np.array(p, dtype=object), np.array(q, dtype=object), 2) == pytest.approx(float(rho), abs=1e-12)


def test_one_symbol_per_pair_for_every_replay():
    p = np.array([Sym(z3.Real("a")), Sym(1 - z3.Real("a"))], dtype=object)  # [V]
    q = np.array([Sym(z3.Real("b")), Sym(1 - z3.Real("b"))], dtype=object)  # [V]
    seen = []

    def program(rand):
        first = spectr_rho(p, q, 2)
        coin = rand.bernoulli(Fraction(1, 3))  # two replays
        seen.append((first.expr, spectr_rho(p, q, 2).expr, spectr_rho(q, p, 2).expr))
        return (int(coin),)

    base = [z3.Real("a") >= 0, z3.Real("a") <= 1, z3.Real("b") >= 0, z3.Real("b") <= 1]
    explorer = Explorer(base, time.monotonic() + 60)
    tree = explorer.run(program)
    assert tree.leaves == 2 and len(seen) == 2
    assert len(explorer.extra) == 2  # rho(p, q) and rho(q, p), each once
    assert all(a.eq(b) for a, b, _ in seen) and seen[0][0].eq(seen[1][0]) and not seen[0][0].eq(seen[0][2])
    assert spectr_rho(p, q, 1) == 1  # K = 1: plain speculative sampling, no variable


def test_symbolic_rho_outside_a_replay_raises():
    p = np.array([Sym(z3.Real("a")), Sym(1 - z3.Real("a"))], dtype=object)  # [V]
    with pytest.raises(SymbolicError):
        spectr_rho(p, p, 2)


def test_numbers_keep_the_float64_bisection():
    p = np.array([Fraction(1, 2), Fraction(1, 2)], dtype=object)  # [V]
    q = np.array([Fraction(1), Fraction(0)], dtype=object)  # [V]
    rho = spectr_rho(p, q, 2)
    assert isinstance(rho, float) and rho == pytest.approx(1 / (2 - 2 ** 0.5), abs=1e-12)
    law = exact.output_distribution(models.table({(): list(p)}, default=list(p), vocab_size=2),
                                    models.table({(): list(q)}, default=list(q), vocab_size=2),
                                    methods.spectr(1, 2), (), 1)
    assert abs(law[(0,)] - 0.5) <= 1e-12
