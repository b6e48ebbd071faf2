"""The symbolic problem of one proof: models on the closed simplex, the programs, their exploration,
and the query of one output (shared by `verispec.formal.prove` and its helper process)."""

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
from ..splitting import CellSplitter
from ..symbolic import Sym
from .laws import law_term, zero_if_none

__all__ = ["Variables", "SymbolicModel", "explore", "method_program", "target_program", "decide_output",
           "check_args", "check_temperature", "wrap", "symbolic_models", "explore_job"]


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
        last = Sym(1 - z3.Sum(free)) if free else Fraction(1)
        return np.array([Sym(x) for x in free] + [last], dtype=object)  # [V]

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


def decide_output(tree, reference, output, variables, deadline):
    """Is there a pair with law(output) != target law(output)? A `CellSplitter` (split on
    comparisons, cells decided in exact algebra). Returns (result, model, solver calls, reason)."""
    ref = zero_if_none(law_term(reference.root, output, {}, {}))
    if tree.algebra is None:
        try:
            tree.algebra = Algebra(variables)  # memoised conversions, shared by the outputs
        except ImportError:  # sympy missing: z3 alone
            tree.algebra = False
    return CellSplitter(tree, ref, output, variables.constraints, deadline, tree.algebra or None).run()


def check_args(method, vocab_size, draft_length, num_paths, timeout):
    """(method, V, L, K, depth) from `prove`'s arguments; ValueError/TypeError naming a bad one."""
    V = check_positive_int(vocab_size, "vocab_size", minimum=2)
    L = check_positive_int(draft_length, "draft_length")
    K = check_positive_int(num_paths, "num_paths")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout: expected a positive number of seconds, got {timeout!r}")
    method = resolve(method, "method", draft_length=L, num_paths=K)
    for name, value in (("draft_length", L), ("num_paths", K)):
        declared = method.params.get(name)
        if declared is not None and declared != value:
            raise ValueError(f"{name}: {value} differs from the method's own {name}={declared}")
    depth = method.draft_length if method.draft_length is not None else L
    return method, V, L, K, int(depth)


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
    """Explore the method and the target as `prove` does (what a helper process runs first).
    Returns (tree, reference tree, variables, the outputs in query order)."""
    method, V, L, K, depth = check_args(job["spec"], job["V"], job["L"], job["K"], 1.0)
    variables, _, (target, draft) = symbolic_models(V, job["temperatures"])
    N = depth + 1
    tree = explore(method_program(method, target, draft, N, job["context"]), variables, deadline)
    reference = explore(target_program(target, N, job["context"]), variables, deadline)
    return tree, reference, variables, list(itertools.product(range(V), repeat=N))
