"""`prove_all_vocab`: losslessness for EVERY vocabulary size, from proofs at the sizes up to a cutoff V*.

A rule that reads the tokens an output does not name only through vocabulary-wide sums that are
additive on sign cones (sum_z (p_z - q_z)+, sum_z min(p_z, q_z), ...) cannot tell two such tokens
of one cone from one merged token; so a counterexample at any V maps to one at V* = (tokens an
output names) + (one per cone). This is the data-independence / small-model argument (Wolper, POPL
1986; Lazic & Nowak, CONCUR 2000; Lotan, Frenkel & Shoham 2024, arXiv 2408.10685). The criterion is
checked on the symbolic run itself (`verispec.formal.watch.Watch`): a rule whose run shows anything
the theorem does not cover (an argmax, a sort, a count, V itself, a token id used as a number,
float code, L >= 2, K >= 2, ...) gets "no cutoff" with that operation, never "for every V". The
theorem, its proof and what is trusted: docs/prove.md, "For every V".
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ._internal.problem import check_args, explore, method_program, symbolic_models
from .prove import POINT_TRIALS, prove
from .replay import ExplorationTimeout
from .symbolic import SymbolicError, SymbolicZeroDivision, building
from .watch import Watch

__all__ = ["prove_all_vocab", "CutoffResult", "watched_run"]

@dataclass
class CutoffResult:
    """The verdict of `prove_all_vocab`.

    Attributes:
        verdict: "proved for every V" (the criterion holds at every size tried and the rule is
            proved at every V in 2..V*), "no cutoff" (`reason` names the operation that breaks the
            criterion, with where the rule made it), "counterexample" (a fixed-size proof found a
            confirmed one: `proofs[-1].counterexample`) or "unknown" (a fixed-size proof did not
            finish: `reason`).
        cutoff_size: V* (None when the criterion fails).
        criterion: everything the watched run showed that the theorem does not cover ([] when it holds).
        equivariant: the run showed nothing that tells tokens apart (then each proof asks one query
            per orbit of outputs).
        proofs: the `ProofResult` at each size proved, V = 2, 3, ...
        whole_loop: the method reads the prefix only through the models (`Method.model_state_only`),
            so the claim covers the whole loop at every length; otherwise one iteration from the
            empty context.
    """

    method: str
    draft_length: int
    num_paths: int
    verdict: str
    reason: str = ""
    cutoff_size: int | None = None
    criterion: list = field(default_factory=list)
    equivariant: bool = False
    proofs: list = field(default_factory=list)
    seconds: float = 0.0
    whole_loop: bool = True

    @property
    def proved(self) -> bool:
        """True when the verdict is "proved for every V"."""
        return self.verdict == "proved for every V"

    @property
    def queries(self) -> int:
        """SMT queries asked by the proofs (one per output, or per orbit of outputs)."""
        return sum(len(p.queries) for p in self.proofs)

    @property
    def outputs(self) -> int:
        """Output sequences the proofs covered (the queries a proof without symmetry asks)."""
        return sum(len(p.queries) + p.outputs_by_symmetry for p in self.proofs)

    def line(self) -> str:
        """The verdict in one line (what `verispec prove --all-vocab` prints first)."""
        head = f"{self.method} (L={self.draft_length}, K={self.num_paths})"
        sizes = ", ".join(str(p.vocab_size) for p in self.proofs)
        if self.proved:
            scope = "" if self.whole_loop else "; one iteration from the empty context (the method reads the prefix)"
            return (f"{head}: PROVED for every V: proved at V = {sizes} up to the cutoff V* = {self.cutoff_size} "
                    f"({self.queries} queries for {self.outputs} outputs{scope})")
        if self.verdict == "no cutoff":
            return f"{head}: no cutoff: {self.reason}"
        return f"{head}: {self.verdict.upper()} for every V: {self.reason}"

    def summary(self) -> str:
        """The verdict line, then the criterion's findings and each fixed-size proof."""
        lines = [self.line()]
        lines += [f"  criterion: {c}" for c in self.criterion[1:]]
        lines += [f"  {p.summary().splitlines()[0]}" for p in self.proofs]
        return "\n".join(lines + [f"  total {self.seconds:.2f} s"])

    def to_json(self) -> dict:
        """A JSON-ready dict: the verdict, its line, V*, the criterion and every proof."""
        return {"method": self.method, "draft_length": self.draft_length, "num_paths": self.num_paths,
                "verdict": self.verdict, "line": self.line(), "reason": self.reason,
                "cutoff_size": self.cutoff_size, "criterion": list(self.criterion),
                "equivariant": self.equivariant, "queries": self.queries, "outputs": self.outputs,
                "seconds": self.seconds, "whole_loop": self.whole_loop, "proofs": [p.to_json() for p in self.proofs]}


