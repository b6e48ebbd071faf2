"""What the chain and tree sampler harnesses share (`verispec.testing.sampler`,
`verispec.testing.tree_sampler`): the backend the function under test receives, the checked
settings of a run (`HarnessSettings`), the exact target law as an array, the instances, the timed
call of the function, the sampling and G-test of one instance, and the run over the instances
(what they report and raise: `verispec.testing._internal.verdicts`).

Sources: speculative sampling, Leviathan et al. 2023 (arXiv:2211.17192, Algorithm 1); the G-test
and its power, see `verispec.testing.gtest`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ...reference.exact import target_distribution
from ...reference.models import check_pair, check_positive_int, check_prefix
from .. import gtest
from ..sweeps import Instance, sweep
from .instances import instance_items
from .verdicts import contract_error, rejection


class Backend:
    """numpy arrays -> what the function receives (numpy arrays, or torch tensors on a device),
    and its output back to numpy.

    Raises:
        ValueError: `name` is not "numpy" or "torch". TypeError: `dtype` is not a floating dtype
        of that backend (default float64 for numpy, float32 for torch).
    """

    def __init__(self, name, dtype, device):
        if name not in ("numpy", "torch"):
            raise ValueError(f"backend: expected 'numpy' or 'torch', got {name!r}")
        self.name, self.device = name, device
        if name == "torch":
            import torch  # optional dependency: only this backend needs it

            self.torch = torch
            self.dtype = torch.float32 if dtype is None else dtype
            if not isinstance(self.dtype, torch.dtype) or not self.dtype.is_floating_point:
                raise TypeError(f"dtype: expected a floating torch.dtype, got {dtype!r}")
        else:
            self.dtype = np.dtype(np.float64 if dtype is None else dtype)
            if self.dtype.kind != "f":
                raise TypeError(f"dtype: expected a floating numpy dtype, got {dtype!r}")

    def generator(self, seed):
        if self.name == "numpy":
            return np.random.default_rng(seed)
        return self.torch.Generator(device=self.device).manual_seed(int(seed))

    def array(self, a):
        """An int array as is (on the device), a float array in the backend's dtype; None stays None."""
        if a is None:
            return None
        if self.name == "numpy":
            return a if a.dtype.kind in "iu" else a.astype(self.dtype)
        t = self.torch.from_numpy(np.ascontiguousarray(a)).to(self.device)
        return t if a.dtype.kind in "iu" else t.to(self.dtype)

    def output(self, out):
        if self.name == "torch" and isinstance(out, self.torch.Tensor):
            return out.detach().cpu().numpy()
        return np.asarray(out)


class TimedLoop:
    """Base of a harness's draft-verify loop: calls the function under test, timing and counting
    the calls (``seconds_in_fn``, ``calls``)."""

    def __init__(self):
        self.seconds_in_fn, self.calls = 0.0, 0

    def call_fn(self, fn, args, generator, contract):
        """fn(*args, generator); a crash is raised as ``contract(problem)`` (a contract error, not
        a verdict on the law)."""
        start = time.perf_counter()
        try:
            out = fn(*args, generator)
        except Exception as err:
            raise contract(f"the function raised {type(err).__name__}: {err}") from err
        self.seconds_in_fn += time.perf_counter() - start
        self.calls += 1
        return out


def target_law_array(inst):
    """The exact target law of the first N tokens as float64 [V^N] (base-V order, first token most
    significant) and the same as a dict."""
    V, N = inst.vocab_size, inst.num_tokens
    law = target_distribution(inst.target, inst.context, N)
    probs = np.zeros(V ** N)
    for seq, prob in law.items():
        probs[int(np.ravel_multi_index(seq, (V,) * N))] = float(prob)
    return probs, law


