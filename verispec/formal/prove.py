"""`prove`: losslessness of a method for EVERY target/draft pair at a fixed small size, by SMT.

The rule's own code (drafter + verifier, the same code `verispec check` enumerates) is executed on
symbolic models: every target conditional p(. | u) and draft conditional q(. | u) is a vector of
z3 reals on the closed simplex (p_i >= 0, sum 1; zeros, one-hot vectors and p = q included). The
replay (`verispec.formal.replay`) explores every feasible branch once and merges them into one
branch tree. One iteration from the empty context is followed by the target until N tokens are out
(N = L + 1: the iteration emits at most L + 1 tokens). For each output sequence s of N tokens the
tree gives law(s) as nested If(decision, ., .) and sums over chance outcomes of weight * subtree, and
z3 (default solver, nonlinear real arithmetic) is asked whether some pair makes law(s) differ from
the target's p(s_1) p(s_2 | s_1) ... . UNSAT for every s is a proof at that size; SAT gives a
counterexample pair, which is rationalised and replayed through the exact engine in Fractions
before it is reported.

Why one iteration suffices: if one iteration followed by the target has the target's law on L + 1
tokens for every pair, then by induction over iterations the whole loop has the target's law at
every length N, for a method whose iteration reads the prefix only through the models' conditionals
(``Method.model_state_only``; every built-in method but prompt lookup). For other methods the result
covers the empty context only, and says so.

Speculative sampling: Leviathan et al. 2023 (arXiv 2211.17192); the SMT solver: de Moura & Bjorner,
"Z3: an efficient SMT solver" (TACAS 2008).
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import asdict, dataclass, field
from fractions import Fraction

import numpy as np
import z3

from ..reference import models
from ..reference.methods import Method, resolve
from ..reference.models import LanguageModel, check_positive_int
from . import points
from .cells import Algebra
from .parallel import Helper, ValuesModel, helper_job, output_group
from .replay import Explorer, ExplorationTimeout
from .search import Search
from .symbolic import Sym, SymbolicError, SymbolicZeroDivision, clear_cache

__all__ = ["prove", "ProofResult", "Query", "Counterexample", "SymbolicModel", "SOLVER"]

#: What answers the queries (reported in every result).
SOLVER = f"z3 {z3.get_version_string()} default solver (nonlinear real arithmetic)"


class _Variables:
    """The simplex constraints of every symbolic distribution created so far."""

    def __init__(self):
        self.constraints: list = []
        self.groups: dict = {}  # (model name, prefix) -> [free z3 variables]
        self.extra: list = []  # reals a rule's hook defines by constraints (SpecTr's rho)
        self.explorer: Explorer | None = None

    def add(self, key, free):
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

    def __init__(self, name: str, vocab_size: int, variables: _Variables):
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


@dataclass
class Query:
    """One SMT query: is there a pair with law(output) != target law(output)?"""

    output: tuple
    result: str  # "unsat" (equal for every pair), "sat" (a pair differs) or "unknown"
    seconds: float
    reason: str = ""
    solver_calls: int = 1  # > 1 when the query was split on comparisons


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


@dataclass
class ProofResult:
    """The verdict of `prove` and what it cost.

    Attributes:
        verdict: "proved" (UNSAT for every output: lossless for every target/draft pair at this
            size), "counterexample" (a confirmed pair, in `counterexample`) or "unknown" (see
            `reason`: a timeout, a solver 'unknown', or a rule that cannot run symbolically).
        claim: what "proved" means here, in words.
        branch_points: forked decisions + chance nodes of the merged branch tree.
        decisions: comparisons answered (forked or implied by the path condition).
        leaves / dead_paths: paths explored to their end / dropped as infeasible.
        variables: free real variables (V - 1 per conditional read).
        queries: one per output sequence, with its result and time.
    """

    method: str
    vocab_size: int
    draft_length: int
    num_paths: int
    num_tokens: int
    target_temperature: object
    draft_temperature: object
    verdict: str
    reason: str
    claim: str
    branch_points: int = 0
    decisions: int = 0
    leaves: int = 0
    dead_paths: int = 0
    solver_checks: int = 0
    variables: int = 0
    solver: str = SOLVER
    exploration_seconds: float = 0.0
    seconds: float = 0.0
    queries: list = field(default_factory=list)
    counterexample: Counterexample | None = None
    context: tuple = ()

    @property
    def proved(self) -> bool:
        return self.verdict == "proved"

    @property
    def max_query_seconds(self) -> float:
        return max((q.seconds for q in self.queries), default=0.0)

    def to_json(self) -> dict:
        """A JSON-ready dict (Fractions as "a/b" strings, tuples as lists)."""
        return _jsonable(asdict(self))

    def summary(self) -> str:
        head = (f"{self.method}: {self.verdict.upper()} at V={self.vocab_size}, L={self.draft_length}, "
                f"K={self.num_paths}, N={self.num_tokens} tokens")
        if self.context:
            head += f" from the context {self.context}"
        if self.target_temperature != 1 or self.draft_temperature != 1:
            head += f" (target T={self.target_temperature}, draft T={self.draft_temperature})"
        lines = [head,
                 f"  {self.branch_points} branch points, {self.decisions} decisions, {self.leaves} leaves, "
                 f"{self.dead_paths} infeasible paths, {self.variables} variables",
                 f"  {len(self.queries)} queries ({self.solver}), slowest {self.max_query_seconds:.2f} s; "
                 f"exploration {self.exploration_seconds:.2f} s, total {self.seconds:.2f} s"]
        if self.verdict == "proved":
            lines.append(f"  {self.claim}")
        elif self.reason:
            lines.append(f"  reason: {self.reason}")
        if self.counterexample is not None:
            cx = self.counterexample
            lines += [f"  output {cx.output}: method law {cx.method_probability} vs target law "
                      f"{cx.target_probability}; TV (one iteration, then the target) = {cx.tv_iteration}, "
                      f"TV (whole loop) = {cx.tv_loop}",
                      "  reproduce:", *("    " + line for line in cx.code.splitlines())]
        return "\n".join(lines)

    def __str__(self):
        return self.summary()


def _jsonable(value):
    if isinstance(value, Fraction):
        return str(value)
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, str) else k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    return value


# --------------------------------------------------------------------------------------------------
# the law of one output sequence, from the merged branch tree

def _law(node, output, memo, region):
    """law(output) below `node` as a z3 term, or None where it is 0 for every pair.

    region: {condition AST id: truth value} fixed by the query splitting (`_decide`): a decision
    node whose condition is fixed contributes only its branch.
    """
    if output not in node.emitted:
        return None
    key = id(node)
    if key in memo:
        return memo[key]
    if node.kind == "leaf":
        term = z3.RealVal(1)
    elif node.kind == "decide":
        fixed = region.get(node.payload.get_id())
        if fixed is not None:
            child = node.children.get(0 if fixed else 1)
            term = None if child is None else _law(child, output, memo, region)
        elif len(node.children) == 1:
            term = _law(next(iter(node.children.values())), output, memo, region)
        else:
            true, false = (_law(node.children[c], output, memo, region) for c in (0, 1))
            term = None if true is None and false is None else z3.If(
                node.payload, _zero_if_none(true), _zero_if_none(false))
    else:  # chance
        terms = [node.payload[c] * t for c, child in node.children.items()
                 if (t := _law(child, output, memo, region)) is not None]
        term = terms[0] if len(terms) == 1 else z3.Sum(terms) if terms else None
    memo[key] = term
    return term


def _zero_if_none(term):
    return z3.RealVal(0) if term is None else term


def _explore(program, variables, deadline):
    explorer = Explorer(variables.constraints, deadline)
    explorer.extra = variables.extra  # shared: the algebra of the queries needs them
    variables.explorer = explorer
    try:
        return explorer.run(program)
    finally:
        variables.explorer = None


def _program(method, target, draft, num_tokens, context=()):
    """One iteration from `context`, then the target until `num_tokens` are out."""

    def run(rand):
        out = method.step(target, draft, context, rand)
        while len(out) < num_tokens:
            out += (rand.categorical(target.probs(context + out)),)
        return out[:num_tokens]

    return run


def _target_program(target, num_tokens, context=()):
    def run(rand):
        out = ()
        while len(out) < num_tokens:
            out += (rand.categorical(target.probs(context + out)),)
        return out

    return run


def _decide_output(tree, reference, output, variables, deadline):
    """Is there a pair with law(output) != target law(output)? A `Search` (split on comparisons,
    cells decided in exact algebra). Returns (result, model, solver calls, reason)."""
    ref = _zero_if_none(_law(reference.root, output, {}, {}))
    if tree.algebra is None:
        try:
            tree.algebra = Algebra(variables)  # memoised conversions, shared by the outputs
        except ImportError:  # sympy missing: z3 alone
            tree.algebra = False
    return Search(tree, ref, output, variables.constraints, deadline, tree.algebra or None, _law).run()


def _check_args(method, vocab_size, draft_length, num_paths, timeout):
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


def _check_temperature(value, name):
    if value not in (0, 1):
        raise ValueError(f"{name}: prove supports temperature 1 (any distribution) or 0 (the greedy "
                         f"point mass of a symbolic base), got {value!r}")
    return value


def _wrap(model, temperature):
    return model if temperature == 1 else models.temperature(model, temperature)


#: TV a float64 law (a rule computing in float64 for numbers) must exceed to confirm a counterexample.
FLOAT_CONFIRM_TV = 1e-9

#: Structured pairs tried by the exact engine before the symbolic run (at most 10% of the time limit).
POINT_TRIALS = 32


def prove(method, vocab_size: int, draft_length: int, num_paths: int = 1, timeout: float = 60.0,
          target_temperature=1, draft_temperature=1, point_trials: int = POINT_TRIALS,
          context=(), workers=None) -> ProofResult:
    """Prove (or refute) that `method` is lossless for EVERY target/draft pair at (V, L, K).

    Args:
        method: a `Method`, a built-in name (built with draft_length and num_paths) or
            ``"pkg.module:attr"``.
        vocab_size: V >= 2. draft_length: L >= 1 (N = depth + 1 tokens are compared, the depth being
            the method's declared draft length or max depth, else L). num_paths: K >= 1.
        timeout: seconds for the whole proof (exploration + queries); running out answers
            "unknown", never "proved".
        target_temperature, draft_temperature: 1 (default: every distribution on the closed simplex)
            or 0 (every greedy point mass argmax of a symbolic base: exposes rules that mishandle
            temperature).
        point_trials: structured pairs (vertices, edges, small denominators) evaluated by the exact
            engine first (`verispec.formal.points`, at most 10% of `timeout`); 0 skips the search.
            A difference found there is a confirmed counterexample; finding none proves nothing.
        context: the token prefix [n] the iteration starts from (default empty). Its conditionals
            p(. | context + u) are symbolic like the others. Matters for a method that reads the
            prefix itself (prompt lookup: a context with a repeated n-gram makes its draft
            non-empty); for the others the empty context already covers every context.
        workers: processes deciding the output queries (default: the CPU count, at most
            `MAX_WORKERS`; 1 = this process only). With 2, a helper process explores the same
            program itself and takes outputs from a shared counter (`verispec.formal.parallel`);
            an output it has not answered by the time limit is "unknown". Used from
            `PARALLEL_MIN_OUTPUTS` outputs on, for a method given by name or a picklable `Method`.

    Returns:
        a `ProofResult` (verdict "proved" / "counterexample" / "unknown" with its reason).

    Raises:
        TypeError / ValueError: bad arguments (naming them); the rule's own errors (e.g.
            `RuleContractError`) propagate: a broken rule has no law to prove anything about.
    """
    try:
        return _prove(method, vocab_size, draft_length, num_paths, timeout, target_temperature,
                      draft_temperature, point_trials, context, workers)
    finally:
        clear_cache()  # the z3 expressions built for this proof


#: Default ceiling of `prove(workers=None)` (one helper process per extra worker would re-explore).
MAX_WORKERS = 2

#: Fewer outputs than this are decided in this process only (a helper's start costs about a second).
PARALLEL_MIN_OUTPUTS = 8


def _check_workers(workers) -> int:
    if workers is None:
        return max(1, min(os.cpu_count() or 1, MAX_WORKERS))
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers: expected a positive int or None, got {workers!r}")
    if workers > 2:
        raise ValueError(f"workers: at most 2 processes are supported, got {workers}")
    return workers


def _symbolic_models(V, temperatures):
    """(variables, (base target, base draft), (target, draft)) on the closed simplices."""
    variables = _Variables()
    bases = SymbolicModel("p", V, variables), SymbolicModel("q", V, variables)
    return variables, bases, tuple(_wrap(m, t) for m, t in zip(bases, temperatures))


def _explore_job(job, deadline):
    """Explore the method and the target as `prove` does (what a helper process runs first).
    Returns (tree, reference tree, variables, the outputs in query order)."""
    method, V, L, K, depth = _check_args(job["spec"], job["V"], job["L"], job["K"], 1.0)
    variables, _, (target, draft) = _symbolic_models(V, job["temperatures"])
    N = depth + 1
    tree = _explore(_program(method, target, draft, N, job["context"]), variables, deadline)
    reference = _explore(_target_program(target, N, job["context"]), variables, deadline)
    return tree, reference, variables, list(itertools.product(range(V), repeat=N))


def _prove(method, vocab_size, draft_length, num_paths, timeout, target_temperature, draft_temperature,
           point_trials, context, workers) -> ProofResult:
    clear_cache()
    spec = method
    method, V, L, K, depth = _check_args(method, vocab_size, draft_length, num_paths, timeout)
    temperatures = (_check_temperature(target_temperature, "target_temperature"),
                    _check_temperature(draft_temperature, "draft_temperature"))
    if isinstance(point_trials, bool) or not isinstance(point_trials, int) or point_trials < 0:
        raise ValueError(f"point_trials: expected a non-negative int, got {point_trials!r}")
    context = models.check_prefix(context, V, "context")
    workers = _check_workers(workers)
    N = depth + 1
    start = time.perf_counter()
    deadline = time.monotonic() + timeout
    result = ProofResult(repr(method), V, L, K, N, target_temperature, draft_temperature, "unknown", "",
                         _claim(method, V, L, K, N, context), context=context)
    job = helper_job(spec, V, L, K, temperatures, context) if workers > 1 and V ** N >= PARALLEL_MIN_OUTPUTS \
        else None
    helper = Helper(job, V ** N, deadline) if job is not None else None
    try:
        if point_trials:
            cx = points.search(method, V, depth, temperatures, int(point_trials),
                               time.monotonic() + timeout / 10, context=context)
            if cx is not None:
                result.verdict, result.counterexample = "counterexample", cx
                result.reason = (f"the law of {cx.output} differs on the pair below (found by the point "
                                 "search, confirmed in exact arithmetic)")
                return result
        _symbolic_run(result, method, temperatures, deadline, start, helper)
        return result
    finally:
        if helper is not None:
            helper.close()
        result.seconds = time.perf_counter() - start


def _claim(method, V, L, K, N, context) -> str:
    start_from = f"from the context {context} " if context else ""
    claim = (f"for every target/draft pair at V={V}, L={L}, K={K}: one iteration {start_from}followed by the "
             f"target has the target's law of the first {N} tokens")
    return claim + (", hence the whole loop is lossless at every length" if method.model_state_only
                    else f" ({'from this context only' if context else 'from the empty context'}: this method "
                         "reads the prefix itself)")


def _symbolic_run(result, method, temperatures, deadline, start, helper) -> None:
    """Explore the method and the target symbolically, then decide one query per output."""
    V, N, context = result.vocab_size, result.num_tokens, result.context
    variables, bases, (target, draft) = _symbolic_models(V, temperatures)
    try:
        tree = _explore(_program(method, target, draft, N, context), variables, deadline)
        reference = _explore(_target_program(target, N, context), variables, deadline)
    except ExplorationTimeout:
        result.reason = "timeout: the symbolic exploration ran past the time limit"
        return
    except SymbolicError as err:
        result.reason = f"cannot be run symbolically: {err}"
        return
    except SymbolicZeroDivision as err:
        # Raises the exact engine's RuleContractError when the solver's pair confirms the crash.
        result.reason = _zero_division(err, variables, method, bases, temperatures, N, context)
        return
    result.exploration_seconds = time.perf_counter() - start
    result.branch_points, result.decisions = tree.branch_points, tree.decisions
    result.leaves, result.dead_paths, result.solver_checks = tree.leaves, tree.dead, tree.solver_checks
    result.variables = sum(len(free) for free in variables.groups.values())
    _run_queries(result, tree, reference, variables, (method, bases, temperatures, context), deadline, helper)


def _run_queries(result, tree, reference, variables, cx_args, deadline, helper=None):
    """One query per output; with a `helper` process the outputs are shared with it (each takes the
    next one from a shared counter). Fills result.queries (in output order) and the verdict."""
    outputs = list(itertools.product(range(result.vocab_size), repeat=result.num_tokens))
    answers = {}  # output index -> Query
    next_group = helper.claim if helper is not None else itertools.count().__next__
    while (indices := output_group(next_group(), result.vocab_size, len(outputs))):
        if _decide_group(result, indices, outputs, answers, tree, reference, variables, cx_args, deadline):
            break
    else:
        if helper is not None:
            for index, answer in helper.collect(set(range(len(outputs))) - answers.keys()).items():
                status, values, calls, reason, seconds = answer
                answers[index] = Query(outputs[index], status, seconds, reason, calls)
                model = ValuesModel(values) if values is not None else None
                if _settles(result, answers[index], model, variables, cx_args):
                    break
    result.queries = [answers[i] for i in sorted(answers)]
    if result.verdict == "counterexample":
        return
    missing = [Query(output, "unknown", 0.0, "timeout: the helper process did not answer in time", 0)
               for i, output in enumerate(outputs) if i not in answers]
    result.queries = sorted(result.queries + missing, key=lambda q: q.output)
    unknown = [q for q in result.queries if q.result != "unsat"]
    if unknown:
        timeouts = sum(1 for q in unknown if "timeout" in q.reason.lower() or q.reason == "canceled")
        result.reason = (f"{len(unknown)} of {len(result.queries)} outputs undecided"
                         + (f" ({timeouts} by the time limit)" if timeouts else "")
                         + f"; first: {unknown[0].output} ({unknown[0].reason})")
        return
    result.verdict = "proved"
    result.reason = ""


def _decide_group(result, indices, outputs, answers, tree, reference, variables, cx_args, deadline) -> bool:
    """Decide the outputs `indices` into `answers`; True when a counterexample settles the proof."""
    for index in indices:
        start = time.perf_counter()
        status, model, calls, reason = _decide_output(tree, reference, outputs[index], variables, deadline)
        answers[index] = Query(outputs[index], status, time.perf_counter() - start, reason, calls)
        if _settles(result, answers[index], model, variables, cx_args):
            return True
    return False


def _settles(result, query, model, variables, cx_args) -> bool:
    """For a satisfiable query: confirm the solver's pair with the exact engine. True when it is a
    confirmed counterexample (then the verdict is set); otherwise the query's reason says why not."""
    if query.result != "sat":
        return False
    method, bases, temperatures, context = cx_args
    try:
        cx = _counterexample(model, variables, method, bases, temperatures, query.output, result.num_tokens,
                             context)
    except Exception as err:  # e.g. the rule divides by zero on the solver's pair
        query.reason = f"the exact engine raised on the solver's pair ({type(err).__name__}: {err})"
        return False
    if cx.confirmed:
        result.verdict, result.counterexample = "counterexample", cx
        result.reason = f"the law of {query.output} differs on the pair below (confirmed in exact arithmetic)" \
            if cx.arithmetic == "exact" else (f"the law of {query.output} differs on the pair below (confirmed "
                                              "by the engine, whose law is float64 for this rule: the difference "
                                              f"is far above round-off, > {FLOAT_CONFIRM_TV})")
        return True
    query.reason = ("the solver's pair, rationalised, was not confirmed by the exact engine "
                    "(an irrational counterexample?)")
    result.counterexample = cx
    return False


