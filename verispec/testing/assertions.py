"""`assert_lossless` and `assert_not_worse`: exact checks for speculative-decoding methods.

    from verispec.testing import assert_lossless
    assert_lossless(my_method)                       # a deterministic sweep of small instances
    assert_lossless(my_method, target=p, draft=q)    # one instance

"Lossless" is the definition of docs/architecture.md: the joint law of the first N tokens emitted by the
whole draft-verify loop equals the target's. Both laws are computed exactly by enumeration
(`verispec.reference.exact`); on rational instances a lossless rule built from + - * / min max gives
TV == 0 exactly, so there are no tolerances to tune and no false alarms.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from fractions import Fraction
from numbers import Real
from typing import Iterable

import numpy as np

from ..reference.contract import RuleContractError
from ..reference.exact import expected_accepted_length, output_distribution, target_distribution, total_variation
from ..reference.methods import Method
from ..reference.models import check_pair, check_positive_int, check_prefix
from ..reference.randomness import law_is_exact
from ._internal.instances import instance_items
from .sweeps import (DEFAULT_BUDGET, DEFAULT_FAMILIES, DEFAULT_VOCAB_SIZES, FULL_GRID_MAX_VOCAB, Instance, Sweep,
                     check_exact, check_families, check_temperatures, check_vocab_sizes, describe_counts, grid_sweep,
                     sweep, sweep_plan)

__all__ = ["assert_lossless", "assert_not_worse", "sweep", "sweep_plan", "default_num_tokens", "LosslessnessError",
           "LosslessReport", "NotWorseError", "RuleContractError", "DEFAULT_FAMILIES", "DEFAULT_VOCAB_SIZES",
           "DEFAULT_BUDGET", "FULL_GRID_MAX_VOCAB"]

_TOP_OUTCOMES = 6


class LosslessnessError(AssertionError):
    """Raised by `assert_lossless`: the smallest counterexample found.

    Attributes:
        method: the Method under test.
        instance: the `Instance` (with ``num_tokens`` = the smallest failing N).
        tv: TV(method law, target law) (a Fraction for exact laws; None when exact=True met an inexact law).
        law, target_law: the two laws at that N ({N-token tuple: probability}).
        exact: True when both laws are exact rationals.
    """

    def __init__(self, message, method=None, instance=None, tv=None, law=None, target_law=None, exact=False):
        super().__init__(message)
        self.method, self.instance, self.tv = method, instance, tv
        self.law, self.target_law, self.exact = law, target_law, exact


class NotWorseError(AssertionError):
    """Raised by `assert_not_worse`: an instance where the method's E[tau] is below the baseline's.

    Attributes: instance, value (method E[tau]), baseline_value, gap (= baseline_value - value).
    """

    def __init__(self, message, instance=None, value=None, baseline_value=None):
        super().__init__(message)
        self.instance, self.value, self.baseline_value = instance, value, baseline_value
        self.gap = None if value is None else baseline_value - value


@dataclass(frozen=True)
class LosslessReport:
    """What `assert_lossless` checked when it passed.

    Attributes:
        method: repr of the method.
        num_instances: how many instances were checked.
        num_exact: how many of them were checked in exact rational arithmetic (TV == 0 exactly).
        max_tv: the largest TV seen among the float64 instances (0.0 if none).
        vocab_sizes, max_num_tokens: the range covered.
        instances_per_vocab_size: ((V, number of instances), ...) in V order.
        instances: one line per instance checked (`Instance.line()`), smallest first: the same
            description `verispec check --list-instances` prints for the same sweep.
    """

    method: str
    num_instances: int
    num_exact: int
    max_tv: float
    vocab_sizes: tuple
    max_num_tokens: int
    instances_per_vocab_size: tuple = ()
    instances: tuple = ()

    def __str__(self):
        counts = "+".join(str(n) for _, n in self.instances_per_vocab_size)
        return (f"{self.method} is lossless on {self.num_instances} instances "
                f"(V in {list(self.vocab_sizes)}" + (f": {counts}" if counts else "")
                + f", N <= {self.max_num_tokens}; {self.num_exact} exact with TV == 0, "
                f"max float64 TV {self.max_tv:.1e})")


def _check_method(method, name="method") -> Method:
    if not isinstance(method, Method):
        raise TypeError(f"{name}: expected a verispec.reference.methods.Method, got {type(method).__name__}")
    return method


def _check_tol(tol):
    if isinstance(tol, bool) or not isinstance(tol, Real):
        raise TypeError(f"tol: expected a number, got {type(tol).__name__}")
    if not (math.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol: must be finite and >= 0, got {tol!r}")
    return tol


# --------------------------------------------------------------------------------------------------
# laws and reports

def _marginal(law, n):
    out = {}
    for seq, prob in law.items():
        out[seq[:n]] = out.get(seq[:n], 0) + prob
    return out


def _is_zero_tv(tv, tol, both_exact):
    return tv == 0 if both_exact else float(tv) <= tol


def _fmt_prob(x):
    if isinstance(x, Fraction):
        return f"{x} (= {float(x):.6g})" if x.denominator != 1 else str(x)
    return f"{float(x):.6g}"


def _law_table(law, ref, limit=_TOP_OUTCOMES):
    keys = sorted((k for k in set(law) | set(ref) if law.get(k, 0) != ref.get(k, 0)),
                  key=lambda k: (-abs(float(law.get(k, 0) - ref.get(k, 0))), k))
    lines = [f"    {'outcome':<16} {'method law':>28} {'target law':>28} {'difference':>12}"]
    for k in keys[:limit]:
        a, b = law.get(k, 0), ref.get(k, 0)
        lines.append(f"    {str(k):<16} {_fmt_prob(a):>28} {_fmt_prob(b):>28} {float(a - b):>+12.4g}")
    if len(keys) > limit:
        lines.append(f"    ... {len(keys) - limit} more differing outcomes")
    return "\n".join(lines)


@dataclass(frozen=True)
class _Laws:
    """The method's and the target's law of the first n tokens on one instance, their TV and
    whether both are exact rationals."""

    n: int
    law: dict
    target_law: dict
    tv: object
    exact: bool


def _evaluate(method, inst: Instance, tol, exact_required):
    """Compare the laws at N = inst.num_tokens -> (the laws at N, the laws at the SMALLEST failing
    n <= N or None; laws at smaller n are marginals of the law at N). With `exact_required` and an
    inexact law, the laws at N with tv None."""
    law = output_distribution(inst.target, inst.draft, method, inst.context, inst.num_tokens)
    ref = target_distribution(inst.target, inst.context, inst.num_tokens)
    both_exact = law_is_exact(law) and law_is_exact(ref)
    if exact_required and not both_exact:
        return _Laws(inst.num_tokens, law, ref, None, False), None
    full = _Laws(inst.num_tokens, law, ref, total_variation(law, ref), both_exact)
    if _is_zero_tv(full.tv, tol, both_exact):
        return full, None
    for n in range(1, inst.num_tokens + 1):
        law_n, ref_n = (law, ref) if n == inst.num_tokens else (_marginal(law, n), _marginal(ref, n))
        tv_n = total_variation(law_n, ref_n)
        if not _is_zero_tv(tv_n, tol, both_exact):
            return full, _Laws(n, law_n, ref_n, tv_n, both_exact)
    raise AssertionError("unreachable: the full law differs")  # pragma: no cover


def _failure_message(method, inst, failure: _Laws, where: str, max_n: int) -> str:
    """The report of the smallest counterexample: `failure` on `inst` (its N already the failing
    n), `where` it stands in the sweep, the N checked."""
    arith = ("exact rational arithmetic: any TV > 0 is a real difference" if failure.exact
             else "float64 arithmetic")
    tv = failure.tv
    tv_text = f"{tv} = {float(tv):.6g}" if isinstance(tv, Fraction) else f"{float(tv):.6g}"
    head = f"{method!r} is NOT lossless: {where}."
    if failure.n < max_n:
        head += f" The laws already differ at num_tokens={failure.n} (checked up to {max_n})."
    return "\n".join([
        head,
        f"  V = {inst.vocab_size}, N = {failure.n}",
        *("  " + line for line in inst.describe().splitlines()),
        f"  TV(method law, target law) = {tv_text}  ({arith})",
        "  top differing outcomes (joint law of the first N emitted tokens):",
        _law_table(failure.law, failure.target_law),
    ])


def _run(method, inst, tol, exact_required, where):
    """Evaluate one instance; raise LosslessnessError on failure (`where`: how the report places the
    instance); return (tv, exact)."""
    try:
        full, failure = _evaluate(method, inst, tol, exact_required)
    except RuleContractError as err:  # a broken rule has no law to compare: not a lossless verdict
        raise err.with_context(instance=inst) from err.__cause__
    if full.tv is None:
        raise LosslessnessError(
            f"{method!r}: exact=True but the output law is not exact rational (the rule used float64 "
            f"arithmetic somewhere) on instance:\n" + "\n".join("  " + l for l in inst.describe().splitlines()),
            method=method, instance=inst, law=full.law, target_law=full.target_law)
    if failure is None:
        return full.tv, full.exact
    small = dataclasses.replace(inst, num_tokens=failure.n)
    raise LosslessnessError(_failure_message(method, small, failure, where, inst.num_tokens),
                            method=method, instance=small, tv=failure.tv, law=failure.law,
                            target_law=failure.target_law, exact=failure.exact)


def default_num_tokens(method) -> int:
    """N = L + 2 for a method of declared draft depth L (`Method.draft_length`: its params or its
    drafter's): every emitted token of a full iteration plus the first token of the next one, so
    bonus-token bugs show.

    Raises:
        ValueError: the method declares no draft depth (e.g. a plain-function drafter); the message
            says to pass ``num_tokens`` or declare the depth. No default N is guessed: a depth-3
            tree checked with N = 4 would leave its second iteration unchecked.
    """
    L = method.draft_length
    if isinstance(L, (int, np.integer)) and not isinstance(L, bool) and L >= 0:  # 0: no draft (target-only)
        return int(L) + 2
    raise ValueError(
        f"num_tokens: {method!r} declares no draft depth (got {L!r}), so the number of tokens N to check "
        "cannot be derived; pass num_tokens=N (at least the longest draft + 2), or declare the depth: "
        "Method(..., params={'draft_length': L}), a verispec Drafter, or an attribute "
        "my_drafter.draft_length = L on a plain-function drafter")


def assert_lossless(method, *, target=None, draft=None, context=(), num_tokens=None,
                    vocab_sizes=DEFAULT_VOCAB_SIZES, temperatures=(1, 0, 0.5),
                    instances: Iterable[Instance] | None = None, seed=0, tol=1e-12, exact=None,
                    families=DEFAULT_FAMILIES, budget=DEFAULT_BUDGET, sweep: Sweep | None = None) -> LosslessReport:
    """Assert that ``method`` is lossless: its output law equals the target's, exactly.

    One instance (pass ``target``, and ``draft`` unless the method drafts without one), or a sweep
    (no ``target``): `sweep`'s deterministic instances, or your own, checked from the smallest up;
    on failure the SMALLEST counterexample (least V, then N, then model complexity) is raised as a
    `LosslessnessError` carrying the models as copy-pasteable reprs, the context, N, the TV and the
    outcomes where the laws differ most (docs/testing.md). Cost is exponential in N; the
    random-tree family dominates (``families=("iid", "markov")`` for quick checks).

    Args:
        method: a `verispec.reference.methods.Method`.
        target, draft: LanguageModels over one vocabulary (single-instance mode).
        context: tuple of token ids (also used by every sweep instance).
        num_tokens: N >= 1; default ``L + 2`` (`default_num_tokens`: two iterations, so bonus-token
            bugs show); needed when the method declares no draft depth.
        vocab_sizes, temperatures, families, seed, budget: the default sweep (`sweep`): sizes 2..6
            (a bug that needs size s shows only above s); T = 1, 0, 0.5 on both models (0 = greedy);
            i.i.d., Markov and random-tree pairs derived from seed (int >= 0); at most budget
            N-token outcomes V**N per size above 3 (1000: 9, 9, 3, 1, 1 instances at V = 2..6).
        instances: your own `Instance`s (checked smallest first).
        tol: the TV tolerance for float64 laws (exact laws must have TV == 0).
        exact: None (default) -> rational sweep models where possible, TV == 0 demanded for exact
            laws and TV <= tol for float64 ones; True -> every law must be exact rational with
            TV == 0 (float temperatures rejected); False -> float64 sweep models.
        sweep: a planned `Sweep` (`verispec.testing.sweeps`) instead of the family grid of the
            arguments above (left at their defaults), e.g. ``Sweep.check(...)``: what `verispec
            check` runs with the same flags. At ``num_tokens`` when it leaves N open.

    Returns:
        a `LosslessReport` (instances checked, one line each; how many were exact; the largest float64 TV).

    Raises:
        LosslessnessError (AssertionError): the laws differ on an instance (only a well-formed rule
            whose law differs raises it).
        RuleContractError (TypeError, ValueError): the rule broke its contract on an instance (it
            raised, emitted no correction/bonus token, a token outside the vocabulary or a path not
            in the draft, or has the wrong signature); the message names the instance and the draws.
        TypeError / ValueError: invalid arguments, naming the argument (``num_tokens`` when the
            method declares no draft depth and none was given).
    """
    method, tol, exact = _check_method(method), _check_tol(tol), check_exact(exact)
    grid = dict(vocab_sizes=vocab_sizes, temperatures=temperatures, context=context,
                seed=check_positive_int(seed, "seed", 0), families=families, budget=budget)
    N = default_num_tokens(method) if num_tokens is None else check_positive_int(num_tokens, "num_tokens", 1)
    if target is None and instances is None:
        todo = _planned(sweep, grid, N, exact, draft)
    elif sweep is not None:
        raise ValueError("sweep: pass either sweep or target/draft or instances, not several")
    else:
        todo = _instances_to_check(target, draft, context, instances, N, exact)
    failure, num_exact, max_tv = _smallest_failure(method, todo, tol, exact, target is not None)
    if failure is not None:
        raise failure
    counts = describe_counts(todo)
    return LosslessReport(repr(method), len(todo), num_exact, max_tv, tuple(V for V, _ in counts),
                          max(inst.num_tokens for inst in todo), counts, tuple(inst.line() for inst in todo))


def _planned(sweep: Sweep | None, grid: dict, N: int, exact, draft) -> list[Instance]:
    """The instances of `sweep` (at N when it leaves N open), or of the family grid that `grid`'s
    arguments (`grid_sweep`'s) describe. ValueError for a lone draft, or for a sweep given with
    grid arguments other than their defaults (they would describe another sweep)."""
    if draft is not None:
        raise ValueError("target: pass target together with draft (draft alone is not an instance)")
    if sweep is None:
        return grid_sweep(num_tokens=N, exact=exact, **grid).instances()
    if not isinstance(sweep, Sweep):
        raise TypeError(f"sweep: expected a verispec.testing.sweeps.Sweep, got {type(sweep).__name__}")
    given = {"vocab_sizes": check_vocab_sizes(grid["vocab_sizes"]) != DEFAULT_VOCAB_SIZES,
             "temperatures": check_temperatures(grid["temperatures"]) != (1, 0, 0.5), "seed": grid["seed"] != 0,
             "families": check_families(grid["families"]) != DEFAULT_FAMILIES,
             "budget": grid["budget"] != DEFAULT_BUDGET, "context": tuple(grid["context"]) != ()}
    clash = [name for name, differs in given.items() if differs]
    if clash:
        raise ValueError(f"sweep: a planned sweep fixes its own instances; leave out {', '.join(clash)}")
    return (sweep if sweep.num_tokens is not None else sweep.with_num_tokens(N)).instances()


def _instances_to_check(target, draft, context, instances, N, exact) -> list[Instance]:
    """`assert_lossless`'s given instances: the target/draft pair or the user's `instances`
    (ValueError when the arguments mix them or exact=True meets float models)."""
    if target is not None:
        if instances is not None:
            raise ValueError("instances: pass either target/draft or instances, not both")
        check_pair(target, draft)
        context = check_prefix(context, target.vocab_size, "context")
        inst = Instance(target, draft, context, N, label="given instance")
        if exact and not inst.exact:
            raise ValueError("exact: exact=True needs rational target and draft models (model.exact is False)")
        return [inst]
    if draft is not None:
        raise ValueError("target: pass target together with draft (draft alone is not an instance)")
    return _user_instances(instances)


def _smallest_failure(method, todo, tol, exact, explicit):
    """Run `todo` (smallest first) -> (smallest LosslessnessError or None, number of exact laws,
    largest float64 TV). Skips instances that cannot beat the failure found so far; an inexact law
    under exact=True is raised at once."""
    num_exact, max_tv = 0, 0.0
    failure: LosslessnessError | None = None
    best_key = None
    for i, inst in enumerate(todo, start=1):
        if failure is not None:
            if inst.vocab_size > failure.instance.vocab_size:
                break  # a counterexample at a smaller V always wins
            if failure.instance.num_tokens == 1 and inst.complexity >= failure.instance.complexity:
                continue  # cannot beat (V, N = 1, complexity)
        try:
            where = ("the given instance" if explicit else f"smallest counterexample, instance {i} of {len(todo)} "
                     "in the sweep ordered by V, N, model complexity")
            tv, both_exact = _run(method, inst, tol, bool(exact), where)
        except LosslessnessError as err:
            if err.tv is None:  # an inexact law under exact=True: report at once
                raise
            key = (err.instance.vocab_size, err.instance.num_tokens, err.instance.complexity, len(err.instance.context))
            if best_key is None or key < best_key:
                failure, best_key = err, key
            continue
        if both_exact:
            num_exact += 1
        else:
            max_tv = max(max_tv, float(tv))
    return failure, num_exact, max_tv


def _user_instances(instances) -> list[Instance]:
    """A user's `instances` argument, checked and sorted smallest first (TypeError / ValueError)."""
    if isinstance(instances, Instance):
        instances = [instances]
    try:
        todo = list(instances)
    except TypeError:
        raise TypeError(f"instances: expected an iterable of Instance, got {type(instances).__name__}") from None
    for i, inst in instance_items(todo):
        check_pair(inst.target, inst.draft)
        check_prefix(inst.context, inst.vocab_size, f"instances[{i}].context")
    todo.sort(key=Instance.sort_key)
    return todo


def assert_not_worse(method, baseline, *, target=None, draft=None, context=(), vocab_sizes=(2, 3),
                     temperatures=(1, 0.5), instances: Iterable[Instance] | None = None, seed=0, tol=1e-12,
                     families=DEFAULT_FAMILIES):
    """Assert E[tau](method) >= E[tau](baseline) - tol on every instance (one iteration from context).

    E[tau], the expected number of accepted draft tokens per target call, is computed exactly with
    `verispec.reference.exact.expected_accepted_length`. Use it to catch lossless-but-weaker rules,
    e.g. block verification silently replaced by token verification (vllm-ascend #7807). Instances
    as in `assert_lossless` (num_tokens is irrelevant here).

    Returns:
        list of (instance, method E[tau], baseline E[tau]).

    Raises:
        NotWorseError (AssertionError): the first instance (smallest first) where the method is worse.
        TypeError / ValueError: invalid arguments, naming the argument.
    """
    method = _check_method(method)
    baseline = _check_method(baseline, "baseline")
    tol = _check_tol(tol)
    seed = check_positive_int(seed, "seed", 0)
    if target is not None:
        check_pair(target, draft)
        todo = [Instance(target, draft, check_prefix(context, target.vocab_size, "context"), 1,
                         label="given instance")]
    elif instances is not None:
        todo = _user_instances(instances)
    else:
        todo = sweep(vocab_sizes, temperatures, 1, context, seed, families, None)
    results = []
    for inst in todo:
        try:
            value = expected_accepted_length(inst.target, inst.draft, method, inst.context)
            base = expected_accepted_length(inst.target, inst.draft, baseline, inst.context)
        except RuleContractError as err:
            raise err.with_context(instance=inst) from err.__cause__
        if float(value) < float(base) - tol:
            raise NotWorseError(
                f"{method!r} has a LOWER expected accepted length than {baseline!r}:\n"
                f"  E[tau] = {_fmt_prob(value)} vs baseline {_fmt_prob(base)} (gap {float(base - value):.6g})\n"
                + "\n".join("  " + line for line in inst.describe().splitlines()),
                instance=inst, value=value, baseline_value=base)
        results.append((inst, value, base))
    return results
