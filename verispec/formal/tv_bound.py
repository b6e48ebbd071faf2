"""`prove --tv-bound EXPR`: an upper bound on a lossy method's TV, proved for EVERY pair at V, L.

The method's own code runs on symbolic models (as `verispec.formal.prove` does: every conditional
a point of the closed simplex); one iteration from the context, then the target, gives the law of
N = L + 1 tokens as a z3 term per output s (`law_term`). Its total variation from the target's law,

    TV = sum_s max(law(s) - target(s), 0)        (= 1/2 sum_s |law(s) - target(s)|),

is written with one If per output, and z3 is asked for a pair with TV > EXPR. UNSAT proves
TV <= EXPR for every pair at that size; SAT gives a pair, rationalised and replayed through the exact
engine (Fractions) before it is reported as a counterexample.

EXPR (`verispec.formal.bound_expr`, no eval) reads ``tv_pq`` = TV(p(. | context), q(. | context)) of
the first position, the method's numeric parameters (``ensemble_weight`` alias ``w``, ``epsilon``
alias ``eps``, ``delta``, ``divergence_threshold`` alias ``T``; ``threshold``, its former name, still
reads), ``V``, ``L`` and ``N``. Example: DIVERSE's static ensemble (arXiv 2604.07622) at L = 1 has
TV = (1 - w) TV(p, q) exactly, so ``(1 - w) * tv_pq`` is proved and ``(1 - w) * tv_pq / 2`` refuted.
"""

from __future__ import annotations

import itertools
import sys
import time
from dataclasses import asdict, dataclass
from fractions import Fraction
from numbers import Real

import z3

from ..reference import exact, models
from ..reference.randomness import enumerate_law, law_is_exact
from ._internal.counterexamples import solver_tables, table_model, format_table
from ._internal.laws import law_term, zero_if_none
from ._internal.problem import check_args, explore, method_program, symbolic_models, target_program
from .bound_expr import Bound, parse_bound
from .replay import ExplorationTimeout
from .symbolic import SymbolicError, SymbolicZeroDivision, building, to_z3

__all__ = ["TVBoundResult", "prove_tv_bound", "bound_names", "iteration_tv", "tv_bound_from_args", "ALIASES"]

#: Short names EXPR may use for a method's parameters.
ALIASES = {"w": "ensemble_weight", "eps": "epsilon", "T": "divergence_threshold",
           "threshold": "divergence_threshold"}


@dataclass
class TVBoundResult:
    """The verdict of `prove_tv_bound`: "proved", "counterexample" or "unknown" (see `reason`).

    ``counterexample`` (a confirmed pair) holds the target / draft conditionals {prefix: [V]} as
    "a/b" strings, the exact TV, tv_pq and the bound's value there, and code that reproduces it.
    """

    method: str
    bound: str
    vocab_size: int
    draft_length: int
    num_tokens: int
    verdict: str
    reason: str
    claim: str
    parameters: dict
    seconds: float = 0.0
    counterexample: dict | None = None

    @property
    def proved(self) -> bool:
        """True when the verdict is "proved"."""
        return self.verdict == "proved"

    def to_json(self) -> dict:
        """A JSON-ready dict (Fractions as "a/b" strings)."""
        return {key: (str(value) if isinstance(value, Fraction) else value) for key, value in asdict(self).items()}

    def summary(self) -> str:
        """The verdict, what it claims, and (for a counterexample) the pair and its reproducing code."""
        lines = [f"{self.method}: TV <= {self.bound}: {self.verdict.upper()} at V={self.vocab_size}, "
                 f"L={self.draft_length}, N={self.num_tokens} tokens ({self.seconds:.2f} s)"]
        lines.append(f"  {self.claim}" if self.proved else f"  reason: {self.reason}")
        if self.counterexample is not None:
            cx = self.counterexample
            lines += [f"  exact TV {cx['tv']} = {float(Fraction(cx['tv'])):.6g} > bound {cx['bound']} = "
                      f"{float(Fraction(cx['bound'])):.6g} (tv_pq = {cx['tv_pq']})",
                      "  reproduce:", *("    " + line for line in cx["code"].splitlines())]
        return "\n".join(lines)

    def __str__(self):
        return self.summary()