# --------------------------------------------------------------------------------------------------
# counterexamples: rationalise the solver's pair, confirm it with the exact engine

def _rational(value) -> Fraction:
    if z3.is_rational_value(value):
        return Fraction(value.numerator_as_long(), value.denominator_as_long())
    if z3.is_algebraic_value(value):
        approx = value.approx(40)
        return Fraction(approx.numerator_as_long(), approx.denominator_as_long()).limit_denominator(10 ** 12)
    raise SymbolicError(f"the solver's value {value} is not a number")


def _point(model, free) -> list:
    """The conditional [V] of a solver model: free coordinates clamped at 0, the last one = 1 - sum."""
    xs = [max(Fraction(0), _rational(model.eval(x, model_completion=True))) for x in free]
    total = sum(xs)
    if total > 1:
        xs = [x / total for x in xs]
    return xs + [1 - sum(xs)]


def _tables(model, variables):
    tables = {"p": {}, "q": {}}
    for (name, prefix), free in sorted(variables.groups.items(), key=lambda kv: (kv[0][0], len(kv[0][1]), kv[0][1])):
        tables[name][prefix] = _point(model, free)
    return tables["p"], tables["q"]


def _table_model(conditionals, V):
    uniform = [Fraction(1, V)] * V
    return models.table(dict(conditionals), default=uniform, vocab_size=V)


