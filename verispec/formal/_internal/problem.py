"""The symbolic problem of one proof: models on the closed simplex, the programs, their exploration,
and the query of one output (shared by `verispec.formal.prove` and its workers)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import z3

from ...reference import models
from ...reference.methods import resolve
from ...reference.models import LanguageModel, check_positive_int
from ..cells import Algebra
from ..replay import Explorer
from ..portfolio import Rival
from ..splitting import CellSplitter
from ..symbolic import Sym
from .laws import law_term, zero_if_none
from .source import method_source

__all__ = ["Variables", "SymbolicModel", "explore", "method_program", "target_program", "decide_output", "query_constraints",
           "check_args", "declared_sizes", "check_temperature", "wrap", "symbolic_models", "explore_job"]


class Variables:
    """The simplex constraints of every symbolic distribution created so far."""

    def __init__(self):
        self.constraints: list = []
        self.groups: dict = {}  # (model name, prefix) -> [free z3 variables]
        self.extra: list = []  # reals a rule's hook defines by constraints (SpecTr's rho)
        self.explorer: Explorer | None = None

    def add(self, key, free):
        """Record the free variables [V - 1] of the conditional `key` and their simplex constraints
        (into the running exploration when one is under way)."""
        self.groups[key] = free
        new = [x >= 0 for x in free] + [z3.Sum(free) <= 1] if free else []
        if self.explorer is not None:
            self.explorer.add_base(new)
        else:
            self.constraints.extend(new)


class SymbolicModel(LanguageModel):
    """A language model whose every conditional is a symbolic point of the closed simplex.

    p(. | u) = (x_0, ..., x_{V-2}, 1 - sum x) with x_i >= 0 and sum x <= 1: the last coordinate is
    eliminated, so the solver sees V - 1 variables per conditional. Conditionals are created when
    first read and cached, so every replay sees the same `Sym` objects.
    """

    exact = True

    def __init__(self, name: str, vocab_size: int, variables: Variables):
        super().__init__(vocab_size)
        self.name = name
        self.variables = variables

    def _compute(self, prefix):
        V = self.vocab_size
        free = [z3.Real(f"{self.name}{list(prefix)}[{i}]") for i in range(V - 1)]
        self.variables.add((self.name, prefix), free)
        # each entry remembers which (model, prefix, token) it is (`verispec.formal.watch` reads it)
        last = Sym(1 - z3.Sum(free), frozenset([(self.name, prefix, V - 1)])) if free else Fraction(1)
        entries = [Sym(x, frozenset([(self.name, prefix, i)])) for i, x in enumerate(free)]
        return np.array(entries + [last], dtype=object)  # [V]

    def __repr__(self):
        return f"SymbolicModel({self.name!r}, vocab_size={self.vocab_size})"


def explore(program, variables, deadline):
    """The merged branch tree (`Tree`) of `program` on the symbolic models of `variables`;
    ExplorationTimeout past `deadline` (time.monotonic())."""
    explorer = Explorer(variables.constraints, deadline)
    explorer.extra = variables.extra  # shared: the algebra of the queries needs them
    variables.explorer = explorer
    try:
        return explorer.run(program)
    finally:
        variables.explorer = None


def method_program(method, target, draft, num_tokens, context=()):
    """One iteration from `context`, then the target until `num_tokens` are out."""

    def run(rand):
        out = method.step(target, draft, context, rand)
        while len(out) < num_tokens:
            out += (rand.categorical(target.probs(context + out)),)
        return out[:num_tokens]

    return run


def target_program(target, num_tokens, context=()):
    """`num_tokens` tokens from `context`, each drawn from the target (the reference law)."""

    def run(rand):
        out = ()
        while len(out) < num_tokens:
            out += (rand.categorical(target.probs(context + out)),)
        return out

    return run


def decide_output(tree, reference, output, variables, deadline, solvers=("z3",)):
    """Is there a pair with law(output) != target law(output)? A `CellSplitter` (split on
    comparisons, cells decided in exact algebra), raced by cvc5 when `solvers` holds it
    (`verispec.formal.portfolio`). Returns (result, model, solver calls, reason, the solver that
    answered)."""
    ref = zero_if_none(law_term(reference.root, output, {}, {}))
    if tree.algebra is None:
        try:
            tree.algebra = Algebra(variables)  # memoised conversions, shared by the outputs
        except ImportError:  # sympy missing: z3 alone
            tree.algebra = False
    rival = Rival if "cvc5" in solvers else None
    splitter = CellSplitter(tree, ref, output, variables.constraints, deadline, tree.algebra or None, rival)
    return (*splitter.run(), splitter.solver)


def declared_sizes(method) -> tuple:
    """(L, K) a Method declares: L its draft depth (`Method.draft_length`), K the ``num_paths`` of
    its params or else of its drafter's params; None for what it does not declare."""
    K = method.params.get("num_paths")
    drafter_params = getattr(method.draft, "params", None)
    if K is None and isinstance(drafter_params, dict):
        K = drafter_params.get("num_paths")
    return method.draft_length, K


