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

import math
from dataclasses import dataclass
from fractions import Fraction
from numbers import Real
from typing import Iterable

import numpy as np

from ..reference import models
from ..reference.contract import RuleContractError
from ..reference.exact import expected_accepted_length, output_distribution, target_distribution, total_variation
from ..reference.methods import Method
from ..reference.models import check_pair, check_positive_int, check_prefix
from ..reference.randomness import law_is_exact
from ._internal.arguments import as_tuple
from ._internal.instances import instance_items
from .strategies import Instance, check_vocab_sizes

__all__ = ["assert_lossless", "assert_not_worse", "sweep", "sweep_plan", "default_num_tokens", "LosslessnessError",
           "LosslessReport", "NotWorseError", "RuleContractError", "DEFAULT_FAMILIES", "DEFAULT_VOCAB_SIZES",
           "DEFAULT_BUDGET"]

#: Model families of the default sweep, simplest first.
DEFAULT_FAMILIES = ("iid", "markov", "random_tree")

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
    """

    method: str
    num_instances: int
    num_exact: int
    max_tv: float
    vocab_sizes: tuple
    max_num_tokens: int
    instances_per_vocab_size: tuple = ()

    def __str__(self):
        counts = "+".join(str(n) for _, n in self.instances_per_vocab_size)
        return (f"{self.method} is lossless on {self.num_instances} instances "
                f"(V in {list(self.vocab_sizes)}" + (f": {counts}" if counts else "")
                + f", N <= {self.max_num_tokens}; {self.num_exact} exact with TV == 0, "
                f"max float64 TV {self.max_tv:.1e})")


# --------------------------------------------------------------------------------------------------
# argument checks

def _check_method(method, name="method") -> Method:
    if not isinstance(method, Method):
        raise TypeError(f"{name}: expected a verispec.reference.methods.Method, got {type(method).__name__}")
    return method


def _check_temperatures(temperatures) -> tuple:
    temps = as_tuple(temperatures, "temperatures", lambda t: isinstance(t, Real) and not isinstance(t, bool),
                     "a sequence of numbers", "at least one temperature is needed (1 = no temperature wrapper)")
    out = []
    for t in temps:
        if isinstance(t, bool) or not isinstance(t, Real):
            raise TypeError(f"temperatures: expected numbers, got {t!r}")
        if not (math.isfinite(t) and t >= 0):
            raise ValueError(f"temperatures: every temperature must be finite and >= 0, got {t!r}")
        if t not in out:
            out.append(t)
    return tuple(out)


def _check_tol(tol):
    if isinstance(tol, bool) or not isinstance(tol, Real):
        raise TypeError(f"tol: expected a number, got {type(tol).__name__}")
    if not (math.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol: must be finite and >= 0, got {tol!r}")
    return tol


def _check_exact(exact):
    if exact is not None and not isinstance(exact, (bool, np.bool_)):
        raise TypeError(f"exact: expected None, True or False, got {type(exact).__name__}")
    return exact if exact is None else bool(exact)


def _check_families(families):
    if isinstance(families, str):
        families = (families,)
    families = tuple(families)
    if not families:
        raise ValueError("families: at least one family is needed")
    for fam in families:
        if fam not in DEFAULT_FAMILIES:
            raise ValueError(f"families: unknown family {fam!r}; the sweep knows {', '.join(DEFAULT_FAMILIES)}")
    return families


# --------------------------------------------------------------------------------------------------
# the deterministic sweep

def _seed_for(seed, *keys) -> int:
    """A numpy seed derived from the user's seed and the instance coordinates."""
    return int(np.random.SeedSequence([seed, *keys]).generate_state(1)[0])


def _sweep_pair(family, V, seed, rational):
    kw = dict(rational=rational, denominator=32)
    if family == "iid":
        rng = np.random.default_rng(_seed_for(seed, V, 0))
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        return models.iid(p, **kw), models.iid(q, **kw)
    if family == "markov":
        return (models.random_markov(V, _seed_for(seed, V, 1, 0), **kw),
                models.random_markov(V, _seed_for(seed, V, 1, 1), **kw))
    return (models.random_tree(V, _seed_for(seed, V, 2, 0), **kw),
            models.random_tree(V, _seed_for(seed, V, 2, 1), **kw))


