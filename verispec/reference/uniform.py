"""`rand.uniform()`: an exact U[0, 1) that enumerators split lazily at the thresholds it meets.

Engine code often draws one uniform and compares it with several thresholds (a CDF walk), tests
``u * q(x) <= p(x)`` (rejection sampling), or rounds it to a grid (a float32 coin, k / 2**24). A port
that draws its uniforms through ``rand.uniform()`` runs three ways:

- `Sampler.uniform()` returns a float from the generator (the same stream as bernoulli/categorical);
- under the exact enumerator, and under `verispec.formal`'s symbolic replay, it returns a
  `LazyUniform`: u is known only as an interval [lo, hi), and a comparison with a threshold t inside
  it is a Bernoulli((t - lo) / (hi - lo)) branch that narrows the interval. Nothing is drawn up
  front, and each branch has its exact probability.

Allowed on a LazyUniform: affine maps with a concrete or symbolic coefficient (``a * u + b``,
``u / a``, ``1 - u``), ``math.floor`` (a monotone step map; e.g. ``math.floor(u * 2**24) / 2**24``),
and the comparisons < <= > >= with a number. Equality and float() have no exact meaning and raise.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

__all__ = ["LazyUniform"]

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _is_number(x) -> bool:
    # Anything with arithmetic and comparisons: int, Fraction, float, numpy scalars, symbolic reals.
    return not isinstance(x, (LazyUniform, str, bytes, bool)) and hasattr(x, "__add__") and hasattr(x, "__lt__")


class LazyUniform:
    """u ~ U[0, 1) (or a monotone transform of it) whose value is revealed only by comparisons.

    Args:
        rand: the enumerator's Randomness; comparisons call ``rand.bernoulli``.
    """

    __slots__ = ("_state", "_ops")

    def __init__(self, rand, _state=None, _ops=()):
        self._state = _state if _state is not None else {"rand": rand, "lo": 0, "hi": 1}
        self._ops = _ops  # transforms applied to the base uniform, first to last

    def _then(self, op):
        return LazyUniform(None, self._state, self._ops + (op,))

    # -- monotone transforms -----------------------------------------------------------------
    def __mul__(self, a):
        return self._then(("affine", a, 0)) if _is_number(a) else NotImplemented

    __rmul__ = __mul__

    def __truediv__(self, a):
        return self._then(("affine", 1 / _exact(a), 0)) if _is_number(a) else NotImplemented

    def __add__(self, b):
        return self._then(("affine", 1, b)) if _is_number(b) else NotImplemented

    __radd__ = __add__

    def __sub__(self, b):
        return self._then(("affine", 1, -b)) if _is_number(b) else NotImplemented

    def __rsub__(self, b):
        return self._then(("affine", -1, b)) if _is_number(b) else NotImplemented

    def __neg__(self):
        return self._then(("affine", -1, 0))

    def __floor__(self):
        return self._then(("floor",))

    # -- comparisons: each one is an exact split of the base uniform ---------------------------
    def _compare(self, op, t):
        if not _is_number(t):
            return NotImplemented
        for kind, *args in reversed(self._ops):
            if kind == "affine":
                a, b = args
                if a == 0:
                    return _holds(op, b, t)
                t = (t - b) / _exact(a)
                op = op if a > 0 else _FLIP[op]
            else:  # floor(x) against t, as x against an integer
                if op == "<":
                    op, t = "<", math.ceil(t)
                elif op == "<=":
                    op, t = "<", math.floor(t) + 1
                elif op == ">":
                    op, t = ">=", math.floor(t) + 1
                else:
                    op, t = ">=", math.ceil(t)
        below = self._split(t)  # u < t (u <= t differs on a set of probability 0)
        return below if op in ("<", "<=") else not below

    def _split(self, t) -> bool:
        state = self._state
        lo, hi = state["lo"], state["hi"]
        if t <= lo:
            return False
        if t >= hi:
            return True
        if state["rand"].bernoulli((t - lo) / (hi - lo)):
            state["hi"] = t
            return True
        state["lo"] = t
        return False

    def __lt__(self, t):
        return self._compare("<", t)

    def __le__(self, t):
        return self._compare("<=", t)

    def __gt__(self, t):
        return self._compare(">", t)

    def __ge__(self, t):
        return self._compare(">=", t)

    def __eq__(self, other):
        raise TypeError("uniform: == has no exact meaning for a continuous uniform; compare with < or <=")

    __ne__ = __eq__
    __hash__ = object.__hash__

    def __bool__(self):
        raise TypeError("uniform: the truth value of an exact uniform is undefined; compare it with a threshold")

    def __float__(self):
        raise TypeError("uniform: an exact uniform has no single value under enumeration; compare it with "
                        "thresholds (u < t, u * q <= p, math.floor(u * 2**24) < k)")

    def __repr__(self):
        return f"LazyUniform([{self._state['lo']}, {self._state['hi']}), transforms={len(self._ops)})"


def _exact(a):
    """An int as a Fraction, so that dividing by it stays exact (int / int is a float)."""
    return Fraction(a) if isinstance(a, (int, np.integer)) and not isinstance(a, bool) else a


def _holds(op, a, b) -> bool:
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