def _fmt_table(conditionals, V):
    rows = ", ".join(f"{prefix!r}: [{', '.join(_fmt_fraction(x) for x in probs)}]"
                     for prefix, probs in conditionals.items())
    uniform = ", ".join([_fmt_fraction(Fraction(1, V))] * V)
    return f"models.table({{{rows}}}, default=[{uniform}], vocab_size={V})"


def _fmt_fraction(x: Fraction) -> str:
    # Always a Fraction: a row of plain ints ([1, 0]) would be read as float64 by models.table.
    return f"Fraction({x.numerator})" if x.denominator == 1 else f"Fraction({x.numerator}, {x.denominator})"


def _zero_division(err, variables, method, bases, temperatures, N, context) -> str:
    """A division by a symbolic value that can be 0 on a branch of positive probability.

    The solver's pair (rationalised) is run through the exact engine: when the rule raises there,
    that is a rule contract error (as `verispec check` reports it), raised with the pair as code.
    Otherwise (no pair, or an irrational one) returns the reason of an "unknown" verdict.
    """
    from ..reference import exact
    from ..reference.contract import RuleContractError

    where = f"on the branch with choices {list(err.trace)}"
    if err.witness is None:
        return f"possible {err} {where} (z3 could not decide whether the divisor is 0 there)"
    p_table, q_table = _tables(err.witness, variables)
    V = bases[0].vocab_size
    target = _wrap(_table_model(p_table, V), temperatures[0])
    draft = _wrap(_table_model(q_table, V), temperatures[1])
    try:
        exact.output_distribution(target, draft, method, context, N)
    except RuleContractError as crash:
        code = _repro_code(p_table, q_table, V, temperatures, N, method, context)
        raise RuleContractError(f"{crash.problem} (prove: {err} {where}; confirmed by the exact engine on "
                                "the pair below)", method=crash.method, prefix=crash.prefix,
                                probability=crash.probability, draws=crash.draws,
                                detail="reproduce:\n" + "\n".join("    " + line for line in code.splitlines())) from crash
    return (f"possible {err} {where}; the solver's pair, rationalised, did not make the exact engine raise "
            "(an irrational pair?)")


