"""The sampled loop (methods.generate with a seeded Sampler) against the exact law, per method.

Statistical design (docs/testing.md, "Proof, exact check, statistical check"):

* Instance: V = 2, N = 2 tokens after the context (0, 1, 0), Markov target and draft, L = 2,
  K = 2 (opt_tree: node budget 4, depth 2). The target never emits 1 after 1, so the outcome
  (1, 1) has probability 0 and the G-test runs on the other 3 outcomes: df = 2.
* Test: G-test (scipy.stats.power_divergence, lambda_="log-likelihood") of the counts of the N-token
  outcomes against n * exact.output_distribution(...). False-alarm rate alpha = 1e-6 per method
  (11 methods: family-wise rate <= 1.1e-5; the seeds are fixed, so a run is reproducible).
* Power: 0.9 against any alternative at total variation >= 0.01 from the exact law. Under an
  alternative P the statistic is asymptotically noncentral chi-square(df) with noncentrality
  n * chi2(P || P0) >= n * 4 * TV^2 (since TV <= sqrt(chi2) / 2), so the worst case at TV = 0.01
  is lambda = 4e-4 * n. With the critical value chi2.isf(1e-6, 2) = 27.631 and
  ncx2.sf(27.631, 2, lambda) = 0.9 at lambda = 41.627, the sample size is
  n = ceil(41.627 / 4e-4) = 104,069 draws per method (`SAMPLE_SIZE`; recomputed and checked below).
* Outcomes of probability 0 must never be drawn (checked separately: any occurrence fails).
"""

from __future__ import annotations

import multiprocessing
import os
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from verispec.reference import drafters, exact, methods, models
from verispec.reference.randomness import Sampler
from verispec.testing.gtest import g_test_sample_size

ALPHA = 1e-6
POWER = 0.9
TV_ALTERNATIVE = 0.01
DEGREES_OF_FREEDOM = 2
#: Computed by `verispec.testing.gtest.g_test_sample_size(DEGREES_OF_FREEDOM)`; see the module docstring.
SAMPLE_SIZE = 104_069

CONTEXT = (0, 1, 0)
NUM_TOKENS = 2
DRAFT_LENGTH = 2
NUM_PATHS = 2


def _instance():
    target = models.markov([0.5, 0.5], [[0.35, 0.65], [1.0, 0.0]])
    draft = models.markov([0.5, 0.5], [[0.7, 0.3], [0.4, 0.6]])
    return target, draft


def test_sample_size_matches_the_power_calculation():
    assert g_test_sample_size(DEGREES_OF_FREEDOM, TV_ALTERNATIVE, ALPHA, POWER) == SAMPLE_SIZE
    critical = stats.chi2.isf(ALPHA, DEGREES_OF_FREEDOM)
    assert stats.ncx2.sf(critical, DEGREES_OF_FREEDOM, 4 * TV_ALTERNATIVE ** 2 * SAMPLE_SIZE) >= POWER
    assert stats.ncx2.sf(critical, DEGREES_OF_FREEDOM, 4 * TV_ALTERNATIVE ** 2 * (SAMPLE_SIZE - 50)) < POWER


def test_instance_has_three_outcomes_and_a_zero():
    target, _ = _instance()
    law = exact.target_distribution(target, CONTEXT, NUM_TOKENS)
    assert set(law) == {(0, 0), (0, 1), (1, 0)}  # (1, 1) has probability 0
    assert len(law) - 1 == DEGREES_OF_FREEDOM


def test_gtest_detects_a_tv_001_shift():
    """Sanity check of the power calculation (no sampling): at n = SAMPLE_SIZE the expected counts
    of an alternative at TV 0.01 from the null already give a G statistic beyond the alpha = 1e-6
    critical value."""
    null = [0.35 * 0.35, 0.35 * 0.65, 0.65]
    alternative = [null[0] + 0.01, null[1] - 0.01, null[2]]
    observed = [SAMPLE_SIZE * a for a in alternative]
    expected = [SAMPLE_SIZE * p for p in null]
    _, pvalue = stats.power_divergence(observed, expected, lambda_="log-likelihood")
    assert pvalue < ALPHA


