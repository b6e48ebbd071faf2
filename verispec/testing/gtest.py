"""The G-test of an empirical law against an exact one, with its sample size and power.

Used by `assert_sampler_lossless` (black-box samplers) and by verispec's own statistical tests of
the torch decoders. Everything here is classical:

* G-test: the log-likelihood-ratio statistic G = 2 sum_i O_i log(O_i / E_i), asymptotically
  chi-square with (cells - 1) degrees of freedom under the null (`scipy.stats.power_divergence`
  with ``lambda_="log-likelihood"``).
* Power: under an alternative law P1 the statistic is asymptotically noncentral chi-square with
  noncentrality n * chi2(P1 || P0) = n * sum (p1 - p0)^2 / p0 >= n * (sum |p1 - p0|)^2
  = 4 n TV^2 (Cauchy-Schwarz). So ``ncx2.sf(chi2.isf(alpha, df), df, 4 n tv^2)`` is a lower bound
  on the (asymptotic) power against EVERY law at total variation >= tv from the null, and
  `g_test_sample_size` inverts it.
* Sparse cells: cells with expected count n p0 < `min_expected` (5, the usual rule for the
  chi-square approximation) are pooled into one cell. Pooling costs power in a way that can be
  stated: for any alternative, TV(pooled laws) >= TV(laws) - m0, where m0 is the null mass of the
  pooled cells, so the power guarantee holds against every law at TV >= tv + m0 (`pooled_mass`).
* Cells of probability 0 cannot enter a G-test: an observation there refutes the null outright
  and must be checked separately (`assert_sampler_lossless` does).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy.stats import chi2, ncx2, power_divergence

from ..reference.models import check_positive_int

__all__ = ["GTest", "g_test", "g_test_power", "g_test_sample_size", "detectable_tv", "pooled_bins", "pooled_mass",
           "ALPHA", "POWER", "TV"]

#: Default false-alarm rate (probability of failing a correct implementation).
ALPHA = 1e-6
#: Default power (probability of failing an implementation whose law is at TV >= `TV`).
POWER = 0.9
#: Default total-variation distance at which `POWER` is guaranteed.
TV = 0.01

#: Expected count below which a cell is pooled.
MIN_EXPECTED = 5.0


class GTest(NamedTuple):
    """Result of `g_test`: the statistic G, its p-value and degrees of freedom (cells after
    pooling - 1)."""

    statistic: float
    p_value: float
    df: int


def _check_probability(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
        raise TypeError(f"{name}: expected a number in (0, 1), got {type(value).__name__}")
    if not (0 < value < 1):
        raise ValueError(f"{name}: must be in (0, 1), got {value!r}")
    return float(value)


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n: expected an int >= 1, got {n!r}")
    return int(n)


def _check_n_df(n, df, *probabilities):
    """(n, df, the probabilities), checked in that order; `probabilities` are (value, name) pairs."""
    return (_check_n(n), check_positive_int(df, "df", minimum=0),
            *(_check_probability(value, name) for value, name in probabilities))


def g_test_power(n: int, df: int, tv: float = TV, alpha: float = ALPHA) -> float:
    """Asymptotic power of the level-`alpha` G-test with `df` degrees of freedom and `n` samples,
    against the worst law at total variation `tv` (noncentrality 4 n tv^2; see the module docstring).

    With df = 0 (a one-outcome null) any deviation is an impossible outcome: the power is
    1 - (1 - tv)^n, the chance of seeing at least one.

    Raises:
        TypeError / ValueError: n < 1, df < 0, tv or alpha outside (0, 1).
    """
    n, df, tv, alpha = _check_n_df(n, df, (tv, "tv"), (alpha, "alpha"))
    if df == 0:
        return 1.0 - (1.0 - tv) ** int(n)
    return float(ncx2.sf(chi2.isf(alpha, df), df, 4.0 * int(n) * tv * tv))


def g_test_sample_size(df: int, tv: float = TV, alpha: float = ALPHA, power: float = POWER) -> int:
    """The smallest n such that the level-`alpha` G-test with `df` degrees of freedom rejects
    every law at total variation >= `tv` from the null with probability >= `power`
    (asymptotically; `g_test_power` is the bound it inverts).

    Example: df = 2 at the defaults (alpha 1e-6, power 0.9, TV 0.01) needs n = 104,069.

    Raises:
        TypeError / ValueError: df < 0, tv / alpha / power outside (0, 1).
    """
    df = check_positive_int(df, "df", minimum=0)
    tv = _check_probability(tv, "tv")
    alpha = _check_probability(alpha, "alpha")
    power = _check_probability(power, "power")
    if df == 0:
        return max(1, math.ceil(math.log1p(-power) / math.log1p(-tv)))
    critical = chi2.isf(alpha, df)
    lo, hi = 1, 1
    while ncx2.sf(critical, df, 4.0 * hi * tv * tv) < power:
        hi *= 2
    while lo < hi:  # smallest n with enough power (the power grows with n)
        mid = (lo + hi) // 2
        if ncx2.sf(critical, df, 4.0 * mid * tv * tv) >= power:
            hi = mid
        else:
            lo = mid + 1
    return lo


def pooled_bins(expected_probs, n: int, min_expected: float = MIN_EXPECTED) -> np.ndarray:
    """Bin id per cell: cells with n p >= `min_expected` keep their own bin; the others share one
    pooled bin (the last id). If that pooled bin is itself below `min_expected`, the smallest kept
    cell joins it, so every bin with mass meets the rule when the total allows.

    Args:
        expected_probs: float array [num_cells], the null law (cells of probability 0 allowed).
        n: number of samples.

    Returns:
        int64 array [num_cells] of bin ids in 0..num_bins-1.
    """
    probs = np.asarray(expected_probs, dtype=np.float64)
    keep = probs * n >= min_expected
    sparse_total = probs[~keep].sum() * n
    if (~keep).any() and 0 < sparse_total < min_expected and keep.sum() > 1:
        smallest = np.flatnonzero(keep)[np.argmin(probs[keep])]
        keep[smallest] = False
    bins = np.cumsum(keep) - 1
    bins[~keep] = keep.sum()
    return bins.astype(np.int64)


def pooled_mass(expected_probs, n: int, min_expected: float = MIN_EXPECTED) -> float:
    """The null probability of the cells that `pooled_bins` merges (0 when at most one cell with
    positive probability is pooled). The power guarantee of `g_test_sample_size` then holds
    against laws at TV >= tv + this mass (see the module docstring)."""
    probs = np.asarray(expected_probs, dtype=np.float64)
    bins = pooled_bins(probs, n, min_expected)
    pool = bins == bins.max()
    return float(probs[pool].sum()) if np.count_nonzero(probs[pool] > 0) > 1 else 0.0


def g_test(counts, probs, min_expected: float = MIN_EXPECTED) -> GTest:
    """G-test of observed `counts` against the exact law `probs` (same cell order), pooling cells
    with expected count < `min_expected` (`pooled_bins`).

    Args:
        counts: array [num_cells] of non-negative counts (n = their sum).
        probs: array [num_cells], the null law (sums to 1 up to round-off).

    Returns:
        `GTest` (statistic, p_value, df); (0.0, 1.0, 0) when fewer than two bins have mass.
        Cells of probability 0 are ignored here: an observation in one must be checked
        separately (it refutes the null outright).

    Raises:
        ValueError: counts and probs of different shapes, or negative counts.
    """
    counts = np.asarray(counts, dtype=np.float64).reshape(-1)
    probs = np.asarray(probs, dtype=np.float64).reshape(-1)
    if counts.shape != probs.shape:
        raise ValueError(f"counts: shape {counts.shape} differs from probs' {probs.shape}")
    if (counts < 0).any():
        raise ValueError("counts: negative count")
    n = counts.sum()
    bins = pooled_bins(probs, n, min_expected)
    nb = int(bins.max()) + 1
    obs = np.bincount(bins, weights=counts, minlength=nb)
    exp = np.bincount(bins, weights=probs, minlength=nb) * n
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    if len(obs) < 2:
        return GTest(0.0, 1.0, 0)
    exp = exp * (obs.sum() / exp.sum())  # exact laws sum to 1 only up to round-off
    stat, p_value = power_divergence(obs, exp, lambda_="log-likelihood")
    return GTest(float(stat), float(p_value), len(obs) - 1)


def detectable_tv(n: int, df: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest total variation t such that the level-`alpha` G-test with `df` degrees of
    freedom and `n` samples has (asymptotic) power >= `power` against every law at TV >= t.

    Inverts `g_test_power` in tv (for df = 0: 1 - (1 - power)^(1/n)).

    Raises:
        TypeError / ValueError: n < 1, df < 0, alpha or power outside (0, 1).
    """
    n, df, alpha, power = _check_n_df(n, df, (alpha, "alpha"), (power, "power"))
    if df == 0:
        return float(-math.expm1(math.log1p(-power) / int(n)))
    critical = chi2.isf(alpha, df)
    lo, hi = 0.0, 1.0
    while ncx2.sf(critical, df, hi) < power:
        hi *= 2
    for _ in range(200):  # bisection on the noncentrality, to relative 1e-12
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if ncx2.sf(critical, df, mid) >= power else (mid, hi)
        if hi - lo <= 1e-12 * hi:
            break
    return math.sqrt(hi / (4.0 * int(n)))
