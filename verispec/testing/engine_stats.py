"""The statistics of `assert_engine_lossless`: its sample size, its per-position diagnostics and its
test of an engine's acceptance counters.

- `engine_sample_size`: the smallest n at which the level-alpha G-test of the joint law of the first
  N tokens has power >= `power` against every law at total variation >= tv, the cost of pooling
  included: n with ``detectable_tv(n, df(n)) + pooled_mass(n) <= tv``, where df(n) and the pooled
  mass are those of the cells the test keeps at n (`verispec.testing.gtest`: pooling cells of
  expected count < 5 moves the guarantee from TV >= t to TV >= t + pooled mass). A law with many
  tiny cells needs a larger n before its pooled mass drops below tv.
- `position_reports`: for each position i, the TV between the sampled conditional law of token i
  given the i tokens before it and the exact one, averaged over the sampled prefixes
  (sum_prefix f(prefix) TV(f(. | prefix), p(. | prefix)) = TV between the sampled joint law of the
  first i + 1 tokens and "sampled prefix, then the exact conditional"); beside it the mean of the same
  statistic over `NULL_DRAWS` samples of the same n from the exact law (what sampling noise alone
  gives), and a conditional G-test (the per-prefix G statistics summed; the joint G statistic is
  their sum over positions, by the chain rule). A wrong first token shows at position 0 only; a
  sampler bug after the first draft position shows from the position it breaks.
- `acceptance_test`: the engine's accepted draft tokens per request against the exact expectation
  of the rule it claims (`engine_law.expected_acceptance`), a two-sided z-test with the exact
  variance of the per-request total (normal approximation, n requests).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import chi2, norm

from . import gtest

__all__ = ["NULL_DRAWS", "engine_sample_size", "has_power", "PositionReport", "position_reports", "AcceptanceReport",
           "acceptance_test", "joint_counts"]

#: Samples from the exact law behind each position's noise level.
NULL_DRAWS = 20
#: The largest sample size `engine_sample_size` searches.
MAX_SAMPLES = 10 ** 8


def has_power(probs, n, tv, alpha, power, min_expected) -> bool:
    """Whether n samples give power >= `power` against every law at TV >= tv, pooled mass included
    (probs: the exact law's positive cells)."""
    bins = gtest.pooled_bins(probs, n, min_expected)
    df = int(np.unique(bins[probs > 0]).size) - 1
    if df < 1:
        return gtest.g_test_power(n, 0, tv, alpha) >= power
    return gtest.detectable_tv(n, df, alpha, power) + gtest.pooled_mass(probs, n, min_expected) <= tv


def engine_sample_size(probs, tv: float, alpha: float, power: float, min_expected: float = gtest.MIN_EXPECTED) -> int:
    """The least n (up to bisection over a doubling search) with power >= `power` at TV >= `tv`,
    pooled mass included (module docstring). probs: the exact law, float64 [cells].

    Raises:
        ValueError: no n up to 1e8 suffices (the law has too much mass in tiny cells for this tv).
    """
    probs = np.asarray(probs, dtype=np.float64)
    probs = probs[probs > 0]
    hi = gtest.g_test_sample_size(1 if probs.size > 1 else 0, tv, alpha, power)  # df >= 1: a lower bound
    while not has_power(probs, hi, tv, alpha, power, min_expected):
        hi *= 2
        if hi > MAX_SAMPLES:
            raise ValueError(f"tv: no sample size up to {MAX_SAMPLES:.0e} gives power {power} at TV {tv} for this "
                             "law (too much mass in rare outcomes); pass a larger tv or a more concentrated pair")
    lo = hi // 2 + 1
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if has_power(probs, mid, tv, alpha, power, min_expected) else (mid + 1, hi)
    return hi


def joint_counts(tokens, vocab_size: int) -> np.ndarray:
    """Counts of each N-token outcome, int64 [V^N] (base-V order); tokens int [n, N]."""
    N = tokens.shape[1]
    return np.bincount(np.ravel_multi_index(tokens.T, (vocab_size,) * N), minlength=vocab_size ** N)


@dataclass
class PositionReport:
    """Position i (0-based): the mean conditional TV (module docstring), its mean under the exact law
    at the same n (`null_tv`), and the conditional G-test (statistic, df, p-value)."""

    position: int
    tv: float
    null_tv: float
    statistic: float
    df: int
    p_value: float


def _position_tv(joint, conditional, position, N, V) -> float:
    """Mean conditional TV at `position` from joint counts [V^N] and the exact conditionals [V^i, V]."""
    counts = joint.reshape(V ** position, V, V ** (N - position - 1)).sum(-1)  # [V^i, V]
    n = counts.sum()
    return 0.5 * float(np.abs(counts - counts.sum(1, keepdims=True) * conditional).sum()) / n


def _position_g(joint, conditional, position, N, V, min_expected):
    counts = joint.reshape(V ** position, V, V ** (N - position - 1)).sum(-1)  # [V^i, V]
    statistic, df = 0.0, 0
    for row in np.flatnonzero(counts.sum(1) > 0):
        test = gtest.g_test(counts[row], conditional[row], min_expected)
        statistic, df = statistic + test.statistic, df + test.df
    return statistic, df, (float(chi2.sf(statistic, df)) if df else 1.0)


def position_reports(joint, probs, conditionals, rng, min_expected: float = gtest.MIN_EXPECTED) -> list:
    """A `PositionReport` per position. joint: sampled counts [V^N]; probs: the exact law [V^N];
    conditionals: [exact conditionals [V^i, V] for i < N]; rng: a numpy Generator (the null draws)."""
    N, V = len(conditionals), conditionals[0].shape[1]
    n = int(joint.sum())
    null = [rng.multinomial(n, probs / probs.sum()) for _ in range(NULL_DRAWS)]
    out = []
    for i, conditional in enumerate(conditionals):
        statistic, df, p_value = _position_g(joint, conditional, i, N, V, min_expected)
        null_tv = float(np.mean([_position_tv(draw, conditional, i, N, V) for draw in null]))
        out.append(PositionReport(i, _position_tv(joint, conditional, i, N, V), null_tv, statistic, df, p_value))
    return out


@dataclass
class AcceptanceReport:
    """The engine's counters per request beside the exact expectation of the claimed rule.

    Attributes:
        claim: the `SpeculationClaim`. expected: the `ExpectedAcceptance`. observed: the engine's
        `EngineCounters` (totals over the n requests). n: requests. z, p_value: the two-sided test of
        mean accepted tokens per request. alpha: the level the verdict uses.
    """

    claim: object
    expected: object
    observed: object
    n: int
    z: float
    p_value: float
    alpha: float

    @property
    def consistent(self) -> bool:
        return self.p_value > self.alpha


def acceptance_test(claim, expected, observed, n: int, alpha: float) -> AcceptanceReport:
    """Two-sided z-test of observed accepted tokens per request against expected.accepted, with the
    exact variance (a zero variance needs exact equality)."""
    mean = observed.accepted_tokens / n
    spread = np.sqrt(expected.accepted_variance / n)
    gap = mean - expected.accepted
    if spread > 0:
        z = float(gap / spread)
        p_value = float(2 * norm.sf(abs(z)))
    else:
        z, p_value = (0.0, 1.0) if abs(gap) <= 1e-12 else (float("inf"), 0.0)
    return AcceptanceReport(claim, expected, observed, n, z, p_value, alpha)
