"""The IS selections with an s-truncated LP: Khisti et al.'s two-draft selection
(`importance.TruncatedSelection`, `methods.khisti(L, K, truncation=s)`) and the optimal selection law
for k i.i.d. drafts (`importance.TruncatedSetSelection`, `methods.optimal_is(L, K, truncation=s)`).

The closed-form q_I is the exact law of the selected token (brute force over all draws, Fractions);
s >= V gives the full-vocabulary LP (khisti) / reaches alpha* (optimal_is); both methods are exactly
lossless (TV == 0); a planted bug (sets outside the LP pick the HIGHER-ranked draft while q_I still
assumes the lower) is caught."""

from __future__ import annotations

from fractions import Fraction

import itertools

import numpy as np
import pytest

from verispec.reference import methods, models
from verispec.reference.verifiers import importance
from verispec.testing import LosslessnessError, assert_lossless
from verispec.theory.closed_forms import optimal_multidraft_acceptance


def _rational(rng, V):
    weights = rng.integers(1, 9, size=V)
    return np.array([Fraction(int(w), int(weights.sum())) for w in weights], dtype=object)


def _brute_force_law(selection, q1, q2):
    V = len(q1)
    law = [Fraction(0)] * V
    for i in range(V):
        for j in range(V):
            keep = selection.keep(i, j)
            law[i] += q1[i] * q2[j] * keep
            law[j] += q1[i] * q2[j] * (1 - keep)
    return law


@pytest.mark.parametrize("V,s", [(3, 1), (4, 2), (5, 2), (5, 3), (6, 4)])
def test_closed_form_law_is_the_exact_law_of_the_selection(V, s):
    rng = np.random.default_rng(10 * V + s)
    for _ in range(3):
        p, q1, q2 = (_rational(rng, V) for _ in range(3))
        selection = importance.truncated_pair_selection(p, q1, q2, s)
        assert len(selection.omega) == s
        assert list(selection.law) == _brute_force_law(selection, q1, q2)  # exact equality
        assert sum(selection.law) == 1


def test_no_truncation_when_s_covers_the_vocabulary():
    rng = np.random.default_rng(3)
    p, q1, q2 = (rng.dirichlet([1.0] * 5) for _ in range(3))
    selection = importance.truncated_pair_selection(p, q1, q2, 5)
    keep, law = importance.pair_selection(p, q1, q2)
    np.testing.assert_allclose(selection.law, np.asarray(law, dtype=float), rtol=0, atol=1e-15)
    assert all(selection.keep(i, j) == keep[i][j] for i in range(5) for j in range(5))


@pytest.mark.parametrize("L,K", [(1, 2), (1, 3), (2, 2)])
def test_truncated_khisti_is_exactly_lossless(L, K):
    target, draft = models.random_markov(4, 7, rational=True, denominator=32), models.random_markov(
        4, 8, rational=True, denominator=32)
    report = assert_lossless(methods.khisti(L, K, truncation=2), target=target, draft=draft, exact=True,
                             num_tokens=L + 1)
    assert report.num_exact == 1


def test_planted_higher_rank_kept_outside_the_lp_is_caught(monkeypatch):
    original = importance.TruncatedSelection.keep

    def higher_rank(self, x1, x2):
        if x1 != x2 and (x1, x2) not in self.keep_in:
            return 1 if self.rank[x1] > self.rank[x2] else 0
        return original(self, x1, x2)

    monkeypatch.setattr(importance.TruncatedSelection, "keep", higher_rank)
    target, draft = models.random_markov(4, 7, rational=True, denominator=32), models.random_markov(
        4, 8, rational=True, denominator=32)
    with pytest.raises(LosslessnessError):
        assert_lossless(methods.khisti(1, 2, truncation=2), target=target, draft=draft, exact=True,
                        num_tokens=2)


def test_bad_truncation():
    with pytest.raises(ValueError, match="truncation"):
        methods.khisti(2, 2, truncation=0)
    with pytest.raises(TypeError, match="truncation"):
        methods.khisti(2, 2, truncation=1.5)
    assert "truncation" not in methods.khisti(2, 2).params


# ----------------------------------------------------------------------------------------------
# optimal_is: the selection law over sets of k i.i.d. drafts, LP inside the top s tokens
# ----------------------------------------------------------------------------------------------

def _brute_force_set_law(selection, q, k):
    law = [Fraction(0)] * len(q)
    for draws in itertools.product(range(len(q)), repeat=k):
        probability = Fraction(1)
        for t in draws:
            probability *= q[t]
        drafted = tuple(sorted(set(draws)))
        for t, pick in zip(drafted, selection.probabilities(drafted)):
            law[t] += probability * pick
    return law


@pytest.mark.parametrize("V,k,s", [(4, 1, 2), (4, 2, 2), (5, 3, 2), (5, 2, 3), (6, 3, 3)])
def test_set_selection_law_is_the_exact_law_of_the_pick(V, k, s):
    rng = np.random.default_rng(100 * V + 10 * k + s)
    for _ in range(2):
        p, q = _rational(rng, V), _rational(rng, V)
        selection = importance.truncated_set_selection(p, q, k, s)
        assert list(selection.law) == _brute_force_set_law(selection, q, k)  # exact equality
        assert sum(selection.law) == 1


def test_set_selection_reaches_alpha_star_when_s_covers_the_vocabulary():
    rng = np.random.default_rng(5)
    for V, k in [(4, 2), (5, 3)]:
        p, q = rng.dirichlet([1.0] * V), rng.dirichlet([1.0] * V)
        law = importance.truncated_set_selection(p, q, k, V).law
        assert abs(np.minimum(p, law).sum() - optimal_multidraft_acceptance(p, q, k)) < 1e-9


@pytest.mark.parametrize("L,K", [(1, 2), (1, 3)])
def test_truncated_optimal_is_is_exactly_lossless(L, K):
    target, draft = models.random_markov(4, 7, rational=True, denominator=32), models.random_markov(
        4, 8, rational=True, denominator=32)
    report = assert_lossless(methods.optimal_is(L, K, truncation=2), target=target, draft=draft, exact=True,
                             num_tokens=L + 1)
    assert report.num_exact == 1


def test_planted_higher_rank_picked_outside_the_set_lp_is_caught(monkeypatch):
    original = importance.TruncatedSetSelection.probabilities

    def higher_rank(self, drafted_set):
        if tuple(drafted_set) in self.select:
            return original(self, drafted_set)
        highest = max(drafted_set, key=lambda t: self.rank[t])
        return [1 if t == highest else 0 for t in drafted_set]

    monkeypatch.setattr(importance.TruncatedSetSelection, "probabilities", higher_rank)
    target, draft = models.random_markov(4, 7, rational=True, denominator=32), models.random_markov(
        4, 8, rational=True, denominator=32)
    with pytest.raises(LosslessnessError):
        assert_lossless(methods.optimal_is(1, 2, truncation=2), target=target, draft=draft, exact=True,
                        num_tokens=2)
