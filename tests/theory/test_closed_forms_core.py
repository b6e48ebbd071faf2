"""Closed-form E[tau] of token and block verification against exact enumeration.

closed_forms.token_expected_accepted_length / block_expected_accepted_length must equal
exact.expected_accepted_length (= exact.block_efficiency - 1) of the matching method: exactly for
rational models, within 1e-12 in float64. leviathan_block_efficiency((1 - a^(L+1))/(1 - a))
must equal the exact block efficiency of token verification for i.i.d. models, whose
per-position acceptance is the constant a = sum_x min(p(x), q(x)).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, strategies as st

from verispec.reference import exact, methods, models
from verispec.theory import closed_forms

from tests.reference._instances import build_models, pair_specs

TOLERANCE = 1e-12

CLOSED_FORMS = {
    "token": closed_forms.token_expected_accepted_length,
    "block": closed_forms.block_expected_accepted_length,
}


@pytest.mark.parametrize("name", ["token", "block"])
@given(spec=pair_specs(rational=True))
def test_closed_form_equals_enumeration_exactly(name, spec):
    target, draft = build_models(spec)
    method = methods.get(name, draft_length=spec.L)
    closed = CLOSED_FORMS[name](target, draft, spec.context, spec.L)
    enumerated = exact.expected_accepted_length(target, draft, method, spec.context)
    assert isinstance(closed, (Fraction, int)) and isinstance(enumerated, (Fraction, int))
    assert closed == enumerated
    assert exact.block_efficiency(target, draft, method, spec.context) - 1 == closed


@pytest.mark.parametrize("name", ["token", "block"])
@given(spec=pair_specs(rational=False))
def test_closed_form_equals_enumeration_float64(name, spec):
    target, draft = build_models(spec)
    method = methods.get(name, draft_length=spec.L)
    closed = CLOSED_FORMS[name](target, draft, spec.context, spec.L)
    enumerated = exact.expected_accepted_length(target, draft, method, spec.context)
    assert abs(closed - enumerated) <= TOLERANCE
    assert abs(exact.block_efficiency(target, draft, method, spec.context) - 1 - closed) <= TOLERANCE


@given(spec=pair_specs(rational=True))
def test_block_closed_form_dominates_token(spec):
    target, draft = build_models(spec)
    token = closed_forms.token_expected_accepted_length(target, draft, spec.context, spec.L)
    block = closed_forms.block_expected_accepted_length(target, draft, spec.context, spec.L)
    assert 0 <= token <= block <= spec.L


def test_closed_forms_on_the_two_token_example():
    target = models.iid([Fraction(2, 3), Fraction(1, 3)])
    draft = models.iid([Fraction(1, 3), Fraction(2, 3)])
    assert closed_forms.token_expected_accepted_length(target, draft, (), 2) == Fraction(10, 9)
    assert closed_forms.block_expected_accepted_length(target, draft, (), 2) == Fraction(11, 9)


def test_closed_forms_with_identical_models_accept_everything():
    """draft == target: every draft token is accepted, E[tau] = L for both rules."""
    model = models.random_tree(3, 11, rational=True)
    for L in (1, 2, 3):
        assert closed_forms.token_expected_accepted_length(model, model, (1,), L) == L
        assert closed_forms.block_expected_accepted_length(model, model, (1,), L) == L


def _iid_rational(seed: int, V: int, denominator: int) -> np.ndarray:
    markov = models.random_markov(V, seed, 0.5, rational=True, denominator=denominator)
    return markov.initial


@given(seed=st.integers(0, 2 ** 32 - 1), V=st.integers(2, 4), L=st.integers(1, 3),
       denominator=st.sampled_from((4, 8, 64)))
def test_leviathan_formula_is_token_block_efficiency_for_iid_models(seed, V, L, denominator):
    """Exact: for i.i.d. p and q, token's block efficiency is (1 - a^(L+1))/(1 - a),
    a = sum min(p, q); including a = 1 (p == q happens with coarse denominators) -> L + 1."""
    p = _iid_rational(seed, V, denominator)
    q = _iid_rational(seed + 1, V, denominator)
    target, draft = models.iid(p), models.iid(q)
    a = sum(min(x, y) for x, y in zip(p, q))
    efficiency = exact.block_efficiency(target, draft, methods.get("token", draft_length=L))
    assert closed_forms.leviathan_block_efficiency(a, L) == efficiency
    rates = exact.acceptance_rates(target, draft, methods.get("token", draft_length=L))
    # One rate per reachable tau (then a final 0): [a] * L + [0], or just [0] when a == 0.
    assert rates == ([a] * L + [0] if a > 0 else [0])


@given(seed=st.integers(0, 2 ** 32 - 1), V=st.integers(2, 4), L=st.integers(1, 3),
       temperature=st.sampled_from((0.5, 1, 2)))
def test_leviathan_formula_float64(seed, V, L, temperature):
    p = models.temperature(models.random_markov(V, seed, 1.0), temperature).probs(())
    q = models.random_markov(V, seed + 1, 1.0).probs(())
    a = float(np.minimum(p, q).sum())
    efficiency = exact.block_efficiency(models.iid(p), models.iid(q), methods.get("token", draft_length=L))
    assert abs(closed_forms.leviathan_block_efficiency(a, L) - efficiency) <= TOLERANCE


def test_leviathan_formula_values():
    assert closed_forms.leviathan_block_efficiency(Fraction(1, 2), 2) == Fraction(7, 4)
    assert closed_forms.leviathan_block_efficiency(0, 3) == 1
    assert closed_forms.leviathan_block_efficiency(1, 3) == 4
    assert closed_forms.leviathan_block_efficiency(Fraction(2, 3), 3) == Fraction(65, 27)


def test_leviathan_formula_does_not_describe_markov_models():
    """With a prefix-dependent acceptance the constant-rate formula is wrong in general (so the
    i.i.d. agreement above is not automatic)."""
    target = models.markov([Fraction(1, 2), Fraction(1, 2)],
                           [[Fraction(1), Fraction(0)], [Fraction(0), Fraction(1)]])
    draft = models.iid([Fraction(1, 2), Fraction(1, 2)])
    rates = exact.acceptance_rates(target, draft, methods.get("token", draft_length=2))
    assert rates[0] == 1 and rates[1] == Fraction(1, 2)
    efficiency = exact.block_efficiency(target, draft, methods.get("token", draft_length=2))
    assert efficiency == Fraction(5, 2)
    assert closed_forms.leviathan_block_efficiency(rates[0], 2) != efficiency


@pytest.mark.parametrize("bad, exc, match", [
    (dict(draft_length=0), ValueError, "draft_length"),
    (dict(draft_length=1.5), TypeError, "draft_length"),
    (dict(context=(7,)), ValueError, "context"),
])
@pytest.mark.parametrize("name", ["token", "block"])
def test_closed_forms_reject_bad_input(name, bad, exc, match):
    target, draft = models.iid([0.5, 0.5]), models.iid([0.25, 0.75])
    kwargs = {"context": (), "draft_length": 2, **bad}
    with pytest.raises(exc, match=match):
        CLOSED_FORMS[name](target, draft, **kwargs)


@pytest.mark.parametrize("name", ["token", "block"])
def test_closed_forms_reject_vocab_mismatch(name):
    with pytest.raises(ValueError, match="draft"):
        CLOSED_FORMS[name](models.iid([0.5, 0.5]), models.iid([0.2, 0.3, 0.5]), (), 2)


@pytest.mark.parametrize("a", [-0.1, 1.5, float("nan")])
def test_leviathan_rejects_bad_rate(a):
    with pytest.raises(ValueError, match="acceptance_rate"):
        closed_forms.leviathan_block_efficiency(a, 2)


def test_leviathan_rejects_bad_length():
    with pytest.raises(ValueError, match="draft_length"):
        closed_forms.leviathan_block_efficiency(0.5, 0)


@pytest.mark.parametrize("name", ["token", "block"])
def test_closed_forms_reject_missing_draft(name):
    with pytest.raises(TypeError, match="draft"):
        CLOSED_FORMS[name](models.iid([0.5, 0.5]), None, (), 2)