def check_number(value, name, low, high):
    """`value` as a float in the open interval (low, high); TypeError / ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
    if not low < value < high:
        raise ValueError(f"{name}: must be in ({low}, {high}), got {value!r}")
    return float(value)


def check_callable(fn) -> None:
    """TypeError naming ``fn`` unless it is callable."""
    if not callable(fn):
        raise TypeError(f"fn: expected a callable, got {type(fn).__name__}")


@dataclass(frozen=True)
class HarnessSettings:
    """The statistics of one harness run, checked on construction (TypeError / ValueError naming
    the argument), and the backend the function under test receives.

    Attributes:
        alpha: false-alarm rate of the whole run, in (0, 1) (split over its instances).
        power, tv: power in (0, 1) against every law at total variation >= tv, in (0, 1).
        num_samples: runs per instance, int >= 1, or None: the least n with `power` at `tv`.
        seed: int >= 0. batch_size: rows per call of the function, int >= 1.
        min_expected: the G-test's pooling threshold, > 0. backend: a `Backend`.
    """

    alpha: float
    power: float
    tv: float
    num_samples: int | None
    seed: int
    batch_size: int
    min_expected: float
    backend: Backend

    def __post_init__(self):
        checked = dict(alpha=check_number(self.alpha, "alpha", 0, 1), power=check_number(self.power, "power", 0, 1),
                       tv=check_number(self.tv, "tv", 0, 1),
                       num_samples=None if self.num_samples is None else check_positive_int(self.num_samples,
                                                                                            "num_samples"),
                       seed=check_positive_int(self.seed, "seed", 0),
                       batch_size=check_positive_int(self.batch_size, "batch_size"),
                       min_expected=check_number(self.min_expected, "min_expected", 0, float("inf")))
        for name, value in checked.items():
            object.__setattr__(self, name, value)


def run_harness(fn, todo, run_one, report, verdict=lambda result: {}):
    """Run `run_one(index, instance, alpha_i)` -> (result, empirical law, target law) on each
    instance of `todo` at level alpha_i = report.alpha / len(todo) (Bonferroni), appending to
    `report`; the first rejected one raises its `SamplerLosslessnessError` (`verdicts.rejection`,
    with the keyword arguments `verdict(result)` gives: the setting, an exact TV). Returns `report`."""
    alpha_i = report.alpha / len(todo)
    for result, empirical, law in timed_results(todo, lambda index, inst: run_one(index, inst, alpha_i), report):
        if not result.passed:
            raise rejection(fn, (result, report, empirical, law), **verdict(result))
    return report


def call_contract(where):
    """The contract-error factory `TimedLoop.call_fn` takes: a crash of the function under test
    (`where` = (its name, the instance))."""
    return lambda problem: contract_error(problem, where)


def harness_instances(target, draft, context, instances, sweep_args, N, no_draft=None):
    """A harness's instances with N tokens: the given target/draft pair, the user's `instances`,
    or the sweep of ``sweep_args`` = (vocab_sizes, temperatures, families, seed). With `no_draft`
    (the end of the message), a user's instance without a draft model is a ValueError.

    Raises:
        TypeError / ValueError: the arguments mix the three, or an instance is invalid.
    """
    if target is not None:
        if instances is not None:
            raise ValueError("instances: pass either target/draft or instances, not both")
        check_pair(target, draft)
        return [Instance(target, draft, check_prefix(context, target.vocab_size, "context"), N, label="given instance")]
    if draft is not None:
        raise ValueError("target: pass target together with draft (draft alone is not an instance)")
    if instances is None:
        vocab_sizes, temperatures, families, seed = sweep_args
        return sweep(vocab_sizes=vocab_sizes, temperatures=temperatures, num_tokens=N, context=context, seed=seed,
                     families=families, exact=False)
    todo = [instances] if isinstance(instances, Instance) else list(instances)
    for _, inst in instance_items(todo):
        if no_draft is not None and inst.draft is None:
            raise ValueError(f"instances: {inst.label} has no draft model; {no_draft}")
        check_pair(inst.target, inst.draft)
    return [Instance(inst.target, inst.draft, inst.context, N, inst.complexity, inst.label) for inst in todo]


def sample_instance(inst, index, settings: HarnessSettings, alpha_i: float, make_loop):
    """Run ``make_loop()`` (a `TimedLoop` with ``run(rows, draft_rng, generator)`` -> int64
    [rows, N]) n times on `inst` and G-test the first N tokens' law against the target's at level
    `alpha_i` (the run's alpha over its instances).

    Returns:
        (the `InstanceResult` fields as a dict, the empirical law, the target law) (dicts of
        N-token tuples).
    """
    power, tv, num_samples, seed = settings.power, settings.tv, settings.num_samples, settings.seed
    batch_size, min_expected, backend = settings.batch_size, settings.min_expected, settings.backend
    V, N = inst.vocab_size, inst.num_tokens
    probs, law = target_law_array(inst)
    support = probs > 0
    n = num_samples or gtest.g_test_sample_size(int(support.sum()) - 1, tv, alpha_i, power)
    start = time.perf_counter()
    loop = make_loop()
    streams = np.random.SeedSequence([seed, index]).spawn(2)
    draft_rng, generator = np.random.default_rng(streams[0]), backend.generator(streams[1].generate_state(1)[0])
    counts = np.zeros(V ** N, dtype=np.int64)
    for first in range(0, n, batch_size):
        tokens = loop.run(min(batch_size, n - first), draft_rng, generator)  # [rows, N]
        counts += np.bincount(np.ravel_multi_index(tokens.T, (V,) * N), minlength=V ** N)
    test = gtest.g_test(counts[support], probs[support], min_expected)
    impossible = {tuple(int(t) for t in np.unravel_index(i, (V,) * N)): int(counts[i])
                  for i in np.flatnonzero(~support & (counts > 0))}
    fields = dict(
        instance=inst, n=n, cells=int(support.sum()), df=test.df,
        pooled_mass=gtest.pooled_mass(probs[support], n, min_expected), statistic=test.statistic,
        p_value=0.0 if impossible else test.p_value, alpha=alpha_i,
        detectable_tv=gtest.detectable_tv(n, test.df, alpha_i, power), impossible=impossible,
        empirical_tv=0.5 * float(np.abs(counts / n - probs).sum()), seconds=time.perf_counter() - start,
        seconds_in_fn=loop.seconds_in_fn, calls=loop.calls)
    empirical = {tuple(int(t) for t in np.unravel_index(i, (V,) * N)): counts[i] / n for i in np.flatnonzero(counts)}
    return fields, empirical, law


def timed_results(todo, run_one, report):
    """Yield ``run_one(index, instance)`` = (result, empirical law, target law) for each instance,
    appending the result to ``report.results`` and updating ``report.seconds`` first."""
    start = time.perf_counter()
    for index, inst in enumerate(todo):
        result, empirical, law = run_one(index, inst)
        report.results.append(result)
        report.seconds = time.perf_counter() - start
        yield result, empirical, law