def prove_all_vocab(method, draft_length: int | None = None, num_paths: int | None = None, timeout: float = 60.0,
                    solvers=None, point_trials: int = POINT_TRIALS) -> CutoffResult:
    """Prove that `method` is lossless for every target/draft pair at EVERY vocabulary size V >= 2.

    First the iteration is explored at V = 2 under a `Watch` (no queries): when the run shows an
    operation the cutoff theorem does not cover, the answer is "no cutoff" with that operation.
    Otherwise V* = `Watch.cutoff_size` (L + 1 named tokens + 2 sign cones of p(z) - q(z)) and the
    method is proved at V = 2, ..., V* (`verispec.formal.prove`, watched again at each size, one query
    per orbit of outputs when the run is equivariant); "proved for every V" needs every size proved
    and the criterion to hold at every size.

    Args:
        method, draft_length, num_paths, solvers, point_trials: as for `prove` (temperature 1, the
            empty context: the theorem's setting).
        timeout: seconds for everything (the check and every size); running out answers "unknown".

    Returns:
        a `CutoffResult`.

    Raises:
        TypeError / ValueError: bad arguments (naming them), as `prove`.
    """
    start, deadline = time.perf_counter(), time.monotonic() + timeout
    resolved, _, L, K, source = check_args(method, 2, draft_length, num_paths, timeout)
    result = CutoffResult(source.label, L, K, "unknown", whole_loop=bool(resolved.model_state_only))
    try:
        _all_sizes(result, method, (L, K), deadline, {"solvers": solvers, "point_trials": point_trials})
    finally:
        result.seconds = time.perf_counter() - start
    return result


def _all_sizes(result, method, sizes, deadline, options) -> None:
    """Fill `result`: the criterion at V = 2, then a watched proof at each V = 2..V*."""
    L, K = sizes
    watch = _criterion(result, method, L, K, deadline)
    if watch is None:
        return
    result.cutoff_size = watch.cutoff_size(L + 1)
    for V in range(2, result.cutoff_size + 1):
        watch = Watch()
        left = deadline - time.monotonic()
        if left <= 0:
            result.reason = f"timeout: the time limit ran out before V = {V} (V* = {result.cutoff_size})"
            return
        proof = prove(method, V, L, K, timeout=left, watch=watch, workers=1, **options)
        result.proofs.append(proof)
        result.criterion = watch.cutoff_reasons(L, K) if watch.iterations else result.criterion
        result.equivariant = result.equivariant and watch.equivariant
        if proof.verdict == "counterexample":
            result.verdict, result.reason = "counterexample", f"at V = {V}: {proof.reason}"
            return
        if watch.iterations and result.criterion:
            result.verdict, result.reason = "no cutoff", f"{result.criterion[0]} (seen at V = {V})"
            return
        if proof.verdict != "proved" or not watch.iterations:  # a proof whose run was not watched certifies nothing
            result.reason = f"at V = {V}: {proof.reason or 'the iteration was not watched'}"
            return
    result.verdict = "proved for every V"


def watched_run(method, vocab_size: int, draft_length: int | None = None, num_paths: int | None = None,
                timeout: float = 60.0) -> Watch:
    """Explore one iteration of `method` at V = `vocab_size` (temperature 1, empty context, then the
    target up to L + 1 tokens, as `prove` does) under a fresh `Watch`, without asking any query.

    Returns the `Watch` (its `equivariant`, `cutoff_reasons`, `cutoff_size`). Raises
    ExplorationTimeout past `timeout` seconds, SymbolicError for a rule that cannot run
    symbolically, TypeError / ValueError for bad arguments (as `prove`)."""
    watch = Watch()
    resolved, V, L, _, _ = check_args(method, vocab_size, draft_length, num_paths, timeout)
    variables, _, (target, draft) = symbolic_models(V, (1, 1))
    with building():
        explore(method_program(watch.method(resolved), target, draft, L + 1), variables,
                time.monotonic() + timeout)
    return watch


def _criterion(result, method, L, K, deadline):
    """Explore the iteration at V = 2 under a fresh `Watch`. Returns the watch when the criterion
    holds; otherwise fills `result` ("no cutoff" or "unknown") and returns None."""
    try:
        watch = watched_run(method, 2, L, K, max(deadline - time.monotonic(), 1e-3))
    except ExplorationTimeout:
        result.reason = "timeout: the watched exploration at V = 2 ran past the time limit"
        return None
    except SymbolicError as err:
        result.verdict, result.reason = "no cutoff", f"float code: the rule cannot be run symbolically ({err})"
        result.criterion = [result.reason]
        return None
    except SymbolicZeroDivision:
        result.reason = "the rule divides by a value that is 0 for some pair (run `verispec prove` at V = 2)"
        return None
    result.criterion, result.equivariant = watch.cutoff_reasons(L, K), watch.equivariant
    if result.criterion:
        result.verdict, result.reason = "no cutoff", result.criterion[0]
        return None
    return watch
