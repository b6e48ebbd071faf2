"""Symbolic replay: run a rule once per branch of its choice tree, for every target/draft pair at once.

The enumerator of `verispec.reference.randomness` re-runs a program once per leaf of its choice tree.
Here the probabilities are symbolic (`Sym`), so the tree has two kinds of branch points:

- **chance** nodes: ``rand.bernoulli(p)`` / ``rand.categorical(probs)`` branch on every outcome that
  is not a concrete zero, with symbolic weights;
- **decision** nodes: a comparison of symbolic values (``p[x] < q[x]``, ``if total > 0``, sorting).
  The replay asks z3 whether each outcome is feasible under the path condition (the simplex
  constraints, the decisions taken so far, and "weight > 0" for every chance outcome taken so far)
  and forks only when both are. An outcome that is infeasible is never explored; a path whose
  condition turns out infeasible is dropped (it has probability 0 for every pair).

Replays are deterministic given the choices, so a queued sibling is reached by replaying the recorded
prefix of choices (depth first), exactly as the concrete enumerator does. The result is one merged
branch tree (`Node`), from which `verispec.formal.prove` builds the law of each output sequence.
"""

from __future__ import annotations

import time
from fractions import Fraction

import z3

from ..reference.audit import Primitive, primitive
from ..reference.uniform import LazyUniform
from .symbolic import (Sym, SymbolicError, SymbolicZeroDivision, active_replay, build, negate, real, replaying,
                       simplify, to_z3)


#: Seconds a solver check of "this divisor can be 0" may take (capped by the deadline).
DIVISOR_CHECK_S = 10.0


class DeadPath(BaseException):
    """The path condition is infeasible (a BaseException, so a rule's ``except Exception`` cannot
    swallow it)."""


class Node:
    """A node of the merged branch tree.

    kind: None (not reached yet), "decide" (payload: the z3 condition; child 0 = true, 1 = false),
    "chance" (payload: {outcome: z3 weight}), "leaf" (payload: the emitted tuple) or "dead".
    """

    __slots__ = ("kind", "payload", "children", "forked", "emitted")

    def __init__(self):
        self.kind = None
        self.payload = None
        self.children: dict[int, Node] = {}
        self.forked = False
        self.emitted = None  # frozenset of the tuples emitted below (filled by `Tree.finish`)


class ExplorationTimeout(Exception):
    """The exploration ran past its deadline."""


