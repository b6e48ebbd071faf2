"""What the chain and tree sampler harnesses report, written once: the name of the function under
test, its contract errors, the checks every output must pass, the per-instance result, the report,
and the verdict of a rejected instance ("NOT lossless", or "LOSSY" for a sampler that declares
itself lossy). Public names are re-exported by `verispec.testing.sampler` and `.tree_sampler`.

Sources: speculative sampling, Leviathan et al. 2023 (arXiv:2211.17192, Algorithm 1); the G-test
and its power, see `verispec.testing.gtest`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...reference.contract import RuleContractError
from ..assertions import LosslessnessError

#: Padding after the last emitted token of a row (vLLM's PLACEHOLDER_TOKEN_ID).
PLACEHOLDER = -1


def sampler_name(fn) -> str:
    """How reports name the function under test: its qualified name; for a callable object, its
    repr when its class writes one (a functools.partial), else its class's qualified name."""
    name = getattr(fn, "__qualname__", None)
    if isinstance(name, str) and name:
        return name
    return repr(fn) if type(fn).__repr__ is not object.__repr__ else type(fn).__qualname__


class SamplerContractError(RuleContractError):
    """The function under test broke the calling contract (wrong shape or dtype, a token outside
    the vocabulary, an emitted prefix that is not the draft, no token emitted, or it raised).
    This is not a verdict on its law: a `RuleContractError` (TypeError and ValueError), never an
    AssertionError.

    Attributes (besides `RuleContractError`'s): row, the offending batch row (or None).
    """

    def __init__(self, problem, method=None, instance=None, row=None, detail=""):
        self.row = row
        super().__init__(problem, method=method, instance=instance, detail=detail)


class SamplerLosslessnessError(LosslessnessError):
    """The G-test rejected the target law on an instance (or an impossible sequence was emitted).

    Attributes (besides `LosslessnessError`'s): result, the failing `InstanceResult`;
    report, the `SamplerReport` of the instances run so far; declared_lossy, True when the
    sampler declares itself lossy (its ``lossy`` attribute: the message then says LOSSY, not NOT
    lossless); exact_tv, the TV of the sampler's rule on the failing instance by exact enumeration
    when the sampler can give it (its ``exact_tv`` method), else None.
    """

    def __init__(self, message, result, report, law, target_law, declared_lossy=False, exact_tv=None):
        super().__init__(message, instance=result.instance, tv=result.empirical_tv, law=law,
                         target_law=target_law, exact=False)
        self.result, self.report = result, report
        self.declared_lossy, self.exact_tv = declared_lossy, exact_tv


@dataclass
class InstanceResult:
    """One instance of a sampler harness.

    Attributes:
        instance: the target/draft `Instance` (its ``num_tokens`` is N).
        n: independent runs of the loop (samples of the N-token law).
        cells: outcomes of positive target probability (V^N at most).
        df: degrees of freedom of the G-test after pooling.
        pooled_mass: target probability of the pooled cells (0 if none were merged).
        statistic, p_value: the G-test's.
        alpha: this instance's false-alarm level (the run's alpha / number of instances).
        detectable_tv: power >= the run's power against every law at TV >= detectable_tv +
            pooled_mass (derived: `gtest.detectable_tv(n, df, alpha, power)`).
        impossible: emitted N-token outcomes of target probability 0 -> count.
        empirical_tv: TV(empirical law, target law), a noisy plug-in estimate.
        seconds: wall time of the instance; seconds_in_fn: the part spent in the function.
        calls: how many times the function was called.
    """

    instance: object
    n: int
    cells: int
    df: int
    pooled_mass: float
    statistic: float
    p_value: float
    alpha: float
    detectable_tv: float
    impossible: dict
    empirical_tv: float
    seconds: float
    seconds_in_fn: float
    calls: int

    @property
    def passed(self) -> bool:
        return not self.impossible and self.p_value > self.alpha


@dataclass
class SamplerReport:
    """What a sampler harness ran: alpha (whole run), power and tv as requested, the per-instance
    `InstanceResult`s, and the total wall time in seconds."""

    alpha: float
    power: float
    tv: float
    results: list = field(default_factory=list)
    seconds: float = 0.0

    #: The harness named in the first line of the report.
    harness = "assert_sampler_lossless"

    @property
    def min_p_value(self) -> float:
        return min((r.p_value for r in self.results), default=1.0)

    def setting_lines(self) -> list:
        """Lines describing the harness's own setting, after the first (none for the chain harness)."""
        return []

    def __str__(self) -> str:
        k = len(self.results)
        lines = [f"{self.harness}: {k} instance(s); false-alarm rate alpha = {self.alpha:g} for the "
                 f"run ({self.alpha / max(k, 1):.3g} per instance, Bonferroni); power {self.power:g} at TV "
                 f"{self.tv:g} (+ pooled mass); {self.seconds:.1f} s", *self.setting_lines(),
                 f"  {'instance':<34} {'V':>2} {'N':>2} {'n':>9} {'df':>4} {'pooled':>7} {'G':>9} "
                 f"{'p-value':>9} {'TV@power':>8} {'time s':>7}"]
        for r in self.results:
            inst = r.instance
            lines.append(f"  {inst.label[:34]:<34} {inst.vocab_size:>2} {inst.num_tokens:>2} {r.n:>9,} {r.df:>4} "
                         f"{r.pooled_mass:>7.4f} {r.statistic:>9.2f} {r.p_value:>9.3g} "
                         f"{r.detectable_tv + r.pooled_mass:>8.4f} {r.seconds:>7.2f}"
                         + ("" if r.passed else "  FAIL"))
        return "\n".join(lines)