def query_constraints(tree, reference, output, variables) -> list:
    """The whole query of one output as z3 constraints: the simplices and law(output) != target
    law(output) (what z3 is asked first and what a rival solver races on)."""
    law = zero_if_none(law_term(tree.root, output, {}, {}))
    ref = zero_if_none(law_term(reference.root, output, {}, {}))
    return [*variables.constraints, law != ref]


def check_args(method, vocab_size, draft_length, num_paths, timeout):
    """(method, V, L, K, source) from `prove`'s arguments; ValueError/TypeError naming a bad one.

    L and K are the method's own (`declared_sizes`) where it declares them; draft_length or
    num_paths given (not None) and different from the method's own raise ValueError naming them.
    What the method does not declare comes from the arguments (1 when None); the depth of
    the draft is L, so N = L + 1 tokens are compared. `source` is the
    `MethodSource` of the resolved method (for the reproducing code).
    """
    V = check_positive_int(vocab_size, "vocab_size", minimum=2)
    given = {"draft_length": draft_length, "num_paths": num_paths}
    given = {name: None if value is None else check_positive_int(value, name) for name, value in given.items()}
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout: expected a positive number of seconds, got {timeout!r}")
    params = {name: 1 if value is None else value for name, value in given.items()}
    resolved = resolve(method, "method", **params)
    own = dict(zip(given, declared_sizes(resolved)))
    for name, value in given.items():
        if value is not None and own[name] is not None and own[name] != value:
            raise ValueError(f"{name}: {value} differs from the method's own {name}={own[name]} "
                             f"({method if isinstance(method, str) else resolved!r}); leave it out or give "
                             f"{own[name]}")
    L, K = (int(own[name]) if own[name] is not None else params[name] for name in given)
    return resolved, V, L, K, method_source(method, resolved, params)


def check_temperature(value, name):
    """`value` when it is 1 or 0 (the temperatures `prove` covers); ValueError naming `name` otherwise."""
    if value not in (0, 1):
        raise ValueError(f"{name}: prove supports temperature 1 (any distribution) or 0 (the greedy "
                         f"point mass of a symbolic base), got {value!r}")
    return value


def wrap(model, temperature):
    """`model` at `temperature` (itself at 1)."""
    return model if temperature == 1 else models.temperature(model, temperature)


def symbolic_models(V, temperatures):
    """(variables, (base target, base draft), (target, draft)) on the closed simplices."""
    variables = Variables()
    bases = SymbolicModel("p", V, variables), SymbolicModel("q", V, variables)
    return variables, bases, tuple(wrap(m, t) for m, t in zip(bases, temperatures))


def explore_job(job, deadline):
    """Explore the method and the target as `prove` does (what a worker runs first).
    Returns (tree, reference tree, variables, the outputs in query order)."""
    method, V, L, _, _ = check_args(job["spec"], job["V"], job["L"], job["K"], 1.0)
    variables, _, (target, draft) = symbolic_models(V, job["temperatures"])
    N = L + 1
    tree = explore(method_program(method, target, draft, N, job["context"]), variables, deadline)
    reference = explore(target_program(target, N, job["context"]), variables, deadline)
    return tree, reference, variables, list(itertools.product(range(V), repeat=N))