class Tree:
    """The merged branch tree of a program and its size."""

    def __init__(self):
        self.root = Node()
        self.leaves = 0
        self.dead = 0
        self.runs = 0
        self.solver_checks = 0
        # Shared by the queries of all outputs: {frozenset of literal ids: (feasible, literals)}
        # (`verispec.formal.splitting`) and the rational-function algebra of the law terms.
        self.regions: dict = {}
        self.algebra = None

    def nodes(self):
        """Every node of the tree (depth first)."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            yield node
            stack += node.children.values()

    @property
    def branch_points(self) -> int:
        """Decision nodes where both outcomes were feasible, plus chance nodes."""
        return sum(1 for n in self.nodes() if n.kind == "chance" or (n.kind == "decide" and n.forked))

    @property
    def decisions(self) -> int:
        """Decision nodes (comparisons answered), forked or not."""
        return sum(1 for n in self.nodes() if n.kind == "decide")

    def finish(self) -> None:
        """Fill `Node.emitted` bottom-up (lets the law builder skip subtrees that never emit s)."""
        order = list(self.nodes())
        for node in reversed(order):
            if node.kind == "leaf":
                node.emitted = frozenset([node.payload])
            else:
                node.emitted = frozenset().union(*(c.emitted for c in node.children.values())) \
                    if node.children else frozenset()


class Replay:
    """The `Randomness` of one symbolic run: replays `forced` choices, then branches."""

    def __init__(self, forced, witness, explorer):
        self.forced = forced
        self.trace: list[int] = []
        self.node = explorer.tree.root
        self.explorer = explorer
        self.solver = explorer.solver
        if witness is not None and not all(z3.is_true(witness.eval(c, model_completion=True))
                                           for c in explorer.defined):
            witness = None  # found before a defined variable (SpecTr's rho) existed
        self.witness = witness  # a z3 model of the current path condition, when one is known
        self.memo: dict[int, bool] = {}  # AST id -> answer on this path
        self.kept: list = []
        self.path: list = []  # the path condition; the solver holds path[:synced]
        self.synced = 0

    # -- the path condition -----------------------------------------------------------------
    def _assume(self, condition) -> None:
        # Lazily: a replay of recorded choices asks the solver nothing, so it need not hold them.
        # The witness of a queued branch satisfies the whole recorded path: test it only past it.
        self.path.append(condition)
        if len(self.trace) > len(self.forced) and self.witness is not None \
                and not z3.is_true(self.witness.eval(condition, model_completion=True)):
            self.witness = None

    def _feasible(self, condition):
        """(feasible, model): z3 'unknown' counts as feasible (exploring more is always sound)."""
        explorer = self.explorer
        if explorer.defined:  # see `_fresh_check`
            result, model = self._fresh_check(condition)
            return result != z3.unsat, model
        explorer.tick()
        if self.synced < len(self.path):
            self.solver.add(*self.path[self.synced:])
            self.synced = len(self.path)
        self.solver.push()
        self.solver.add(condition)
        self.solver.set("timeout", explorer.check_timeout_ms())
        result = self.solver.check()
        explorer.tree.solver_checks += 1
        model = self.solver.model() if result == z3.sat else None
        self.solver.pop()
        return result != z3.unsat, model

    def _fresh_check(self, condition):
        """The question to a fresh solver: (result, model). Used once a defined variable exists
        (SpecTr's rho): an incremental solver (push/pop) cannot use z3's nlsat tactic, and with the
        definition's If-terms it times out on checks a fresh solver answers quickly."""
        explorer = self.explorer
        explorer.tick()
        solver = z3.Solver()
        solver.set("timeout", explorer.check_timeout_ms())
        solver.add(*explorer.base, *self.path, condition)
        result = solver.check()
        explorer.tree.solver_checks += 1
        return result, (solver.model() if result == z3.sat else None)

    def _step(self, kind, payload, options):
        """Record one branch point; returns the chosen option (queueing the others when new)."""
        pos = len(self.trace)
        node = self.node
        if node.kind is None:
            node.kind, node.payload = kind, payload
        elif node.kind != kind:
            raise SymbolicError("the rule is not deterministic given its random choices "
                                f"(replay diverged at branch point {pos}: {node.kind} vs {kind})")
        if pos < len(self.forced):
            choice = self.forced[pos]
        else:
            choice = options[0][0]
            for other, witness in reversed(options[1:]):
                self.explorer.pending.append((tuple(self.trace) + (other,), witness))
            if len(options) > 1:
                node.forked = True
        self.trace.append(choice)
        self.node = node.children.setdefault(choice, Node())
        return choice

    # -- decisions --------------------------------------------------------------------------
    def decide(self, condition) -> bool:
        """The outcome of a comparison on this path (forks when both outcomes are feasible)."""
        condition = simplify(condition)
        if z3.is_true(condition):
            return True
        if z3.is_false(condition):
            return False
        key = condition.get_id()
        if key in self.memo:
            return self.memo[key]
        negation = simplify(negate(condition))
        if len(self.trace) < len(self.forced):
            value = self._step("decide", condition, None) == 0
        else:
            options = [(choice, model) for choice, (ok, model) in
                       ((0, self._possible(condition)), (1, self._possible(negation))) if ok]
            if not options:
                raise DeadPath
            value = self._step("decide", condition, options) == 0
            if options[0][1] is not None:
                self.witness = options[0][1]
        self._remember(condition, negation, value)
        return value

    def _possible(self, condition):
        """(feasible, model) under the path condition; the current witness answers without z3."""
        if self.witness is not None and z3.is_true(self.witness.eval(condition, model_completion=True)):
            return True, self.witness
        return self._feasible(condition)

    def _remember(self, condition, negation, value) -> None:
        self._assume(condition if value else negation)
        # The ASTs are kept alive with their answers: z3 reuses the id of a freed AST.
        self.memo[condition.get_id()] = value
        self.memo[negation.get_id()] = not value
        self.kept += [condition, negation]

    def check_divisor(self, divisor) -> None:
        """Raise `SymbolicZeroDivision` when `divisor` can be 0 on this path (where the concrete
        rule would raise); otherwise record divisor != 0 (a decision that never forks)."""
        if z3.is_rational_value(divisor):
            return
        # Already implied by an answered comparison (q == 0 -> False, total > 0 -> True, ...)?
        zero = real(Fraction(0))
        for test, nonzero in (("eq", False), ("le", False), ("gt", True), ("ge", False), ("lt", True)):
            if self.memo.get(simplify(build(test, divisor, zero)).get_id()) is nonzero:
                return
        # An undecided check counts as "can be 0" and ends the proof as unknown, so it gets longer
        # than a branch's check (on a busy machine 0.3 s of wall time can be a few ms of CPU).
        explorer, short = self.explorer, self.explorer.check_timeout_s
        explorer.check_timeout_s = max(short, DIVISOR_CHECK_S)
        try:
            can_be_zero = self.decide(build("eq", divisor, zero))
        finally:
            explorer.check_timeout_s = short
        if can_be_zero:
            raise SymbolicZeroDivision(divisor, self.witness, self.trace)

    # -- chance -----------------------------------------------------------------------------
    def _chance(self, options):
        """options: [(outcome, weight)] with no concrete zero weight; returns the outcome."""
        if len(options) == 1 and not isinstance(options[0][1], Sym):
            return options[0][0]
        weights = {o: to_z3(w) for o, w in options}
        by_outcome = dict(options)
        choice = self._step("chance", weights, [(o, None) for o, _ in options])
        weight = by_outcome[choice]
        if isinstance(weight, Sym):
            self._assume(build("gt", weight.expr, real(Fraction(0))))
        return choice

    @primitive(Primitive.RANDOMNESS)
    def bernoulli(self, p) -> bool:
        """True with (symbolic) probability p."""
        if not isinstance(p, Sym):
            if not 0 <= p <= 1:
                raise ValueError(f"bernoulli: p must lie in [0, 1], got {p}")
            if p == 1 or p == 0:
                return p == 1
        return self._chance([(True, p), (False, 1 - p)])

    @primitive(Primitive.RANDOMNESS)
    def categorical(self, probs) -> int:
        """A token id drawn from `probs` ([V], symbolic or exact)."""
        options = [(i, w) for i, w in enumerate(probs) if isinstance(w, Sym) or w != 0]
        if not options:
            raise ValueError("categorical: probs has no positive entry")
        if not any(isinstance(w, Sym) for _, w in options):
            if any(w < 0 for _, w in options) or sum(w for _, w in options) != 1:
                raise ValueError("categorical: exact probs must be non-negative and sum to 1")
        return self._chance(options)

    def uniform(self):
        """An exact U[0, 1), split lazily at the thresholds it is compared with."""
        return LazyUniform(self)


class Explorer:
    """Runs a program over its whole symbolic choice tree (depth first) into a `Tree`."""

    def __init__(self, base, deadline: float, check_timeout_s: float = 0.3):
        self.base = base  # list of z3 constraints every path satisfies (the simplices)
        self.solver = z3.Solver()
        self.deadline = deadline
        self.check_timeout_s = check_timeout_s
        self.pending: list = []
        self.tree = Tree()
        # Reals a rule's hook defines by constraints (SpecTr's rho, `verispec.formal.rho`): the
        # hook's registry {key: ...} names one symbol per quantity for every replay; `extra` lists
        # them (the exact algebra of `verispec.formal.cells` needs them as generators).
        self.symbols: dict = {}
        self.extra: list = []
        self.defined: list = []  # their constraints (a witness found before them may violate them)

    def add_base(self, constraints) -> None:
        """Constraints of a distribution first read in the middle of a run (kept for every later run)."""
        self.base.extend(constraints)
        self.solver.add(*constraints)

    def add_variable(self, variable, constraints) -> None:
        """A real defined by `constraints` that hold for every pair (kept for every later run)."""
        self.extra.append(variable)
        self.defined.extend(constraints)
        self.add_base(constraints)
        replay = active_replay()
        if replay is not None:  # the current witness knew nothing of the new variable
            replay.witness = None

    def tick(self) -> None:
        """ExplorationTimeout past the deadline."""
        if time.monotonic() > self.deadline:
            raise ExplorationTimeout

    def check_timeout_ms(self) -> int:
        """Milliseconds one solver check may take: `check_timeout_s`, capped by the deadline (>= 1)."""
        left = min(self.deadline - time.monotonic(), self.check_timeout_s)
        return max(1, int(1000 * left))

    def run(self, program) -> Tree:
        """Explore every feasible path of `program(rand)` (which returns a hashable outcome)."""
        self.pending = [((), None)]
        while self.pending:
            self.tick()
            forced, witness = self.pending.pop()
            if self.solver.num_scopes():
                self.solver.pop(self.solver.num_scopes())
            self.solver.push()
            self.solver.add(*self.base)
            replay = Replay(forced, witness, self)
            with replaying(replay):
                try:
                    outcome = program(replay)
                    kind = "leaf"
                except DeadPath:
                    outcome, kind = None, "dead"
            node = replay.node
            if len(replay.trace) < len(forced):
                raise SymbolicError("the rule is not deterministic given its random choices "
                                    "(a replay ended before its recorded choices)")
            node.kind, node.payload = kind, outcome
            self.tree.runs += 1
            if kind == "leaf":
                self.tree.leaves += 1
            else:
                self.tree.dead += 1
        self.tree.finish()
        return self.tree


__all__ = ["Replay", "Explorer", "Tree", "Node", "DeadPath", "ExplorationTimeout"]