def _repro_code(p_table, q_table, V, temperatures, N, method, context=()) -> str:
    at = f"context={tuple(context)!r}, " if context else ""
    wrap = [f"models.temperature({{}}, {t})" if t != 1 else "{}" for t in temperatures]
    return "\n".join([
        "from fractions import Fraction",
        "from verispec.reference import models",
        "from verispec.testing import assert_lossless",
        f"target = {wrap[0].format(_fmt_table(p_table, V))}",
        f"draft = {wrap[1].format(_fmt_table(q_table, V))}",
        f"assert_lossless(method, target=target, draft=draft, {at}num_tokens={N})  # method = {method!r}",
    ])


def _counterexample(model, variables, method, bases, temperatures, output, N, context=()) -> Counterexample:
    from ..reference import exact
    from ..reference.randomness import enumerate_law

    V = bases[0].vocab_size
    p_table, q_table = _tables(model, variables)
    target = _wrap(_table_model(p_table, V), temperatures[0])
    draft = _wrap(_table_model(q_table, V), temperatures[1])
    law = enumerate_law(_program(method, target, draft, N, context)).law
    ref = exact.target_distribution(target, context, N)
    tv_iteration = exact.total_variation(law, ref)
    # A rule that computes in float64 for numbers (SpecTr's rho is a float64 root) has a float law:
    # only a difference far above round-off confirms the solver's pair.
    exact_law = all(isinstance(x, (Fraction, int)) for x in law.values())
    loop = exact.output_distribution(target, draft, method, context, N)
    tv_loop = exact.total_variation(loop, ref)
    code = _repro_code(p_table, q_table, V, temperatures, N, method, context)
    return Counterexample(output=output, target=p_table, draft=q_table,
                          method_probability=Fraction(law.get(output, 0)),
                          target_probability=Fraction(ref.get(output, 0)),
                          tv_iteration=Fraction(tv_iteration), tv_loop=Fraction(tv_loop),
                          confirmed=tv_iteration != 0 if exact_law else tv_iteration > FLOAT_CONFIRM_TV, code=code,
                          arithmetic="exact" if exact_law else "float64")
