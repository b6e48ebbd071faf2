"""One-position, K-draft closed forms (nss, rrs, rrsw, spectr, alpha*) against the reference
enumerator: E[tau] of methods.get(name, draft_length=1, num_paths=K) with i.i.d. models is exactly
the one-step acceptance P(Y in drafts)."""

import itertools
from fractions import Fraction

import numpy as np
import pytest

from verispec.reference import exact, methods, models
from verispec.theory import closed_forms as cf

FORMS = {"nss": cf.nss_acceptance, "rrs": cf.rrs_acceptance, "rrsw": cf.rrsw_acceptance,
         "spectr": cf.spectr_acceptance}


def _pairs(count, seed=0):
    rng = np.random.default_rng(seed)
    for i in range(count):
        V = int(rng.integers(2, 5))
        K = int(rng.integers(1, 4))
        conc = float(rng.choice([0.3, 1.0, 3.0]))
        yield i, V, K, rng.dirichlet(np.full(V, conc)), rng.dirichlet(np.full(V, conc))


def _brute_alpha(p, q, K):
    V = len(p)
    return min(sum(p[t] for t in H) + 1 - sum(q[t] for t in H) ** K
               for r in range(V + 1) for H in itertools.combinations(range(V), r))


def _one_step_exact(name, p, q, K):
    return exact.expected_accepted_length(models.iid(p), models.iid(q),
                                          methods.get(name, draft_length=1, num_paths=K))


@pytest.mark.parametrize("name", sorted(FORMS))
def test_one_step_closed_form_matches_enumeration(name):
    for i, V, K, p, q in _pairs(25, seed=sorted(FORMS).index(name)):
        assert abs(FORMS[name](p, q, K) - float(_one_step_exact(name, p, q, K))) < 1e-12, (i, p, q, K)


@pytest.mark.parametrize("name", ["nss", "rrs", "rrsw"])
def test_one_step_closed_form_exact_in_fractions(name):
    p = [Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)]
    q = [Fraction(1, 6), Fraction(1, 4), Fraction(7, 12)]
    value = FORMS[name](p, q, 2)
    assert isinstance(value, Fraction)
    assert value == _one_step_exact(name, p, q, 2)


def test_alpha_star_is_min_over_all_token_sets():
    for i, V, K, p, q in _pairs(60, seed=3):
        assert abs(cf.optimal_multidraft_acceptance(p, q, K) - _brute_alpha(p, q, K)) < 1e-12
        assert cf.sorted_prefix_dual(p, q, K) == pytest.approx(cf.optimal_multidraft_acceptance(p, q, K), abs=1e-15)


def test_every_iid_rule_is_below_alpha_star_and_rrsw_below_its_own():
    for i, V, K, p, q in _pairs(40, seed=5):
        alpha = cf.optimal_multidraft_acceptance(p, q, K)
        for name in ("nss", "rrs", "spectr"):
            assert FORMS[name](p, q, K) <= alpha + 1e-12, (name, i)
        assert cf.rrsw_acceptance(p, q, K) <= cf.sorted_prefix_dual(p, q, K, replacement=False) + 1e-12


def test_gbv_at_one_position_is_below_alpha_star():
    for i, V, K, p, q in _pairs(15, seed=11):
        assert float(_one_step_exact("gbv", p, q, K)) <= cf.optimal_multidraft_acceptance(p, q, K) + 1e-12


def test_single_draft_reduces_to_one_minus_tv():
    for i, V, K, p, q in _pairs(20, seed=7):
        overlap = np.minimum(p, q).sum()
        for form in (cf.optimal_multidraft_acceptance, cf.rrs_acceptance, cf.rrsw_acceptance,
                     cf.spectr_acceptance):
            assert form(p, q, 1) == pytest.approx(overlap, abs=1e-12)
        assert cf.nss_acceptance(p, q, 1) == pytest.approx(float(np.dot(p, q)), abs=1e-12)


def test_gap_example_strict_ordering():
    # A V=5, K=2 instance of our own: every practical rule is
    # strictly below alpha*.
    p = np.array([0.35, 0.25, 0.2, 0.12, 0.08])
    q = np.array([0.1, 0.15, 0.2, 0.25, 0.3])
    alpha = cf.optimal_multidraft_acceptance(p, q, 2)
    values = {name: form(p, q, 2) for name, form in FORMS.items()}
    assert all(values[n] < alpha - 1e-3 for n in ("nss", "rrs", "spectr"))
    assert values["nss"] < values["rrs"] <= values["spectr"] + 1e-12


def test_exact_alpha_star_in_fractions():
    p = [Fraction(2, 3), Fraction(1, 3)]
    q = [Fraction(1, 3), Fraction(2, 3)]
    # H = {} -> 1; H = {1} -> 1/3 + 1 - 4/9 = 8/9; H = {0, 1} -> 1. alpha* = 8/9.
    assert cf.optimal_multidraft_acceptance(p, q, 2) == Fraction(8, 9)


@pytest.mark.parametrize("form", [cf.optimal_multidraft_acceptance, *FORMS.values()])
def test_bad_input(form):
    with pytest.raises(ValueError, match="p"):
        form([0.5, 0.6], [0.5, 0.5], 2)
    with pytest.raises(ValueError, match="q"):
        form([0.5, 0.5], [0.2, 0.3, 0.5], 2)
    with pytest.raises(ValueError, match="num_paths"):
        form([0.5, 0.5], [0.5, 0.5], 0)
    with pytest.raises(TypeError, match="num_paths"):
        form([0.5, 0.5], [0.5, 0.5], 2.0)