def bound_names(method, vocab_size: int, draft_length: int) -> dict:
    """{name: Fraction} EXPR may read besides tv_pq: the method's numeric parameters (and their
    `ALIASES`), V, L and N = L + 1."""
    names = {"V": Fraction(vocab_size), "L": Fraction(draft_length), "N": Fraction(draft_length + 1)}
    for key, value in method.params.items():
        if isinstance(value, Real) and not isinstance(value, bool):
            names[key] = Fraction(value)  # the exact value of a float, as the rule reads it on exact input
    names.update({alias: names[key] for alias, key in ALIASES.items() if key in names and alias not in names})
    return names


def prove_tv_bound(method, bound: str, vocab_size: int = 2, draft_length: int | None = None,
                   num_paths: int | None = None, timeout: float = 60.0, context=()) -> TVBoundResult:
    """Prove TV(law of one iteration + target, target's law) <= `bound` for EVERY pair at (V, L).

    Args:
        method: a `Method`, a built-in name or ``"pkg.module:attr"`` (as `verispec.formal.prove`).
        bound: EXPR over tv_pq and `bound_names` (see the module doc).
        vocab_size, draft_length, num_paths, timeout, context: as `verispec.formal.prove`.

    Returns:
        a `TVBoundResult`: "proved" (UNSAT), "counterexample" (a pair confirmed in exact arithmetic)
        or "unknown" (a timeout, z3's unknown, a rule that cannot run symbolically, or a solver
        pair the exact engine did not confirm).

    Raises:
        ValueError / TypeError: bad arguments or a bound outside the grammar (naming them).
    """
    resolved, V, L, _, source = check_args(method, vocab_size, draft_length, num_paths, timeout)
    context = models.check_prefix(context, V, "context")
    names = bound_names(resolved, V, L)
    parsed = parse_bound(bound, set(names) | {"tv_pq"})
    claim = (f"for every target/draft pair at V={V}, L={L}: one iteration {f'from {context} ' if context else ''}"
             f"followed by the target is within TV {parsed.text} of the target's law of the first {L + 1} tokens "
             "(one iteration: the whole loop's TV over more tokens can be larger)")
    result = TVBoundResult(resolved.name, parsed.text, V, L, L + 1, "unknown", "", claim,
                           {k: str(v) for k, v in names.items()})
    start = time.perf_counter()
    with building():
        _decide(result, resolved, parsed, names, (context, source), time.monotonic() + timeout)
    result.seconds = time.perf_counter() - start
    return result


def _decide(result, method, parsed: Bound, names, cx_args, deadline) -> None:
    """Explore, ask z3 for a pair with TV > bound, and confirm a SAT answer exactly.
    `cx_args`: (context, the method's `MethodSource`)."""
    V, N, context = result.vocab_size, result.num_tokens, cx_args[0]
    variables, bases, models_ = symbolic_models(V, (1, 1))
    programs = (method_program(method, *models_, N, context), target_program(models_[0], N, context))
    try:  # the method's branch tree and the target's
        tree, reference = (explore(program, variables, deadline) for program in programs)
    except ExplorationTimeout:
        result.reason = "timeout: the symbolic exploration ran past the time limit"
        return
    except (SymbolicError, SymbolicZeroDivision) as err:  # float arithmetic, or a division by a symbolic 0
        result.reason = f"cannot be run symbolically: {err}"
        return
    tv = tv_term(tree, reference, V, N)
    env = {**names, "tv_pq": _tv_pq(bases, context)}
    answer, solver = _solve([*variables.constraints, tv > parsed.z3(env)], deadline)
    if answer == z3.unsat:
        result.verdict = "proved"
    elif answer == z3.sat:
        _confirm(result, solver.model(), variables, method, parsed, names, cx_args)
    else:
        result.reason = f"z3 answered unknown ({solver.reason_unknown()})"


