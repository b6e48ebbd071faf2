"""Deciding a query in a cell (every comparison fixed) with the identity checked in exact algebra.

The law of an output s is a nested If(decision, ., .) term; `verispec.formal.prove` splits its
query on comparisons. Once every forked comparison is fixed (a *cell*), the law is an If-free
rational function R of the probabilities. z3 can struggle with such a term (divisions, high
degree), but whether R equals the target's law as a rational function is plain algebra: both are
put over a common denominator in exact rational arithmetic (sympy's sparse rational-function field)
and compared.

Why that settles the cell: on a branch, every divisor was shown nonzero under the branch's path
condition (`Replay.check_divisor`), so R is the law at every point of the cell where no divisor of
R vanishes. When R is identically the target's law, the points left are those where some divisor
vanishes (a branch of weight 0 there): one z3 query, cell and "some divisor = 0" and law != target,
covers them (the term's divisions by 0 are z3's unconstrained values, but each is multiplied by a
zero weight, so the term is still the law). When R differs, z3 is asked for a point of the cell
where law != target (a tie or a boundary can still make them equal there).
"""

from __future__ import annotations

import time

import z3
from sympy import QQ
from sympy.polys.fields import field

__all__ = ["Algebra", "decide_cell"]

class Algebra:
    """z3 terms -> elements of the rational-function field over the model variables (memoised)."""

    def __init__(self, variables):
        xs = [x for free in variables.groups.values() for x in free] + list(getattr(variables, "extra", ()))
        names = [str(x) for x in xs]
        self.field, *gens = field(",".join(f"x{i}" for i in range(len(names))) or "x0", QQ)
        self.QQ = QQ
        self.by_name = dict(zip(names, gens))
        self.xs = xs  # the z3 variables, in the order of the field's generators
        self.memo: dict = {}
        self.kept: list = []  # keeps memoised ASTs alive (their ids stay theirs)
        self.factor_memo: dict = {}
        self.divisor_memo: dict = {}

    def __call__(self, term):
        key = term.get_id()
        if key in self.memo:
            return self.memo[key]
        if z3.is_rational_value(term):
            value = self.field(self.QQ(term.numerator_as_long(), term.denominator_as_long()))
        elif z3.is_const(term):
            value = self.by_name[str(term)]
        else:
            value = self._apply(term.decl().kind(), [self(a) for a in term.children()], term)
        self.memo[key] = value
        self.kept.append(term)
        return value

    def factors(self, value) -> list:
        """The distinct non-constant irreducible factors of the numerator of `value`, as z3 terms
        (memoised: neighbouring cells often differ by the same polynomial)."""
        key = frozenset(value.numer.items())
        hit = self.factor_memo.get(key)
        if hit is None:
            _, factors = value.numer.factor_list()
            hit = self.factor_memo[key] = [self.to_z3(f) for f, _ in factors if not f.is_ground]
        return hit

    def divisors(self, term) -> list:
        """The distinct non-constant divisors of a term (memoised per subterm: cells share most)."""
        return list(self._divisors(term).values())

    def _divisors(self, term) -> dict:
        key = term.get_id()
        hit = self.divisor_memo.get(key)
        if hit is None:
            children = term.children()
            hit = {}
            for child in children:
                hit.update(self._divisors(child))
            if z3.is_div(term) and not z3.is_rational_value(children[1]):
                hit[children[1].get_id()] = children[1]
            self.divisor_memo[key] = hit
            self.kept.append(term)
        return hit

    def to_z3(self, poly):
        """A polynomial of the field's ring as a z3 term over the model variables."""
        terms = []
        for exponents, coefficient in poly.terms():
            monomial = [self.xs[i] ** e if e > 1 else self.xs[i] for i, e in enumerate(exponents) if e]
            c = z3.RealVal(f"{coefficient.numerator}/{coefficient.denominator}")
            terms.append(c * z3.Product(monomial) if len(monomial) > 1 else c * monomial[0] if monomial else c)
        return z3.Sum(terms) if len(terms) > 1 else terms[0] if terms else z3.RealVal(0)

    def _apply(self, kind, args, term):
        if kind == z3.Z3_OP_ADD:
            return sum(args[1:], args[0])
        if kind == z3.Z3_OP_MUL:
            out = args[0]
            for a in args[1:]:
                out = out * a
            return out
        if kind == z3.Z3_OP_SUB:
            return args[0] - sum(args[1:], self.field(0))
        if kind == z3.Z3_OP_UMINUS:
            return -args[0]
        if kind == z3.Z3_OP_DIV:
            return args[0] / args[1]
        if kind == z3.Z3_OP_POWER and z3.is_rational_value(term.children()[1]):
            exponent = term.children()[1].as_fraction()
            if exponent.denominator == 1:
                return args[0] ** int(exponent)
        raise ValueError(f"not a rational function: {term.decl()}")


def _divisors(term) -> list:
    """The distinct non-constant divisors of a term (its DAG walked once)."""
    seen, out, stack = set(), {}, [term]
    while stack:
        node = stack.pop()
        if node.get_id() in seen:
            continue
        seen.add(node.get_id())
        children = node.children()
        if z3.is_div(node) and not z3.is_rational_value(children[1]):
            out[children[1].get_id()] = children[1]
        stack += children
    return list(out.values())


def _check(constraints, seconds):
    solver = z3.Solver()
    solver.set("timeout", max(1, int(1000 * seconds)))
    solver.add(*constraints)
    result = solver.check()
    return str(result), (solver.model() if result == z3.sat else None)


def decide_cell(law, target_term, literals, base, deadline, algebra, feasible=None):
    """Is there a point of the cell (`base` and `literals`) where the If-free `law` differs from
    `target_term`? Returns (result, model, solver calls, reason).

    feasible: optionally a function (extra literals) -> False when `base`, `literals` and the
    extra ones cannot hold together. With it, two cheap questions come first (polynomials and the
    comparisons only, not the law): when R is not the target's law, does some irreducible factor
    of the numerator of R - target vanish on the whole cell (a cell on a tie such as p = q, where
    R agrees with the target although it differs elsewhere)? And can a divisor vanish in the
    cell at all (if not, R is the law on the whole cell)?
    """
    try:
        difference = algebra(law) - algebra(target_term)
        identical = difference == 0 or (feasible is not None and _vanishes_on_cell(
            difference, literals, algebra, feasible))
    except (ValueError, ZeroDivisionError) as err:
        return "unknown", None, 0, f"algebra: {err}"
    query = list(base) + list(literals) + [law != target_term]
    if identical:
        divisors = algebra.divisors(law)
        if not divisors:
            return "unsat", None, 0, ""
        vanish = z3.Or([d == 0 for d in divisors])
        if feasible is not None and not feasible(list(literals) + [vanish]):
            return "unsat", None, 0, ""
        query.append(vanish)  # the points where R is not the law
    left = deadline - time.monotonic()
    if left <= 0:
        return "unknown", None, 0, "timeout"
    result, model = _check(query, left)
    return result, model, 1, "timeout" if result == "unknown" else ""


def _vanishes_on_cell(difference, literals, algebra, feasible) -> bool:
    """True when a factor g of the numerator of `difference` is 0 everywhere on the cell
    (literals and g != 0 infeasible): then R = target wherever R is the law."""
    return any(not feasible(list(literals) + [g != 0]) for g in algebra.factors(difference))
