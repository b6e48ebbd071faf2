"""Counterexamples: rationalise the solver's pair and confirm it with the exact engine."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ...reference import exact, models
from ...reference.contract import RuleContractError
from ...reference.methods import Method
from ...reference.randomness import enumerate_law
from .problem import method_program, wrap
from .source import method_source
from .values import rational

__all__ = ["Counterexample", "PairCheck", "FLOAT_CONFIRM_TV", "rational", "solver_point", "solver_tables",
           "table_model", "format_table", "format_fraction", "zero_division", "repro_code", "confirm_counterexample"]

#: TV a float64 law (a rule computing in float64 for numbers) must exceed to confirm a counterexample.
FLOAT_CONFIRM_TV = 1e-9


@dataclass
class Counterexample:
    """A target/draft pair on which the method's law differs, confirmed in exact arithmetic.

    Attributes:
        output: the N-token sequence whose probability differs.
        target, draft: {prefix: [V Fractions]} conditionals (prefixes not listed: uniform).
        method_probability, target_probability: the two probabilities of `output` (Fractions, by the
            exact engine: one iteration followed by the target).
        tv_iteration: TV between the two laws of N tokens (one iteration, then the target).
        tv_loop: TV between the whole loop's law of N tokens and the target's.
        confirmed: True when the exact engine finds the laws different (tv_iteration > 0; for a
            rule whose law is float64, `arithmetic` "float64", tv_iteration > FLOAT_CONFIRM_TV).
        code: Python that reproduces the failure with `assert_lossless`.
        found_by: "smt" (a satisfiable query) or "point search" (a structured pair tried before
            the symbolic run, `verispec.formal.points`).
    """

    output: tuple
    target: dict
    draft: dict
    method_probability: Fraction
    target_probability: Fraction
    tv_iteration: Fraction
    tv_loop: Fraction
    confirmed: bool
    code: str
    found_by: str = "smt"
    arithmetic: str = "exact"  # "float64" when the rule computes in float64 for numbers (spectr's rho)


@dataclass(frozen=True)
class PairCheck:
    """What running a solver's pair through the exact engine needs: the method, the symbolic
    `variables` and `bases` of the explored models, the (target, draft) temperatures, the N tokens
    compared, the context the iteration starts from, and the method's `MethodSource` for the
    reproducing code (None: named from `method`)."""
    method: Method
    variables: object
    bases: tuple
    temperatures: tuple
    num_tokens: int
    context: tuple = ()
    source: object = None


def solver_point(model, free) -> list:
    """The conditional [V] of a solver model: free coordinates clamped at 0, the last one = 1 - sum."""
    xs = [max(Fraction(0), rational(model.eval(x, model_completion=True))) for x in free]
    total = sum(xs)
    if total > 1:
        xs = [x / total for x in xs]
    return xs + [1 - sum(xs)]


def solver_tables(model, variables):
    """({prefix: [V]} target, {prefix: [V]} draft) conditionals of a solver model."""
    tables = {"p": {}, "q": {}}
    for (name, prefix), free in sorted(variables.groups.items(), key=lambda kv: (kv[0][0], len(kv[0][1]), kv[0][1])):
        tables[name][prefix] = solver_point(model, free)
    return tables["p"], tables["q"]


def table_model(conditionals, V):
    """A table model of {prefix: [V] Fractions} (uniform at prefixes not listed)."""
    uniform = [Fraction(1, V)] * V
    return models.table(dict(conditionals), default=uniform, vocab_size=V)


def format_table(conditionals, V):
    """Python source of `table_model(conditionals, V)` for the reproducing code."""
    rows = ", ".join(f"{prefix!r}: [{', '.join(format_fraction(x) for x in probs)}]"
                     for prefix, probs in conditionals.items())
    uniform = ", ".join([format_fraction(Fraction(1, V))] * V)
    return f"models.table({{{rows}}}, default=[{uniform}], vocab_size={V})"


def format_fraction(x: Fraction) -> str:
    """Python source of a Fraction."""
    # Always a Fraction: a row of plain ints ([1, 0]) would be read as float64 by models.table.
    return f"Fraction({x.numerator})" if x.denominator == 1 else f"Fraction({x.numerator}, {x.denominator})"


def zero_division(err, check: PairCheck) -> str:
    """A division by a symbolic value that can be 0 on a branch of positive probability.

    The solver's pair (rationalised) is run through the exact engine: when the rule raises there,
    that is a rule contract error (as `verispec check` reports it), raised with the pair as code
    (the method named by ``check.source``, default: from ``check.method``).
    Otherwise (no pair, or an irrational one) returns the reason of an "unknown" verdict.
    """
    where = f"on the branch with choices {list(err.trace)}"
    if err.witness is None:
        return f"possible {err} {where} (z3 could not decide whether the divisor is 0 there)"
    method, temperatures, N, context = check.method, check.temperatures, check.num_tokens, check.context
    p_table, q_table = solver_tables(err.witness, check.variables)
    V = check.bases[0].vocab_size
    target = wrap(table_model(p_table, V), temperatures[0])
    draft = wrap(table_model(q_table, V), temperatures[1])
    try:
        exact.output_distribution(target, draft, method, context, N)
    except RuleContractError as crash:
        code = repro_code(p_table, q_table, V, temperatures, N, check.source or method, context)
        raise RuleContractError(f"{crash.problem} (prove: {err} {where}; confirmed by the exact engine on "
                                "the pair below)", method=crash.method, prefix=crash.prefix,
                                probability=crash.probability, draws=crash.draws,
                                detail="reproduce:\n" + "\n".join("    " + line for line in code.splitlines())) from crash
    return (f"possible {err} {where}; the solver's pair, rationalised, did not make the exact engine raise "
            "(an irrational pair?)")


def repro_code(p_table, q_table, V, temperatures, N, source, context=()) -> str:
    """Python that reproduces a failure at the pair (p_table, q_table) with `assert_lossless`.

    `source`: the `MethodSource` of the method (its lines build ``method``: a built-in through
    `methods.get`, a user's rule imported from its module), or a Method (then a built-in is rebuilt
    by name, any other Method is named in a comment and must be in a variable ``method``).
    """
    if isinstance(source, Method):
        source = method_source(source, source, {})
    at = f"context={tuple(context)!r}, " if context else ""
    wrap = [f"models.temperature({{}}, {t})" if t != 1 else "{}" for t in temperatures]
    return "\n".join([
        "from fractions import Fraction",
        "from verispec.reference import models",
        "from verispec.testing import assert_lossless",
        *source.lines,
        f"target = {wrap[0].format(format_table(p_table, V))}",
        f"draft = {wrap[1].format(format_table(q_table, V))}",
        f"assert_lossless(method, target=target, draft=draft, {at}num_tokens={N})",
    ])


def confirm_counterexample(model, output, check: PairCheck) -> Counterexample:
    """The solver's pair, rationalised and run through the exact engine (`confirmed` says whether
    the laws differ there on `output`); ``check.source`` names the method in its code (default:
    from ``check.method``)."""
    method, temperatures, N, context = check.method, check.temperatures, check.num_tokens, check.context
    V = check.bases[0].vocab_size
    p_table, q_table = solver_tables(model, check.variables)
    target = wrap(table_model(p_table, V), temperatures[0])
    draft = wrap(table_model(q_table, V), temperatures[1])
    law = enumerate_law(method_program(method, target, draft, N, context)).law
    ref = exact.target_distribution(target, context, N)
    tv_iteration = exact.total_variation(law, ref)
    # A rule that computes in float64 for numbers (SpecTr's rho is a float64 root) has a float law:
    # only a difference far above round-off confirms the solver's pair.
    exact_law = all(isinstance(x, (Fraction, int)) for x in law.values())
    loop = exact.output_distribution(target, draft, method, context, N)
    tv_loop = exact.total_variation(loop, ref)
    code = repro_code(p_table, q_table, V, temperatures, N, check.source or method, context)
    return Counterexample(output=output, target=p_table, draft=q_table,
                          method_probability=Fraction(law.get(output, 0)),
                          target_probability=Fraction(ref.get(output, 0)),
                          tv_iteration=Fraction(tv_iteration), tv_loop=Fraction(tv_loop),
                          confirmed=tv_iteration != 0 if exact_law else tv_iteration > FLOAT_CONFIRM_TV, code=code,
                          arithmetic="exact" if exact_law else "float64")