def contract_error(problem, where, row=None, arrays=None) -> SamplerContractError:
    """A SamplerContractError; `where` = (function name, instance); `arrays` = {name: [batch, ...]}
    of the call, whose row `row` the message shows."""
    name, inst = where
    detail = "" if row is None else f"row {row}: " + ", ".join(f"{key} = {value[row].tolist()}"
                                                              for key, value in arrays.items())
    return SamplerContractError(problem, method=name, instance=inst, row=row, detail=detail)


def check_output(out, expected, where, arrays):
    """The checks every harness output passes: the shape `expected` = (shape, its description),
    integer ids in [0, V) or the placeholder, at least one token, the placeholder only after the
    emitted tokens. `arrays`: the call's {name: [batch, ...]}, shown with an offending row.

    Returns:
        (output as int64 [batch, width], tokens emitted per row [batch]).

    Raises:
        SamplerContractError: naming the first broken condition (and the row).
    """
    shape, described = expected
    V = where[1].vocab_size
    if out.shape != shape:
        raise contract_error(f"output: expected shape {described} = {list(shape)}, got {list(out.shape)}", where)
    if out.dtype.kind not in "iu":
        raise contract_error(f"output: expected integer token ids, got dtype {out.dtype}", where)
    out = out.astype(np.int64)
    arrays = {**arrays, "output": out}
    problems = ((lambda: ((out < PLACEHOLDER) | (out >= V)).any(axis=1),
                 f"output: token id outside [0, {V}) that is not the placeholder {PLACEHOLDER}"),
                (lambda: (out >= 0).sum(axis=1) == 0, "output: a row emitted no token (the correction/bonus token "
                                                     "is missing)"),
                (lambda: ((out >= 0) != (np.arange(shape[1])[None, :] < (out >= 0).sum(axis=1)[:, None])).any(axis=1),
                 f"output: the placeholder {PLACEHOLDER} comes before an emitted token"))
    for mask, problem in problems:
        bad = np.flatnonzero(mask())
        if bad.size:
            raise contract_error(problem, where, int(bad[0]), arrays)
    return out, (out >= 0).sum(axis=1)


def failure_message(name, result, empirical, law, setting="", declared_lossy=False):
    """The report of a failed instance: the verdict ("NOT lossless", or "LOSSY (declared lossy by
    the sampler)"), why (an impossible sequence, or the G-test), the outcomes where the laws differ
    most, the instance. `setting` follows the verdict (e.g. the drafter)."""
    inst = result.instance
    if result.impossible:
        why = f"emitted sequences of target probability 0: {result.impossible}"
    else:
        why = (f"G-test rejects the target law: G = {result.statistic:.2f}, df = {result.df}, "
               f"p = {result.p_value:.3g} <= alpha = {result.alpha:.3g}")
    verdict = "is LOSSY (declared lossy by the sampler)" if declared_lossy else "is NOT lossless"
    keys = sorted(set(empirical) | set(law), key=lambda k: -abs(empirical.get(k, 0) - float(law.get(k, 0))))[:6]
    rows = "\n".join(f"    {k}: empirical {empirical.get(k, 0):.5f}  target {float(law.get(k, 0)):.5f}" for k in keys)
    return (f"{name} {verdict}{setting} on {inst.label} (V = {inst.vocab_size}, N = {inst.num_tokens}): {why}\n"
            f"  n = {result.n:,} runs of the loop; empirical TV = {result.empirical_tv:.4f}\n"
            f"  outcomes where the laws differ most:\n{rows}\n"
            + "\n".join("  " + line for line in inst.describe().splitlines()))


def rejection(fn, found, setting="", exact_tv=None) -> SamplerLosslessnessError:
    """The error of a rejected instance; `found` = (result, report, empirical law, target law). A
    sampler whose ``lossy`` attribute is True is reported LOSSY; `exact_tv` (the exact TV of its
    rule on that instance, when it gives one) follows the measured one."""
    result, report, empirical, law = found
    declared = getattr(fn, "lossy", False) is True  # e.g. a DIVERSE ensemble: lossy by design
    message = failure_message(sampler_name(fn), result, empirical, law, setting, declared)
    if exact_tv is not None:
        message += (f"\n  exact TV of the sampler's rule on this instance = {exact_tv:.4f} (exact enumeration, "
                    f"float64), beside the measured empirical TV = {result.empirical_tv:.4f}")
    return SamplerLosslessnessError(message, result, report, empirical, law, declared, exact_tv)
