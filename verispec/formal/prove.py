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
from . import points
from ._internal.counterexamples import (FLOAT_CONFIRM_TV, Counterexample, PairCheck, confirm_counterexample,
                                        zero_division)
from ._internal.problem import (SymbolicModel, check_args, check_temperature, explore, method_program,
                                symbolic_models, target_program, decide_output)
from ._internal.values import ValuesModel
from .parallel import Workers, check_backend, helper_job, joblib_available, output_group
from .portfolio import check_solvers, portfolio_note
from .replay import ExplorationTimeout
from .symbolic import SymbolicError, SymbolicZeroDivision, building
from .symmetry import representatives

__all__ = ["prove", "ProofResult", "Query", "Counterexample", "SymbolicModel", "SOLVER"]

#: What answers the queries without the portfolio (`solvers=("z3",)`).
SOLVER = f"z3 {z3.get_version_string()} default solver (nonlinear real arithmetic)"


@dataclass
class Query:
    """One SMT query: is there a pair with law(output) != target law(output)?"""

    output: tuple
    result: str  # "unsat" (equal for every pair), "sat" (a pair differs) or "unknown"
    seconds: float
    reason: str = ""
    solver_calls: int = 1  # > 1 when the query was split on comparisons
    solver: str = "z3"  # the solver whose answer this is ("cvc5" when it won the race)


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
        queries: one per output sequence, with its result, time and the solver that answered.
        solver: the solvers, in words (z3 alone, or the z3 + cvc5 portfolio, `verispec.formal.portfolio`).
        outputs_by_symmetry: outputs not queried because the watched trace showed the rule
            equivariant and the query of their orbit's representative answered for them
            (`verispec.formal.symmetry`); 0 without a watch.
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
    outputs_by_symmetry: int = 0  # outputs settled by the query of their orbit's representative

    @property
    def proved(self) -> bool:
        """True when the verdict is "proved"."""
        return self.verdict == "proved"

    @property
    def answered_by(self) -> dict:
        """{solver name: queries it answered (sat or unsat)}."""
        counts = {}
        for query in self.queries:
            if query.result in ("sat", "unsat"):
                counts[query.solver] = counts.get(query.solver, 0) + 1
        return counts

    @property
    def max_query_seconds(self) -> float:
        """Seconds of the slowest query (0.0 without queries)."""
        return max((q.seconds for q in self.queries), default=0.0)

    def to_json(self) -> dict:
        """A JSON-ready dict (Fractions as "a/b" strings, tuples as lists)."""
        return _jsonable({**asdict(self), "answered_by": self.answered_by})

    def summary(self) -> str:
        """The verdict, the tree's size, the costs and (for a counterexample) its reproducing code."""
        head = (f"{self.method}: {self.verdict.upper()} at V={self.vocab_size}, L={self.draft_length}, "
                f"K={self.num_paths}, N={self.num_tokens} tokens")
        if self.context:
            head += f" from the context {self.context}"
        if self.target_temperature != 1 or self.draft_temperature != 1:
            head += f" (target T={self.target_temperature}, draft T={self.draft_temperature})"
        lines = [head,
                 f"  {self.branch_points} branch points, {self.decisions} decisions, {self.leaves} leaves, "
                 f"{self.dead_paths} infeasible paths, {self.variables} variables",
                 f"  {len(self.queries)} queries"
                 + (f" (+ {self.outputs_by_symmetry} outputs by symmetry)" if self.outputs_by_symmetry else "")
                 + f" ({self.solver}; answered by "
                 f"{', '.join(f'{k} {v}' for k, v in self.answered_by.items()) or 'none'}), "
                 f"slowest {self.max_query_seconds:.2f} s; "
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

#: Structured pairs tried by the exact engine before the symbolic run (at most 10% of the time limit).
POINT_TRIALS = 32


def prove(method, vocab_size: int, draft_length: int | None = None, num_paths: int | None = None, *,
          timeout: float = 60.0,
          target_temperature=1, draft_temperature=1, point_trials: int = POINT_TRIALS,
          context=(), workers=None, solvers=None, backend=None, cluster=None, watch=None) -> ProofResult:
    """Prove (or refute) that `method` is lossless for EVERY target/draft pair at (V, L, K).

    Args:
        method: a `Method`, a built-in name (built with draft_length and num_paths) or
            ``"pkg.module:attr"``.
        vocab_size: V >= 2.
        draft_length, num_paths: L >= 1 and K >= 1, or None: the method's own (its declared draft
            length or max depth, its or its drafter's ``num_paths``; `declared_sizes`), else 1. A
            built-in name or a factory is built with them; a value that differs from what the
            method declares raises ValueError naming it. N = L + 1 tokens are compared.
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
        workers: processes deciding the output queries, this one included (default: the CPU
            count, at most `MAX_WORKERS`; 1 = this process only). Each other worker (joblib, see
            `backend`) explores the same program itself and decides its share of the outputs
            (`verispec.formal.parallel`); an output no worker answered by the time limit is
            "unknown". Used from `PARALLEL_MIN_OUTPUTS` outputs on, for a method given by name or
            "pkg.module:attr" (a Method object is decided in this process only).
        backend, cluster: joblib's backend for the other workers: "loky" (default: processes on
            this machine), "dask" (cluster: the scheduler's address; None starts a local cluster)
            or "ray" (cluster: its address, default $RAY_ADDRESS).

        solvers: None (default: z3 raced by cvc5 when cvc5 is installed, else z3 alone), ("z3",)
            or ("z3", "cvc5") (`verispec.formal.portfolio`); each query reports which answered.
        watch: a `verispec.formal.watch.Watch` to run the iteration under (None: not watched). It
            records what the rule does with the vocabulary (`verispec.formal.cutoff` reads it); when
            it shows the rule equivariant (K = 1, empty context), one query per orbit of outputs is
            asked (`verispec.formal.symmetry`). A watched proof runs in this process only.

    Returns:
        a `ProofResult` (verdict "proved" / "counterexample" / "unknown" with its reason).

    Raises:
        TypeError / ValueError: bad arguments (naming them); the rule's own errors (e.g.
            `RuleContractError`) propagate: a broken rule has no law to prove anything about.
    """
    with building():  # the z3 expressions built for this proof, dropped with it
        return _prove(method, (vocab_size, draft_length, num_paths), timeout, (target_temperature, draft_temperature),
                      point_trials, context, _Execution(workers, solvers, backend, cluster, watch))


#: Default ceiling of `prove(workers=None)` (each worker but this process re-explores the rule).
MAX_WORKERS = 2

#: Fewer outputs than this are decided in this process only (a worker must start and explore first).
PARALLEL_MIN_OUTPUTS = 8


def _check_workers(workers) -> int:
    if workers is None:
        # joblib is an extra (verispec[prove]): without it the default is this process alone
        return max(1, min(os.cpu_count() or 1, MAX_WORKERS)) if joblib_available() else 1
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers: expected a positive int or None, got {workers!r}")
    if workers > 1 and not joblib_available():
        raise ValueError(f"workers: {workers} processes need joblib (pip install verispec[prove])")
    return workers


@dataclass(frozen=True)
class _Execution:
    """How `prove` runs, as given: its workers, solvers, joblib backend and cluster, and the watch."""
    workers: object
    solvers: object
    backend: object
    cluster: object
    watch: object


def _prove(method, sizes, timeout, given_temperatures, point_trials, context, execution: _Execution) -> ProofResult:
    """`prove` with sizes = (vocab_size, draft_length, num_paths) and given_temperatures =
    (target_temperature, draft_temperature), as given."""
    spec, watch = method, execution.watch
    method, V, L, K, source = check_args(method, *sizes, timeout)
    target_temperature, draft_temperature = given_temperatures
    temperatures = (check_temperature(target_temperature, "target_temperature"),
                    check_temperature(draft_temperature, "draft_temperature"))
    if isinstance(point_trials, bool) or not isinstance(point_trials, int) or point_trials < 0:
        raise ValueError(f"point_trials: expected a non-negative int, got {point_trials!r}")
    context = models.check_prefix(context, V, "context")
    workers, solvers = _check_workers(execution.workers), check_solvers(execution.solvers)
    backend, cluster = check_backend(execution.backend, execution.cluster)
    N = L + 1
    start = time.perf_counter()
    deadline = time.monotonic() + timeout
    result = ProofResult(source.label, V, L, K, N, target_temperature, draft_temperature, "unknown", "",
                         _claim(method, V, L, K, N, context), context=context, solver=portfolio_note(solvers))
    job = helper_job(spec, V, L, K, temperatures, context, solvers) \
        if workers > 1 and V ** N >= PARALLEL_MIN_OUTPUTS and watch is None else None
    helper = Workers(job, V ** N, deadline, workers, backend, cluster) if job is not None else None
    try:
        if point_trials:
            cx = points.search(method, V, L, temperatures, int(point_trials),
                               time.monotonic() + timeout / 10, context=context, source=source)
            if cx is not None:
                result.verdict, result.counterexample = "counterexample", cx
                result.reason = (f"the law of {cx.output} differs on the pair below (found by the point "
                                 "search, confirmed in exact arithmetic)")
                return result
        _symbolic_run(result, (method, source, solvers, watch), temperatures, deadline, start, helper)
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


def _symbolic_run(result, named, temperatures, deadline, start, helper) -> None:
    """Explore the method and the target symbolically, then decide one query per output.
    `named`: (the Method, its `MethodSource`, the solvers, the `Watch` or None)."""
    (method, source, solvers, watch), V, N, context = named, result.vocab_size, result.num_tokens, result.context
    variables, bases, (target, draft) = symbolic_models(V, temperatures)
    check = PairCheck(method, variables, bases, temperatures, N, context, source)
    try:
        rule = watch.method(method) if watch is not None else method
        tree = explore(method_program(rule, target, draft, N, context), variables, deadline)
        reference = explore(target_program(target, N, context), variables, deadline)
    except ExplorationTimeout:
        result.reason = "timeout: the symbolic exploration ran past the time limit"
        return
    except SymbolicError as err:
        result.reason = f"cannot be run symbolically: {err}"
        return
    except SymbolicZeroDivision as err:
        # Raises the exact engine's RuleContractError when the solver's pair confirms the crash.
        result.reason = zero_division(err, check)
        return
    result.exploration_seconds = time.perf_counter() - start
    result.branch_points, result.decisions = tree.branch_points, tree.decisions
    result.leaves, result.dead_paths, result.solver_checks = tree.leaves, tree.dead, tree.solver_checks
    result.variables = sum(len(free) for free in variables.groups.values())
    symmetric = watch is not None and watch.equivariant and result.num_paths == 1 and not context
    _run_queries(result, _Search(tree, reference, deadline, solvers, check), helper, symmetric)


@dataclass(frozen=True)
class _Search:
    """What deciding the outputs needs: the explored method and target trees, each query's deadline
    and solvers, and the `PairCheck` that confirms a satisfiable query (its variables: the trees')."""
    tree: object
    reference: object
    deadline: float
    solvers: tuple
    check: PairCheck


def _run_queries(result, search: _Search, helper=None, symmetric=False):
    """One query per output (per orbit of outputs when `symmetric`); with `helper` (the other
    `Workers`) this process decides its share of the outputs and collects the others'. Fills
    result.queries (in output order) and the verdict."""
    outputs = list(itertools.product(range(result.vocab_size), repeat=result.num_tokens))
    if symmetric:
        result.outputs_by_symmetry = len(outputs)
        outputs = representatives(result.vocab_size, result.num_tokens)
        result.outputs_by_symmetry -= len(outputs)
    answers = {}  # output index -> Query
    groups = helper.mine if helper is not None else range(-(-len(outputs) // result.vocab_size))
    for group in groups:
        indices = output_group(group, result.vocab_size, len(outputs))
        if _decide_group(result, indices, outputs, answers, search):
            break
    if helper is not None:
        _merge_workers(result, helper, outputs, answers, search.check)
    result.queries = [answers[i] for i in sorted(answers)]
    if result.verdict == "counterexample":
        return
    missing = [Query(output, "unknown", 0.0, "timeout: no worker (helper process) answered in time", 0)
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


def _merge_workers(result, helper, outputs, answers, check: PairCheck) -> None:
    """Add the other workers' answers to `answers`. The counterexample reported is the confirmed one
    of the lowest output, as one process deciding the outputs in order finds it."""
    first = outputs.index(result.counterexample.output) if result.verdict == "counterexample" else len(outputs)
    collected = helper.collect(set(range(len(outputs))) - answers.keys())
    for index, (status, values, calls, reason, seconds, solver) in sorted(collected.items()):
        answers[index] = Query(outputs[index], status, seconds, reason, calls, solver)
        model = ValuesModel(values) if values is not None else None
        if index < first and _settles(result, answers[index], model, check):
            break


def _decide_group(result, indices, outputs, answers, search: _Search) -> bool:
    """Decide the outputs `indices` into `answers`; True when a counterexample settles the proof."""
    for index in indices:
        start = time.perf_counter()
        status, model, calls, reason, solver = decide_output(search.tree, search.reference, outputs[index],
                                                             search.check.variables, search.deadline, search.solvers)
        answers[index] = Query(outputs[index], status, time.perf_counter() - start, reason, calls, solver)
        if _settles(result, answers[index], model, search.check):
            return True
    return False


def _settles(result, query, model, check: PairCheck) -> bool:
    """For a satisfiable query: confirm the solver's pair with the exact engine. True when it is a
    confirmed counterexample (then the verdict is set); otherwise the query's reason says why not."""
    if query.result != "sat":
        return False
    try:
        cx = confirm_counterexample(model, query.output, check)
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
