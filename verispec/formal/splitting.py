"""Deciding one output's query by splitting it on comparisons into cells.

The law of an output s, read off the merged branch tree, is a nested If(decision, ., .) term. z3
is first asked the whole query (law(s) != target(s) on the simplices) for `SPLIT_AFTER` seconds.
When it does not answer, the query is split on the shallowest comparison not fixed yet, depth
first. A side is entered only when the comparisons fixed so far are jointly feasible (an
incremental solver that holds them, asked without the law: cheap, and "unknown" counts as
feasible); infeasible regions are dropped whole. Once every comparison is fixed (a *cell*), the
If-free law is decided in exact algebra (`verispec.formal.cells.decide_cell`).

Why the whole query is not retried below the root: on the methods whose query z3 does not answer
at once, the retries time out on almost every region, while a feasibility check of the region
alone (no law term) is cheap.
"""

from __future__ import annotations

import time

import z3

from ._internal.laws import law_term, zero_if_none
from .cells import decide_cell
from .symbolic import negate

__all__ = ["SPLIT_AFTER", "FEASIBILITY_S", "CellSplitter", "check", "split_condition"]

#: Seconds z3 gets for the whole query of an output before it is split on comparisons.
SPLIT_AFTER = 0.05

#: Seconds a feasibility check of a region may take ("unknown" then counts as feasible).
FEASIBILITY_S = 0.5

#: Recent solver models kept to answer feasibility checks without z3.
WITNESSES = 4


class CellSplitter:
    """The query of one output: law(output) != ref for some pair? (`run`), split into cells.

    tree: the merged branch tree (`verispec.formal.replay.Tree`); ref: the target's law of `output`
    (a z3 term); base: the simplex constraints; algebra: a `verispec.formal.cells.Algebra` or None
    (z3 alone); rival: None, or a callable (constraints, seconds) -> `verispec.formal.portfolio.Rival`
    started on the whole query when z3 does not answer it at once (the solver portfolio). `solver`
    names the solver whose answer `run` returned.
    """

    def __init__(self, tree, ref, output, base, deadline, algebra, rival=None):
        self.tree, self.ref, self.output = tree, ref, output
        # one conjunction: asserting it costs one call per fresh solver instead of one per constraint
        self.base, self.deadline, self.algebra = [z3.And(base)] if base else [], deadline, algebra
        self.calls = 0
        self.rival, self.racing, self.solver = rival, None, "z3"
        self.witnesses = []  # recent models of base + some conditions (`_feasible`)

    def left(self) -> float:
        """Seconds to the deadline."""
        return self.deadline - time.monotonic()

    def run(self):
        """(result, model, solver calls, reason): result "unsat" (equal for every pair), "sat"
        (model: a pair where they differ) or "unknown"."""
        law = zero_if_none(law_term(self.tree.root, self.output, {}, {}))
        condition = split_condition(self.tree.root, self.output, {})
        if condition is not None or self.algebra is None:
            seconds = self.left() if condition is None else min(self.left(), SPLIT_AFTER)
            result, model, reason = check(self.base + [law != self.ref], seconds)
            self.calls += 1
            if result != "unknown" or condition is None:
                return result, model, self.calls, reason or ("timeout" if result == "unknown" else "")
        # A rival races only a query that z3 did not answer at once and that splits on comparisons.
        result, model, reason = self._race(law) if condition is not None else self._split({}, [])
        return result, model, self.calls, reason

    def _race(self, law):
        """Split the query (z3, this process) while a rival solver decides it whole, when one is
        given; the first definitive answer wins and the other is stopped."""
        if self.rival is None:
            return self._split({}, [])
        self.racing = self.rival(self.base + [law != self.ref], self.left())
        try:
            result, model, reason = self._split({}, [])
        except z3.Z3Exception:
            # The rival's win interrupts whatever z3 call runs then (a model's eval, a simplify),
            # not only a check: that call raises "canceled"; the rival's answer stands.
            if not self.racing.answered:
                raise
            result, model, reason = "unknown", None, "canceled: the rival solver answered first"
        finally:
            self.racing.stop()
        if result in ("sat", "unsat") and not self.racing.answered:
            return result, model, reason
        if self.racing.answered:
            self.solver = "cvc5"
            return self.racing.answer
        return result, model, reason

    def _split(self, region, conditions):
        if self.left() <= 0:
            return "unknown", None, "timeout"
        if self.racing is not None and self.racing.answered:
            return "unknown", None, "canceled: the rival solver answered first"
        condition = split_condition(self.tree.root, self.output, region)
        if condition is None:
            return self._cell(region, conditions)
        for value in (True, False):
            literal = condition if value else negate(condition)
            if not self._feasible(conditions + [literal]):
                continue
            result, model, reason = self._split({**region, condition.get_id(): value}, conditions + [literal])
            if result != "unsat":
                return result, model, reason
        return "unsat", None, ""

    def _feasible(self, conditions) -> bool:
        """Can the fixed comparisons hold together? (z3 "unknown" counts as feasible.) A point
        found by an earlier check answers without z3 when it satisfies them all; the answers are
        shared by the queries of all outputs (`Tree.regions`: the outputs split on the same
        comparisons, so most regions recur)."""
        key = frozenset(c.get_id() for c in conditions)
        known = self.tree.regions.get(key)
        if known is not None:
            return known[0]
        answer = self._check_region(conditions)
        self.tree.regions[key] = (answer, conditions)  # the conditions keep their AST ids alive
        return answer

    def _check_region(self, conditions) -> bool:
        for witness in reversed(self.witnesses):
            if all(z3.is_true(witness.eval(c, model_completion=True)) for c in conditions):
                return True
        self.calls += 1
        result, model, _ = check(self.base + conditions, min(self.left(), FEASIBILITY_S))
        if model is not None:
            self.witnesses = self.witnesses[-WITNESSES + 1:] + [model]
        return result != "unsat"

    def _cell(self, region, conditions):
        law = zero_if_none(law_term(self.tree.root, self.output, {}, region))
        if self.algebra is not None:
            result, model, calls, reason = decide_cell(law, self.ref, conditions, self.base, self.deadline,
                                                       self.algebra, feasible=self._feasible)
            self.calls += calls
            if not reason.startswith("algebra"):
                return result, model, reason
        result, model, reason = check(self.base + conditions + [law != self.ref], self.left())
        self.calls += 1
        return result, model, reason or ("timeout" if result == "unknown" else "")


def check(constraints, seconds):
    """(result, model, reason) of a fresh z3 solver on `constraints` within `seconds`."""
    solver = z3.Solver()
    solver.set("timeout", max(1, int(1000 * seconds)))
    solver.add(*constraints)
    result = solver.check()
    model = solver.model() if result == z3.sat else None
    return str(result), model, solver.reason_unknown() if result == z3.unknown else ""


def split_condition(root, output, region):
    """The shallowest forked decision (breadth first) that `region` does not fix yet, or None."""
    queue, head = [root], 0
    while head < len(queue):
        node = queue[head]
        head += 1
        if output not in node.emitted:
            continue
        if node.kind == "decide":
            fixed = region.get(node.payload.get_id())
            if fixed is not None:
                child = node.children.get(0 if fixed else 1)
                queue += [child] if child is not None else []
                continue
            if len(node.children) == 2:
                return node.payload
        queue += node.children.values()
    return None
