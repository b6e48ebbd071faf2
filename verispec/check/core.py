"""`verispec check`: check methods (built-in or a user's ``pkg.module:attr``) on seeded toy instances.

For each method and instance it enumerates the exact joint law of the first N tokens of the whole
draft-verify loop, compares it with the target's law (total variation) and computes the block
efficiency E[tau] + 1 of one iteration. A method whose TV exceeds the tolerance fails the run,
unless it is declared lossy (``Method.lossy``: typical acceptance, a static ensemble, ...): then it
is reported "lossy" with its TV in float64 and, on the rational twin of each instance
(`models.exact_twin`), as an exact Fraction.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from fractions import Fraction

from ..formal.parallel import map_tasks
from ..reference import exact, methods, models
from ..reference.contract import RuleContractError
from ..reference.methods import Method
from ..reference.randomness import law_is_exact
from ..testing.assertions import default_num_tokens
from ..testing.sweeps import CHECK_VOCAB_SIZES, DEFAULT_BUDGET, TEMPERATURES, Instance, SeededPairs, Sweep

__all__ = ["run_check", "check_method", "merge_results", "MethodResult", "make_instances", "plan_instances",
           "resolve_method", "method_num_tokens", "Instance", "DEFAULT_VOCAB_SIZES", "FLOAT_TOLERANCE", "TEMPERATURES"]

#: TV above this fails a float64 instance (docs/testing.md: exact enumeration, TV <= 1e-12).
FLOAT_TOLERANCE = 1e-12

#: The default vocabulary sizes of `verispec check`: the first gets ``--instances`` random-tree
#: instances, the larger ones fewer i.i.d. instances (`plan_instances`). A bug that needs size s
#: (top-k with k = s, K paths, a tree of width s) is found only by instances with V > s.
DEFAULT_VOCAB_SIZES = CHECK_VOCAB_SIZES


def make_instances(vocab_size: int, count: int, seed: int, rational: bool = False,
                   context_length: int = 3, family: str = "random_tree",
                   max_num_tokens: int | None = None) -> list[Instance]:
    """`count` seeded instances of one size (`verispec.testing.sweeps.SeededPairs`): instance i has
    model seeds 2 (1000 seed + i) and that + 1, temperatures ``TEMPERATURES[i % 4]`` (rational: T in
    {0, 1}) and a seeded random context of `context_length` tokens, so context handling and prompt
    lookup are exercised. ``max_num_tokens`` caps the N a method is checked at (None: its own N).
    """
    design = SeededPairs(count, rational, seed, context_length)
    return design.instances(vocab_size, count, max_num_tokens, smallest=True, family=family)


def plan_instances(vocab_sizes, num_instances: int, seed: int, rational: bool, num_tokens: int,
                   budget: int = DEFAULT_BUDGET) -> list[Instance]:
    """The instances of a check over several vocabulary sizes, smallest first: the instances of
    `Sweep.check` (the smallest size gets ``num_instances`` random-tree instances; each larger V
    i.i.d. instances, ``max(1, min(num_instances, budget // V**N))`` of them, with N capped at the
    largest n >= 1 such that V**n <= budget: `verispec.testing.sweeps.sweep_plan`).

    Args:
        vocab_sizes: an int or a sequence of ints >= 1. num_tokens: the largest N of the methods
            (each instance's ``num_tokens`` is that N, lowered at the sizes where V**N > budget).
        budget: N-token outcome sequences (V**N) per larger vocabulary size.
    """
    return Sweep.check(vocab_sizes, num_instances, seed, rational, budget, num_tokens).instances()


@dataclass
class MethodResult:
    """Aggregate over instances for one method.

    ``status`` is "lossless", "NOT lossless" (a law differs), "lossy" (a rule declared lossy,
    ``Method.lossy``: reported, not failed) or "contract error" (the rule raised or returned a
    malformed result: `verispec.reference.contract.RuleContractError`, whose message is kept in
    ``contract_error``; instances after it are not checked).

    For a declared-lossy rule, ``max_tv_rational`` is the largest TV over the instances in exact
    arithmetic ("a/b", from each instance's exact twin; None when the rule's law is float64) and
    ``lossy_instances`` lists per instance its TV (float64 and "a/b") and block efficiency.
    """

    method: str
    params: dict
    num_tokens: int = 0
    instances: int = 0
    max_tv: float = 0.0
    mean_block_efficiency: float = 0.0
    branches: int = 0
    seconds: float = 0.0
    exact_zero: bool = True
    passed: bool = True
    status: str = "lossless"
    contract_error: str | None = None
    failures: list = field(default_factory=list)
    lossy: bool = False
    max_tv_rational: str | None = None
    lossy_instances: list = field(default_factory=list)


def resolve_method(spec, draft_length: int, num_paths: int) -> Method:
    """A built-in name (built with L and K as `methods.get_compatible`), a ``"pkg.module:attr"``
    user method (see `methods.load`) or a Method.

    Raises:
        ValueError / TypeError: an unknown name or a spec that does not load, naming ``--method``.
    """
    return methods.resolve(spec, "--method", draft_length=draft_length, num_paths=num_paths)


def method_num_tokens(method: Method, num_tokens: int | None) -> int:
    """``num_tokens`` when given, else the method's declared draft depth + 2.

    Raises:
        ValueError: no ``num_tokens`` and the method declares no depth (names ``--num-tokens``).
    """
    if num_tokens is not None:
        return num_tokens
    try:
        return default_num_tokens(method)
    except ValueError as err:
        raise ValueError(f"--num-tokens: {str(err).removeprefix('num_tokens: ')}; "
                         "or pass --num-tokens N") from None


def check_method(spec, instances: list[Instance], draft_length: int, num_paths: int,
                 num_tokens: int | None) -> MethodResult:
    """Enumerate one method on every instance; collect max TV and mean block efficiency.

    Args:
        spec: a built-in name, ``"pkg.module:attr"`` or a Method (see `resolve_method`).
        num_tokens: N, or None for the method's declared draft depth + 2 (`method_num_tokens`).
    """
    method = spec if isinstance(spec, Method) else resolve_method(spec, draft_length, num_paths)
    N = method_num_tokens(method, num_tokens)
    label = spec if isinstance(spec, str) else method.name
    result = MethodResult(method=label, params=dict(method.params), num_tokens=N, lossy=method.lossy)
    if method.lossy:
        result.status = "lossy"
    efficiencies = []
    start = time.perf_counter()
    for inst in instances:
        target, draft = inst.models()
        n = N if inst.num_tokens is None else min(N, inst.num_tokens)
        try:
            enum = exact.output_enumeration(target, draft, method, inst.context, n)
            efficiencies.append(float(exact.block_efficiency(target, draft, method, inst.context)))
            rational_tv = _rational_tv(method, inst, n, enum.law) if method.lossy else None
        except RuleContractError as err:
            result.passed, result.status = False, "contract error"
            result.contract_error = str(err.with_context(instance=inst))
            break
        tv = exact.total_variation(enum.law, exact.target_distribution(target, inst.context, n))
        result.branches += enum.num_branches
        result.max_tv = max(result.max_tv, float(tv))
        if method.lossy:
            _record_lossy(result, inst, tv, rational_tv, efficiencies[-1])
            continue
        # Rational models and a rule in + - * / min max give an exact law: lossless means TV == 0.
        # A rule computing in float (SpecTr's rho bisection) is held to the float tolerance.
        exact_instance = inst.exact and law_is_exact(enum.law)
        result.exact_zero &= (tv == 0) if exact_instance else not inst.exact
        if (exact_instance and tv != 0) or float(tv) > FLOAT_TOLERANCE:
            result.passed, result.status = False, "NOT lossless"
            result.failures.append({"instance": inst.summary(), "tv": float(tv)})
    result.instances = len(efficiencies)
    result.mean_block_efficiency = sum(efficiencies) / len(efficiencies) if efficiencies else float("nan")
    result.seconds = time.perf_counter() - start
    return result


def _rational_tv(method: Method, inst: Instance, n: int, law: dict):
    """The TV of `method` on the exact twin of `inst` (the instance itself when rational) as a
    Fraction, or None when the rule's law is float64 even on exact models."""
    target, draft = (models.exact_twin(m) if m is not None else None for m in inst.models())
    if not inst.exact:
        law = exact.output_distribution(target, draft, method, inst.context, n)
    if not law_is_exact(law):
        return None
    return Fraction(exact.total_variation(law, exact.target_distribution(target, inst.context, n)))


def _record_lossy(result: MethodResult, inst: Instance, tv, rational_tv, efficiency) -> None:
    """Add one instance of a declared-lossy rule: its TVs and efficiency; the largest exact TV."""
    result.exact_zero = False
    result.lossy_instances.append({"instance": inst.index, "vocab_size": inst.vocab_size, "tv": float(tv),
                                   "tv_rational": None if rational_tv is None else str(rational_tv),
                                   "block_efficiency": efficiency})
    result.max_tv_rational = _max_exact_tv(result.lossy_instances)


def _max_exact_tv(lossy_instances: list) -> str | None:
    """The largest exact TV ("a/b") of a declared-lossy rule's instances; None unless every one has one."""
    exact_tvs = [Fraction(r["tv_rational"]) for r in lossy_instances if r["tv_rational"] is not None]
    return str(max(exact_tvs)) if exact_tvs and len(exact_tvs) == len(lossy_instances) else None


def run_check(method_names, vocab_size, draft_length, num_paths, num_instances, seed, *, num_tokens,
              rational, progress=None, budget: int = DEFAULT_BUDGET, workers: int = 1, backend=None,
              cluster=None) -> list[MethodResult]:
    """Check each method (names, ``"pkg.module:attr"`` specs or Methods) on the same instances;
    `progress(name)` is called after each method. ``num_tokens`` None: each method's depth + 2.

    Args:
        vocab_size: one V (``num_instances`` random-tree instances) or a sequence of sizes (see
            `plan_instances`: fewer, i.i.d. instances at the larger ones, within ``budget``).
        workers, backend, cluster: the (method, instance) pairs are independent, so with
            workers > 1 (or a cluster backend) each pair is one task of `verispec.formal.parallel.
            map_tasks` (joblib: loky processes by default, "dask" or "ray" at ``cluster``); the
            results are merged in instance order (`merge_results`), equal to the serial ones but
            for ``seconds`` (then the sum of the tasks' times). A worker resolves a name itself (a
            ``pkg.module:attr`` rule must be importable there); a Method object is pickled to it.

    Raises:
        ValueError / TypeError: a method spec that does not resolve, or a method without a declared
            depth when ``num_tokens`` is None (raised before any enumeration); bad workers, backend
            or cluster (naming the argument).
        ImportError: workers > 1 without joblib (``pip install verispec[prove]``).
    """
    resolved = [(spec, spec if isinstance(spec, Method) else resolve_method(spec, draft_length, num_paths))
                for spec in method_names]
    largest_n = max(method_num_tokens(method, num_tokens) for _, method in resolved)
    instances = plan_instances(vocab_size, num_instances, seed, rational, largest_n, budget)
    if workers == 1 and backend in (None, "loky"):  # serial: each method over all its instances at once
        tasks = [(method, instances, draft_length, num_paths, num_tokens) for _, method in resolved]
    else:
        tasks = [(spec if isinstance(spec, str) else method, [inst], draft_length, num_paths, num_tokens)
                 for spec, method in resolved for inst in instances]
    partials = map_tasks(check_method, tasks, workers, backend, cluster)
    per_method = len(partials) // len(resolved)
    results = []
    for number, (spec, method) in enumerate(resolved):
        result = merge_results(partials[number * per_method:(number + 1) * per_method])
        result.method = spec if isinstance(spec, str) else method.name
        results.append(result)
        if progress is not None:
            progress(result.method)
    return results


def merge_results(parts: list[MethodResult]) -> MethodResult:
    """One method's result from its results on consecutive runs of its instances (one run, or one
    instance per run), in instance order: what `check_method` gives on all of them at once
    (``seconds`` summed), stopping at the first contract error as it does."""
    first = parts[0]
    out = MethodResult(method=first.method, params=first.params, num_tokens=first.num_tokens, lossy=first.lossy,
                       status="lossy" if first.lossy else "lossless")
    means = []  # (mean block efficiency, instances) of each part that finished some
    for part in parts:
        out.branches += part.branches
        out.max_tv = max(out.max_tv, part.max_tv)
        out.exact_zero &= part.exact_zero
        out.failures += part.failures
        out.seconds += part.seconds
        out.instances += part.instances
        out.lossy_instances += part.lossy_instances
        if part.instances:
            means.append((part.mean_block_efficiency, part.instances))
        if not part.passed:
            out.passed, out.status, out.contract_error = False, part.status, part.contract_error
        if part.status == "contract error":
            break
    if out.lossy:
        out.max_tv_rational = _max_exact_tv(out.lossy_instances)
    if len(means) == 1:
        out.mean_block_efficiency = means[0][0]
    else:  # one instance per part: the serial sum, in the same order, over the same count
        out.mean_block_efficiency = (sum(mean * count for mean, count in means) / out.instances
                                     if means else float("nan"))
    return out
