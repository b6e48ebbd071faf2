"""Shared helpers for tests/empirical.

The package needs torch and transformers. Each test module starts with
``pytest.importorskip("torch")`` / ``pytest.importorskip("transformers")`` so that, without them,
the modules are reported as skipped whether pytest is pointed at tests/ or at tests/empirical
(an importorskip at conftest level aborts the run when tests/empirical is given explicitly).
Nothing here imports torch at module level.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chi2, ncx2, power_divergence

#: False-alarm rate of every statistical test in tests/empirical.
ALPHA = 1e-6
#: Power of every statistical test at the stated total-variation distance.
POWER = 0.9


def g_test_sample_size(df: int, tv: float = 0.01, alpha: float = ALPHA, power: float = POWER) -> int:
    """Smallest n such that a chi-square-type test with `df` degrees of freedom at level `alpha`
    rejects with probability >= `power` any law at total variation >= `tv` from the null.

    For an alternative at TV distance t the noncentrality is n * sum (p1 - p0)^2 / p0
    >= n * (sum |p1 - p0|)^2 = 4 n t^2 (Cauchy-Schwarz), so a noncentral chi-square with
    noncentrality 4 n t^2 lower-bounds the power (asymptotically, for the G-test too).
    """
    critical = chi2.isf(alpha, df)
    lo, hi = 1, 10 ** 9
    while lo < hi:
        mid = (lo + hi) // 2
        if ncx2.sf(critical, df, 4 * mid * tv * tv) >= power:
            hi = mid
        else:
            lo = mid + 1
    return lo


def pooled_bins(expected_probs: np.ndarray, n: int, min_expected: float = 5.0) -> np.ndarray:
    """Bin id per outcome: outcomes with n * p >= min_expected keep their own bin; the rest share
    one pooled bin (so the chi-square approximation holds). Returns int array [num_outcomes]."""
    keep = expected_probs * n >= min_expected
    bins = np.cumsum(keep) - 1
    bins[~keep] = keep.sum()
    return bins


def g_test(counts: np.ndarray, probs: np.ndarray, min_expected: float = 5.0):
    """G-test (log-likelihood ratio, scipy power_divergence lambda_="log-likelihood") of observed
    `counts` against exact `probs` (same order), pooling cells with expected count < min_expected.

    Returns (statistic, p_value, df). Outcomes of probability 0 must be checked separately.
    """
    counts = np.asarray(counts, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    n = counts.sum()
    bins = pooled_bins(probs, n, min_expected)
    nb = bins.max() + 1
    obs = np.bincount(bins, weights=counts, minlength=nb)
    exp = np.bincount(bins, weights=probs, minlength=nb) * n
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    exp = exp * (obs.sum() / exp.sum())  # exact probs sum to 1 up to round-off
    if len(obs) < 2:
        return 0.0, 1.0, 0
    stat, p_value = power_divergence(obs, exp, lambda_="log-likelihood")
    return float(stat), float(p_value), len(obs) - 1


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Run torch single-threaded: tiny models and small-row tensors are dominated by thread
    hand-offs on a shared 2-core CI machine (measured 10-40x slower with 2 threads under load)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
