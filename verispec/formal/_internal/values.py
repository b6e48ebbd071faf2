"""Solver pairs as exact numbers: a z3 value as a Fraction, and a pair sent between processes."""

from __future__ import annotations

from fractions import Fraction

import z3

from ..symbolic import SymbolicError

__all__ = ["rational", "ValuesModel", "model_values"]


def rational(value) -> Fraction:
    """A z3 model's number as a Fraction (an algebraic one approximated to 1e-12); SymbolicError else."""
    if z3.is_rational_value(value):
        return Fraction(value.numerator_as_long(), value.denominator_as_long())
    if z3.is_algebraic_value(value):
        approx = value.approx(40)
        return Fraction(approx.numerator_as_long(), approx.denominator_as_long()).limit_denominator(10 ** 12)
    raise SymbolicError(f"the solver's value {value} is not a number")


class ValuesModel:
    """A solver pair as {variable name: Fraction} (from another process or solver), read like a z3 model."""

    def __init__(self, values: dict):
        self.values = values

    def eval(self, x, model_completion=True):
        """The z3 value of the variable `x` (0 for a variable not sent), as z3's `Model.eval`."""
        return z3.RealVal(self.values.get(str(x), Fraction(0)))


def model_values(model, variables) -> dict:
    """{variable name: Fraction} of a z3 model (algebraic values approximated)."""
    return {str(x): rational(model.eval(x, model_completion=True))
            for free in variables.groups.values() for x in free}
