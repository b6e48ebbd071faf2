"""The symbolic real: exact arithmetic with ints/Fractions, comparisons answered by a replay."""

from fractions import Fraction

import numpy as np
import pytest
import z3

from verispec.formal.replay import Explorer
from verispec.formal.symbolic import Sym, SymbolicError, to_z3


def _proves_equal(a, b):
    solver = z3.Solver()
    solver.add(to_z3(a) != to_z3(b))
    return solver.check() == z3.unsat


def test_arithmetic_with_ints_and_fractions_including_reflected_operators_and_powers():
    x = Sym(z3.Real("x"))
    half = Fraction(1, 2)
    assert _proves_equal((1 - x) * 2 + x / 2, 2 - 3 * x / 2)
    assert _proves_equal(half * x + x * half, x)
    assert _proves_equal(x ** 3, x * x * x)
    assert _proves_equal(x ** -2, 1 / (x * x))
    assert x ** 0 == 1 and x ** 1 is x
    assert _proves_equal(0.5 * x, x / 2)  # a finite float is the exact rational it denotes


def test_shortcuts_keep_concrete_zeros_concrete():
    x = Sym(z3.Real("x"))
    assert x * 0 == 0 and isinstance(x * 0, Fraction)
    assert 0 / x == 0 and (x + 0) is x and (x - 0) is x and (x * 1) is x
    with pytest.raises(ZeroDivisionError):
        x / 0


def test_no_float_no_log_no_symbolic_exponent():
    x = Sym(z3.Real("x"))
    for bad in (lambda: float(x), lambda: int(x), lambda: x ** 0.5, lambda: 2 ** x,
                lambda: np.log(np.array([x], dtype=object)), lambda: np.asarray([x], dtype=np.float64)):
        with pytest.raises((SymbolicError, TypeError, AttributeError)):
            bad()
    with pytest.raises(SymbolicError):
        float(x)


def test_hash_by_identity_and_comparison_outside_a_replay_raises():
    x, y = Sym(z3.Real("x")), Sym(z3.Real("x"))
    assert len({x, y, x}) == 2
    with pytest.raises(SymbolicError):
        x < 1


def test_object_arrays_broadcast_element_by_element():
    x = Sym(z3.Real("x"))
    arr = np.array([x, 1 - x], dtype=object)  # [2]
    out = 2 * arr + Fraction(1, 3)
    assert out.dtype == object and out.shape == (2,)
    assert _proves_equal(out.sum(), Fraction(8, 3))


def _explore(program, base):
    import time

    return Explorer(list(base), time.monotonic() + 30).run(program)


def test_comparison_forks_only_when_both_outcomes_are_feasible():
    x = z3.Real("x")
    base = [x >= 0, x <= 1]
    s = Sym(x)

    def program(rand):
        return (s < Fraction(1, 2), s <= 1, s < Fraction(1, 2))  # the repeated question is remembered

    tree = _explore(program, base)
    # x < 1/2 forks once; x <= 1 is implied by the simplex (asked on both paths, never forked)
    assert tree.leaves == 2 and tree.decisions == 3
    assert sum(1 for n in tree.nodes() if n.kind == "decide" and n.forked) == 1
    assert {n.payload for n in tree.nodes() if n.kind == "leaf"} == {(True, True, True), (False, True, False)}


def test_chance_outcomes_assume_a_positive_weight():
    x = z3.Real("x")
    s = Sym(x)

    def program(rand):
        if rand.bernoulli(s):  # then x > 0 on this path: the test below cannot fork
            return ("heads", s == 0)
        return ("tails", s == 1)

    tree = _explore(program, [x >= 0, x <= 1])
    assert sorted(n.payload for n in tree.nodes() if n.kind == "leaf") == [("heads", False), ("tails", False)]