_SEEDS = {name: 1_000 + 17 * i for i, name in enumerate(methods.names())}


def _sample_counts(name: str, seed, size: int) -> Counter:
    """Counts of `size` outputs of methods.generate(..., rng=Sampler(seed)) (one worker)."""
    target, draft = _instance()
    method = methods.get_compatible(name, draft_length=DRAFT_LENGTH, num_paths=NUM_PATHS)
    rng = Sampler(seed)
    return Counter(methods.generate(target, draft, method, CONTEXT, NUM_TOKENS, rng=rng)
                   for _ in range(size))


def _sample_counts_parallel(name: str, seed: int, size: int) -> Counter:
    """The same draws split over the machine's cores: worker i samples with the i-th child of
    SeedSequence(seed) (independent streams; fixed seeds, so reproducible for a given worker
    count). Falls back to one process where fork is unavailable."""
    workers = max(1, min(4, os.cpu_count() or 1))
    children = np.random.SeedSequence(seed).spawn(workers)
    sizes = [size // workers + (i < size % workers) for i in range(workers)]
    if workers == 1 or "fork" not in multiprocessing.get_all_start_methods():
        return _sample_counts(name, children[0] if workers == 1 else seed, size)
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        parts = pool.starmap(_sample_counts, [(name, child, n) for child, n in zip(children, sizes)])
    return sum(parts, Counter())


#: Methods whose G-test runs only with the slow tests: their sampler is the same code as their
#: exactly enumerated law (checked in test_lossless.py), and each G-test costs ~30 s here.
_SLOW_GTEST = {"khisti", "optimal_is", "global_resolution", "spechub"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in _SLOW_GTEST else n
                                  for n in methods.names()])
def test_sampler_matches_exact_law(name):
    """G-test at alpha = 1e-6 of SAMPLE_SIZE = 104,069 sampled N=2-token outputs (df = 2) against
    the exact law of the same method; and no zero-probability outcome is ever emitted."""
    target, draft = _instance()
    method = methods.get_compatible(name, draft_length=DRAFT_LENGTH, num_paths=NUM_PATHS)
    law = exact.output_distribution(target, draft, method, CONTEXT, NUM_TOKENS)
    assert exact.total_variation(law, exact.target_distribution(target, CONTEXT, NUM_TOKENS)) <= 1e-12
    support = sorted(outcome for outcome, prob in law.items() if prob > 0)
    assert len(support) - 1 == DEGREES_OF_FREEDOM

    counts = _sample_counts_parallel(name, _SEEDS[name], SAMPLE_SIZE)
    assert sum(counts.values()) == SAMPLE_SIZE

    impossible = {outcome: c for outcome, c in counts.items() if law.get(outcome, 0) == 0}
    assert not impossible, f"{name} emitted zero-probability outputs {impossible}"
    observed = [counts[outcome] for outcome in support]
    expected = [SAMPLE_SIZE * float(law[outcome]) for outcome in support]
    statistic, pvalue = stats.power_divergence(observed, expected, lambda_="log-likelihood")
    assert pvalue > ALPHA, f"{name}: G = {statistic:.2f}, p = {pvalue:.3g}, counts {dict(counts)}"


def test_zero_probability_check_can_fail():
    """The zero-outcome assertion is live: a rule that draws its bonus token from the draft q
    instead of the target emits the impossible outcome (1, 1)."""
    target, draft = _instance()

    def careless(target, draft_model, context, draft, rand):
        path = draft.paths[0]
        return path + (rand.categorical(draft_model.probs(context + path)),)

    method = methods.Method("careless", drafters.chain(1), careless)
    rng = Sampler(5)
    outputs = {methods.generate(target, draft, method, CONTEXT, NUM_TOKENS, rng=rng) for _ in range(200)}
    assert (1, 1) not in exact.target_distribution(target, CONTEXT, NUM_TOKENS)
    assert (1, 1) in outputs
