"""verispec.testing.gtest: sample size, power, pooling and its stated cost (no sampling here)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from verispec.testing import gtest


def test_sample_size_is_the_smallest_with_the_power():
    n = gtest.g_test_sample_size(2)  # alpha 1e-6, power 0.9, TV 0.01
    assert n == 104_069
    critical = stats.chi2.isf(1e-6, 2)
    assert stats.ncx2.sf(critical, 2, 4 * 0.01 ** 2 * n) >= 0.9 > stats.ncx2.sf(critical, 2, 4 * 0.01 ** 2 * (n - 1))
    assert gtest.g_test_sample_size(63) == 241_883


def test_power_and_detectable_tv_invert_the_sample_size():
    for df in (1, 5, 80):
        n = gtest.g_test_sample_size(df, tv=0.02, alpha=1e-4, power=0.8)
        assert gtest.g_test_power(n, df, 0.02, 1e-4) >= 0.8 > gtest.g_test_power(n - 1, df, 0.02, 1e-4)
        assert gtest.detectable_tv(n, df, 1e-4, 0.8) == pytest.approx(0.02, rel=1e-3)


def test_one_outcome_null_needs_one_impossible_draw():
    n = gtest.g_test_sample_size(0, tv=0.01, power=0.9)
    assert 1 - 0.99 ** n >= 0.9 > 1 - 0.99 ** (n - 1)
    assert gtest.detectable_tv(n, 0, power=0.9) <= 0.01


def test_g_test_detects_a_shift_at_the_planned_size():
    """At n = g_test_sample_size(2) the EXPECTED counts of a law at TV 0.01 already reject."""
    null = np.array([0.35 * 0.35, 0.35 * 0.65, 0.65])
    alternative = null + [0.01, -0.01, 0]
    n = gtest.g_test_sample_size(2)
    assert gtest.g_test(n * alternative, null).p_value < 1e-6
    assert gtest.g_test(n * null, null).p_value == pytest.approx(1.0)


def test_pooling_merges_sparse_cells_and_reports_their_mass():
    probs = np.array([0.5, 0.46, 0.03, 0.01, 0.0])
    bins = gtest.pooled_bins(probs, n=100)
    assert bins[2] == bins[3] == bins[4] != bins[0]  # expected 3 and 1: pooled (together 4 < 5, so
    assert bins[1] == bins[2]  # the smallest kept cell joins them)
    assert gtest.pooled_mass(probs, 100) == pytest.approx(0.5)
    assert gtest.pooled_mass(probs, 10_000) == 0.0  # nothing sparse
    result = gtest.g_test([50, 46, 4, 0, 0], probs)
    assert result.df == 1


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.integers(2, 8), st.integers(0, 2 ** 32 - 1), st.integers(20, 2000))
def test_pooled_tv_is_at_least_tv_minus_pooled_mass(cells, seed, n):
    """The stated cost of pooling: TV between the pooled laws >= TV - (null mass of the pool)."""
    rng = np.random.default_rng(seed)
    null, alt = rng.dirichlet(np.full(cells, 0.3)), rng.dirichlet(np.full(cells, 0.3))
    bins = gtest.pooled_bins(null, n)
    pooled_null = np.bincount(bins, null)
    pooled_alt = np.bincount(bins, alt)
    tv = 0.5 * np.abs(null - alt).sum()
    assert 0.5 * np.abs(pooled_null - pooled_alt).sum() >= tv - gtest.pooled_mass(null, n) - 1e-12


@pytest.mark.parametrize("call, match", [
    (lambda: gtest.g_test_sample_size(-1), "df"),
    (lambda: gtest.g_test_sample_size(2, tv=0), "tv"),
    (lambda: gtest.g_test_sample_size(2, alpha=1.5), "alpha"),
    (lambda: gtest.g_test_sample_size(2, power="0.9"), "power"),
    (lambda: gtest.g_test_power(0, 2), "n"),
    (lambda: gtest.g_test([1, 2], [0.5, 0.25, 0.25]), "counts"),
    (lambda: gtest.g_test([-1, 2], [0.5, 0.5]), "counts"),
])
def test_bad_input(call, match):
    with pytest.raises((TypeError, ValueError), match=match):
        call()
