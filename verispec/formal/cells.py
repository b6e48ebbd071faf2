"""Deciding one output's query cell by cell, with the identity checked in exact algebra.

The law of an output s is a nested If(decision, ., .) term. Fix every forked decision the term
still contains (depth first, the most frequent decision first, pruning combinations that z3 finds
infeasible): in each feasible *cell* the law is an If-free rational function R of the
probabilities. z3 struggles with such a term (divisions, high degree), but whether R equals the
target's law as a rational function is plain algebra: both are put over a common denominator in
exact rational arithmetic (sympy's sparse rational-function field) and compared.

Why that settles the cell: on a branch, every divisor was shown nonzero under the branch's path
condition (`Replay.check_divisor`), so R is the law at every point of the cell where no divisor of
R vanishes. When R is identically the target's law, the points left are those where some divisor
vanishes (a branch of weight 0 there): one z3 query, cell and "some divisor = 0" and law != target,
covers them (the term's divisions by 0 are z3's unconstrained values, but each is multiplied by a
zero weight, so the term is still the law). When R differs, z3 is asked for a point of the cell
where law != target. Any "unknown" makes the output undecided here (the caller falls back).
"""

from __future__ import annotations

import collections
import time

import z3

__all__ = ["decide_by_cells"]

#: Seconds for one feasibility check of a partial cell ("unknown" counts as feasible).
FEASIBILITY_SECONDS = 2.0


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


def _forked(root, output, region):
    """{condition id: (count, condition)} of the forked decisions the law of `output` still
    contains under `region`."""
    counts, stack = collections.OrderedDict(), [root]
    while stack:
        node = stack.pop()
        if output not in node.emitted:
            continue
        if node.kind == "decide":
            fixed = region.get(node.payload.get_id())
            if fixed is not None:
                child = node.children.get(0 if fixed else 1)
                stack += [child] if child is not None else []
                continue
            if len(node.children) == 2:
                count, _ = counts.get(node.payload.get_id(), (0, None))
                counts[node.payload.get_id()] = (count + 1, node.payload)
        stack += node.children.values()
    return counts


def _check(constraints, seconds):
    solver = z3.Solver()
    solver.set("timeout", max(1, int(1000 * seconds)))
    solver.add(*constraints)
    result = solver.check()
    return str(result), (solver.model() if result == z3.sat else None)


class _Search:
    def __init__(self, tree, law_of, target_term, output, base, deadline, algebra):
        self.tree, self.law_of, self.target_term = tree, law_of, target_term
        self.output, self.base, self.deadline, self.algebra = output, base, deadline, algebra
        self.calls = 0
        self.cells = 0
        self.target_value = algebra(target_term)

    def run(self, region, literals):
        """("unsat" | "sat" | "unknown", model, reason) for the cells below `region`."""
        forked = _forked(self.tree.root, self.output, region)
        if not forked:
            return self.cell(region, literals)
        key, (_, condition) = max(forked.items(), key=lambda kv: kv[1][0])
        for value in (True, False):
            left = self.deadline - time.monotonic()
            if left <= 0:
                return "unknown", None, "timeout"
            literal = condition if value else z3.Not(condition)
            self.calls += 1
            feasible, _ = _check(self.base + literals + [literal], min(left, FEASIBILITY_SECONDS))
            if feasible == "unsat":
                continue
            result = self.run({**region, key: value}, literals + [literal])
            if result[0] != "unsat":
                return result
        return "unsat", None, ""

    def cell(self, region, literals):
        self.cells += 1
        law = self.law_of(region)
        try:
            identical = self.algebra(law) == self.target_value
        except (ValueError, ZeroDivisionError) as err:
            return "unknown", None, f"algebra: {err}"
        query = self.base + literals + [law != self.target_term]
        if identical:
            divisors = _divisors(law)
            if not divisors:
                return "unsat", None, ""
            query.append(z3.Or([d == 0 for d in divisors]))
        left = self.deadline - time.monotonic()
        if left <= 0:
            return "unknown", None, "timeout"
        self.calls += 1
        result, model = _check(query, left)
        return result, model, "timeout" if result == "unknown" else ""


def decide_by_cells(tree, law_of, target_term, output, base, deadline, variables):
    """Is there a pair with law(output) != target law(output)? Decided cell by cell.

    law_of(region) -> the z3 term of law(output) with the decisions in `region` fixed.
    Returns (result, model, solver calls, reason, cells).
    """
    try:
        search = _Search(tree, law_of, target_term, output, list(base), deadline, Algebra(variables))
    except (ValueError, ZeroDivisionError) as err:  # e.g. an If inside the target's term
        return "unknown", None, 0, f"algebra: {err}", 0
    result, model, reason = search.run({}, [])
    return result, model, search.calls, reason, search.cells