#: The default sweep's vocabulary sizes: a bug that needs size s (a top-k draft with k = s, K draft
#: paths, a tree of width s) is found only by instances with V > s, so the sweep goes past 2-3.
DEFAULT_VOCAB_SIZES = (2, 3, 4, 5, 6)

#: Vocabulary sizes up to this one are always checked on the full grid (every family x temperature).
FULL_GRID_MAX_VOCAB = 3

#: The default cost budget per larger vocabulary size, in N-token outcome sequences (V ** N).
DEFAULT_BUDGET = 1000


def _grid_order(families, temps):
    """(family, temperature) pairs in a Latin-square order: every prefix of the list spreads over
    families and temperatures (i.i.d./T=1 first, then Markov at the next T, random tree at the
    next...), so a size that affords few instances still gets varied ones."""
    F, T = len(families), len(temps)
    return [(families[i % F], temps[(i % F + i // F) % T]) for i in range(F * T)]


def sweep_plan(vocab_sizes=DEFAULT_VOCAB_SIZES, num_tokens=4, num_cells=9, budget=DEFAULT_BUDGET):
    """How many instances, and with which N, the sweep checks at each vocabulary size.

    Sizes V <= 3 (`FULL_GRID_MAX_VOCAB`) get the full grid (``num_cells`` = families x temperatures)
    at N = ``num_tokens``. A larger V gets N_V = N when V**N <= budget, else the largest n >= 1 with
    V**n <= budget (at least 1), and max(1, min(num_cells, budget // V**N)) instances. The cost of
    an exact check grows like the number of N-token outcomes V**N, so ``budget`` bounds the work
    spent per larger size while every size is reached.

    Returns:
        {V: (instances, N_V)}, V ascending.
    """
    sizes = check_vocab_sizes(vocab_sizes)
    N = check_positive_int(num_tokens, "num_tokens", 1)
    budget = _check_budget(budget)
    plan = {}
    for V in sizes:
        if V <= FULL_GRID_MAX_VOCAB:
            plan[V] = (num_cells, N)
            continue
        n = N
        while n > 1 and V ** n > budget:
            n -= 1
        plan[V] = (max(1, min(num_cells, budget // V ** N)), n)
    return plan


def _check_budget(budget):
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)):
        raise TypeError(f"budget: expected an int (N-token outcomes per vocabulary size), got {type(budget).__name__}")
    if budget < 1:
        raise ValueError(f"budget: must be >= 1, got {budget}")
    return int(budget)


def sweep(vocab_sizes=DEFAULT_VOCAB_SIZES, temperatures=(1, 0, 0.5), num_tokens=4, context=(), seed=0,
          families=DEFAULT_FAMILIES, exact=None, budget=DEFAULT_BUDGET) -> list[Instance]:
    """The deterministic instances `assert_lossless` checks by default, smallest first.

    For every V in ``vocab_sizes`` and every family (i.i.d., Markov, random tree — in that order of
    complexity) one independent target/draft pair is derived from ``seed``; each pair is checked
    at temperatures from ``temperatures`` (the same T wraps target and draft; T = 1 adds no
    wrapper). Models are rational (k/32) unless ``exact is False``; a temperature other than 0 and
    1 makes the tempered models float64. Order: V, then N, then family, then temperature.

    Size-aware: a bug that needs size s — a top-k draft with k = s, K draft paths, a tree of width
    s — is found only by instances LARGER than s (a top-3 draft of a 3-token vocabulary is the
    whole q). So the default sizes go up to 6, and the cost is kept affordable by `sweep_plan`:
    V <= 3 gets every family at every temperature; a larger V gets budget // V**N instances (at
    least 1), picked in an order that varies family and temperature, with N lowered at the sizes
    where V**N exceeds ``budget``. Default (N = 4): 9, 9, 3, 1, 1 instances at V = 2..6 (N = 3 at
    V = 6).

    Args:
        vocab_sizes: ints >= 1 (default 2..6). temperatures: numbers >= 0. num_tokens: N >= 1.
        context: tuple of token ids, valid for every V. seed: int >= 0.
        families: a subset of ("iid", "markov", "random_tree").
        exact: None/True -> rational models; False -> float64 models. With True, temperatures
            other than 0 and 1 are rejected (they cannot be rational).
        budget: int >= 1, N-token outcome sequences (V**N) per vocabulary size above 3.
    """
    sizes = check_vocab_sizes(vocab_sizes)
    temps = _check_temperatures(temperatures)
    N = check_positive_int(num_tokens, "num_tokens", 1)
    seed = check_positive_int(seed, "seed", 0)
    families = _check_families(families)
    exact = _check_exact(exact)
    if exact and any(t not in (0, 1) for t in temps):
        raise ValueError(f"temperatures: exact=True needs temperatures in {{0, 1}} (a tempered model at "
                         f"T = {[t for t in temps if t not in (0, 1)][0]} is float64); got {list(temps)}")
    plan = sweep_plan(sizes, N, len(families) * len(temps), budget)
    out = []
    for V, (count, n_V) in plan.items():
        ctx = check_prefix(context, V, "context")
        pairs = {family: _sweep_pair(family, V, seed, rational=exact is not False) for family in families}
        for family, T in _grid_order(families, temps)[:count]:
            target, draft = pairs[family]
            t_model, d_model = (target, draft) if T == 1 else (models.temperature(target, T),
                                                               models.temperature(draft, T))
            out.append(Instance(t_model, d_model, ctx, n_V,
                                complexity=families.index(family) * len(temps) + temps.index(T),
                                label=f"{family} pair, T={T}"))
    out.sort(key=Instance.sort_key)
    return out


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


def _evaluate(method, inst: Instance, tol, exact_required):
    """Compare the laws at N = inst.num_tokens; returns None or (n, law_n, ref_n, tv_n, exact) at the
    SMALLEST failing n <= N (laws at smaller n are marginals of the law at N)."""
    law = output_distribution(inst.target, inst.draft, method, inst.context, inst.num_tokens)
    ref = target_distribution(inst.target, inst.context, inst.num_tokens)
    both_exact = law_is_exact(law) and law_is_exact(ref)
    if exact_required and not both_exact:
        return ("inexact", law, ref)
    tv = total_variation(law, ref)
    if _is_zero_tv(tv, tol, both_exact):
        return None, tv, both_exact
    for n in range(1, inst.num_tokens + 1):
        law_n, ref_n = (law, ref) if n == inst.num_tokens else (_marginal(law, n), _marginal(ref, n))
        tv_n = total_variation(law_n, ref_n)
        if not _is_zero_tv(tv_n, tol, both_exact):
            return (n, law_n, ref_n, tv_n, both_exact), tv, both_exact
    raise AssertionError("unreachable: the full law differs")  # pragma: no cover


def _failure_message(method, inst, n, law, ref, tv, both_exact, checked, total, explicit, max_n):
    arith = ("exact rational arithmetic: any TV > 0 is a real difference" if both_exact
             else "float64 arithmetic")
    tv_text = f"{tv} = {float(tv):.6g}" if isinstance(tv, Fraction) else f"{float(tv):.6g}"
    where = ("the given instance" if explicit
             else f"smallest counterexample, instance {checked} of {total} in the sweep ordered by V, N, model complexity")
    head = f"{method!r} is NOT lossless: {where}."
    if n < max_n:
        head += f" The laws already differ at num_tokens={n} (checked up to {max_n})."
    return "\n".join([
        head,
        f"  V = {inst.vocab_size}, N = {n}",
        *("  " + line for line in inst.describe().splitlines()),
        f"  TV(method law, target law) = {tv_text}  ({arith})",
        "  top differing outcomes (joint law of the first N emitted tokens):",
        _law_table(law, ref),
    ])


def _run(method, inst, tol, exact_required, checked, total, explicit):
    """Evaluate one instance; raise LosslessnessError on failure; return (tv, exact)."""
    try:
        result = _evaluate(method, inst, tol, exact_required)
    except RuleContractError as err:  # a broken rule has no law to compare: not a lossless verdict
        raise err.with_context(instance=inst) from err.__cause__
    if result[0] == "inexact":
        _, law, ref = result
        raise LosslessnessError(
            f"{method!r}: exact=True but the output law is not exact rational (the rule used float64 "
            f"arithmetic somewhere) on instance:\n" + "\n".join("  " + l for l in inst.describe().splitlines()),
            method=method, instance=inst, law=law, target_law=ref)
    failure, tv, both_exact = result
    if failure is None:
        return tv, both_exact
    n, law_n, ref_n, tv_n, both_exact = failure
    small = Instance(inst.target, inst.draft, inst.context, n, inst.complexity, inst.label)
    raise LosslessnessError(_failure_message(method, small, n, law_n, ref_n, tv_n, both_exact, checked, total,
                                             explicit, inst.num_tokens),
                            method=method, instance=small, tv=tv_n, law=law_n, target_law=ref_n,
                            exact=both_exact)


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
                    families=DEFAULT_FAMILIES, budget=DEFAULT_BUDGET) -> LosslessReport:
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
        vocab_sizes: the sweep's vocabulary sizes (default 2..6): a bug that needs size s (top-k
            with k = s, K paths) shows only at sizes above s.
        budget: the sweep's cost cap per vocabulary size above 3, in N-token outcomes V**N
            (default 1000: 9, 9, 3, 1, 1 instances at V = 2..6); see `sweep_plan`.
        temperatures: the sweep's temperatures of target and draft (0 = greedy; 0.5 finds T bugs).
        instances: your own `verispec.testing.strategies.Instance`s (checked smallest first).
        seed: int >= 0 from which the sweep's models are derived.
        tol: the TV tolerance for float64 laws (exact laws must have TV == 0).
        exact: None (default) -> rational sweep models where possible, TV == 0 demanded for exact
            laws and TV <= tol for float64 ones; True -> every law must be exact rational with
            TV == 0 (float temperatures rejected); False -> float64 sweep models.
        families: the sweep's model families, a subset of ("iid", "markov", "random_tree").

    Returns:
        a `LosslessReport` (number of instances, how many were exact, the largest float64 TV).

    Raises:
        LosslessnessError (AssertionError): the laws differ on an instance (only a well-formed rule
            whose law differs raises it).
        RuleContractError (TypeError, ValueError): the rule broke its contract on an instance (it
            raised, emitted no correction/bonus token, a token outside the vocabulary or a path not
            in the draft, or has the wrong signature); the message names the instance and the draws.
        TypeError / ValueError: invalid arguments, naming the argument (``num_tokens`` when the
            method declares no draft depth and none was given).

    """
    method = _check_method(method)
    tol = _check_tol(tol)
    exact = _check_exact(exact)
    seed = check_positive_int(seed, "seed", 0)
    N = default_num_tokens(method) if num_tokens is None else check_positive_int(num_tokens, "num_tokens", 1)
    explicit = target is not None
    todo = _instances_to_check(target, draft, context, instances, N, exact, vocab_sizes, temperatures, seed,
                               families, budget)
    failure, num_exact, max_tv = _smallest_failure(method, todo, tol, exact, explicit)
    if failure is not None:
        raise failure
    sizes = tuple(sorted({inst.vocab_size for inst in todo}))
    return LosslessReport(method=repr(method), num_instances=len(todo), num_exact=num_exact, max_tv=max_tv,
                          vocab_sizes=sizes, max_num_tokens=max(inst.num_tokens for inst in todo),
                          instances_per_vocab_size=tuple((V, sum(i.vocab_size == V for i in todo)) for V in sizes))


def _instances_to_check(target, draft, context, instances, N, exact, vocab_sizes, temperatures, seed, families,
                        budget) -> list[Instance]:
    """`assert_lossless`'s instances: the given target/draft pair, the user's `instances`, or the
    default sweep (ValueError when the arguments mix them or exact=True meets float models)."""
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
    if instances is not None:
        return _user_instances(instances)
    return sweep(vocab_sizes, temperatures, N, context, seed, families, exact, budget)


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
            tv, both_exact = _run(method, inst, tol, bool(exact), i, len(todo), explicit)
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