def _solve(constraints, deadline):
    """(answer, solver): z3's nlsat (complete for nonlinear real arithmetic, and much faster here
    than the default solver on these sums of If terms), then the default solver on 'unknown'."""
    for make in (lambda: z3.Tactic("qfnra-nlsat").solver(), z3.Solver):
        solver = make()
        solver.set("timeout", max(1, int(1000 * (deadline - time.monotonic()))))
        solver.add(*constraints)
        answer = solver.check()
        if answer != z3.unknown or time.monotonic() >= deadline:
            return answer, solver
    return answer, solver


def tv_term(tree, reference, vocab_size: int, num_tokens: int):
    """sum over outputs s of max(law(s) - target(s), 0) as a z3 term (the TV of the two laws)."""
    terms = []
    for output in itertools.product(range(vocab_size), repeat=num_tokens):
        gap = zero_if_none(law_term(tree.root, output, {}, {})) - zero_if_none(law_term(reference.root, output, {}, {}))
        terms.append(z3.If(gap > 0, gap, 0))
    return z3.Sum(terms)


def _tv_pq(bases, context):
    """TV(p(. | context), q(. | context)) of the symbolic base models as a z3 term."""
    p, q = (model.probs(context) for model in bases)
    gaps = [to_z3(a) - to_z3(b) for a, b in zip(p, q)]
    return z3.Sum([z3.If(g > 0, g, 0) for g in gaps])


def iteration_tv(method, target, draft, context=(), num_tokens: int = 2):
    """TV between the law of `num_tokens` tokens of one iteration of `method` followed by the target
    and the target's law: the quantity `prove_tv_bound` bounds (exact on exact models)."""
    law = enumerate_law(method_program(method, target, draft, num_tokens, tuple(context))).law
    return exact.total_variation(law, exact.target_distribution(target, tuple(context), num_tokens)), law


def _confirm(result, model, variables, method, parsed: Bound, names, cx_args) -> None:
    """The solver's pair, rationalised: its TV and the bound in exact arithmetic (Fractions).
    `cx_args`: (context, the method's `MethodSource`)."""
    (context, source), V, N = cx_args, result.vocab_size, result.num_tokens
    p_table, q_table = solver_tables(model, variables)
    target, draft = table_model(p_table, V), table_model(q_table, V)
    tv, law = iteration_tv(method, target, draft, context, N)
    tv_pq = sum(max(a - b, 0) for a, b in zip(target.probs(context), draft.probs(context)))
    value = parsed.exact({**names, "tv_pq": tv_pq})
    if not law_is_exact(law) or not tv > value:
        result.reason = (f"z3 found a pair with TV > bound, but the exact engine gives TV {tv} <= {value} on it "
                         "rationalised (an irrational or boundary pair?)")
        return
    result.verdict = "counterexample"
    result.reason = "the TV exceeds the bound on the pair below (confirmed in exact arithmetic)"
    code = "\n".join(["from fractions import Fraction", "from verispec.reference import models",
                      "from verispec.formal.tv_bound import iteration_tv", *source.lines,
                      f"target = {format_table(p_table, V)}", f"draft = {format_table(q_table, V)}",
                      f"print(iteration_tv(method, target, draft, {tuple(context)!r}, {N})[0])  # {Fraction(tv)}"])
    result.counterexample = {"target": {str(k): [str(x) for x in v] for k, v in p_table.items()},
                             "draft": {str(k): [str(x) for x in v] for k, v in q_table.items()},
                             "tv": str(Fraction(tv)), "bound": str(value), "tv_pq": str(tv_pq), "code": code}


def tv_bound_from_args(args):
    """`verispec prove METHOD --tv-bound EXPR`: the `TVBoundResult` of the parsed arguments, or exit
    status 2 after printing why they are bad (a flag the bound proof does not take included)."""
    if args.target_temperature != 1 or args.context:
        print("verispec prove: --tv-bound: proves at target temperature 1 from the empty context "
              "(leave out --target-temperature and --context)", file=sys.stderr)
        return 2
    try:
        vocab_size = 2 if args.vocab_size is None else args.vocab_size
        return prove_tv_bound(args.method, args.tv_bound, vocab_size, args.draft_length, args.num_paths,
                              timeout=args.timeout)
    except (TypeError, ValueError) as err:
        print(f"verispec prove: {err}", file=sys.stderr)
        return 2
