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

__all__ = ["Algebra", "decide_cell"]

class Algebra:
    """z3 terms -> elements of the rational-function field over the model variables (memoised)."""

    def __init__(self, variables):
        from sympy import QQ
        from sympy.polys.fields import field

        names = [str(x) for free in variables.groups.values() for x in free]
        self.field, *gens = field(",".join(f"x{i}" for i in range(len(names))) or "x0", QQ)
        self.QQ = QQ
        self.by_name = dict(zip(names, gens))
        self.memo: dict = {}
        self.kept: list = []  # keeps memoised ASTs alive (their ids stay theirs)

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


def decide_cell(law, target_term, literals, base, deadline, algebra):
    """Is there a point of the cell (`base` and `literals`) where the If-free `law` differs from
    `target_term`? Returns (result, model, solver calls, reason)."""
    try:
        identical = algebra(law) == algebra(target_term)
    except (ValueError, ZeroDivisionError) as err:
        return "unknown", None, 0, f"algebra: {err}"
    query = list(base) + list(literals) + [law != target_term]
    if identical:
        divisors = _divisors(law)
        if not divisors:
            return "unsat", None, 0, ""
        query.append(z3.Or([d == 0 for d in divisors]))  # the points where R is not the law
    left = deadline - time.monotonic()
    if left <= 0:
        return "unknown", None, 0, "timeout"
    result, model = _check(query, left)
    return result, model, 1, "timeout" if result == "unknown" else ""
