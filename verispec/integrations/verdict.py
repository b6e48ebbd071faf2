"""What every ``verispec check-sampler LIBRARY`` mode returns, and the one place that runs the harness.

`SamplingVerdict` holds the chain harness's verdict on a library's sampler (a rejection is a verdict,
not an exception); `run_sampler_check` runs `verispec.testing.assert_sampler_lossless` on an
adapted function with torch on one thread (the tensors are tiny: thread hand-offs would dominate).
`IntegrationError` is raised when the installed library lacks what an adapter wraps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..commandline import MISSING_LIBRARY
from ..testing import gtest
from ..testing.sampler import SamplerLosslessnessError, SamplerReport, assert_sampler_lossless

__all__ = ["IntegrationError", "SamplingVerdict", "run_sampler_check"]


class IntegrationError(RuntimeError):
    """The installed library lacks what the adapter wraps (renamed, moved, or not installed); the
    message names what was looked for and the installed version."""

    #: The `verispec` commands' exit status for it (`verispec.commandline.exit_status`): not a verdict.
    exit_status = MISSING_LIBRARY


@dataclass
class SamplingVerdict:
    """What a ``check-sampler`` mode found.

    Attributes:
        mode: the mode's name. lossless: the harness's verdict (False: rejected).
        report: the `SamplerReport` (instances run, n, p-values). tv: the empirical TV of the
            failing instance (None when lossless). alpha, power, tv_target: the run's settings.
        message: the harness's failure message ("" when lossless). seconds: wall time.
        exact_tv: the exact TV of the same rule on the instance last run, where the mode declares
            its rule lossy (transformers' DIVERSE ensemble); None otherwise.
        note: what a check beside the G-test found ("" when nothing), e.g. vLLM's greedy rows.
    """

    mode: str
    lossless: bool
    report: SamplerReport
    tv: float | None
    alpha: float
    power: float
    tv_target: float
    message: str
    seconds: float
    exact_tv: float | None = None
    note: str = ""

    @property
    def n(self) -> int:
        """Rows sampled (runs of the loop) over the instances run."""
        return sum(r.n for r in self.report.results)


def run_sampler_check(fn, mode: str, *, tv: float = 0.05, alpha: float = gtest.ALPHA, power: float = gtest.POWER,
                      **harness) -> SamplingVerdict:
    """`assert_sampler_lossless(fn, backend="torch", ...)` with torch on one thread -> a `SamplingVerdict`.

    Args:
        fn: the adapted function (the harness's canonical signature). mode: its label.
        tv, alpha, power: as in `assert_sampler_lossless` (power >= `power` at TV >= tv).
        harness: further keyword arguments of `assert_sampler_lossless` (dtype defaults to float64).

    Raises:
        SamplerContractError: the function raised or broke the output contract (not a verdict).
    """
    import torch  # optional dependency

    harness.setdefault("dtype", torch.float64)
    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        report = assert_sampler_lossless(fn, backend="torch", tv=tv, alpha=alpha, power=power, **harness)
        found = (True, report, None, "")
    except SamplerLosslessnessError as err:
        found = (False, err.report, err.result.empirical_tv, str(err))
    finally:
        torch.set_num_threads(threads)
    return SamplingVerdict(mode, found[0], found[1], found[2], alpha, power, tv, found[3], time.perf_counter() - start)
