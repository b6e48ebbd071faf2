"""The hypothesis strategies generate valid objects, and their documented edge cases."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from verispec.reference import exact, methods
from verispec.reference.models import LanguageModel, Mixture, Tempered
from verispec.reference.probability import as_probs
from verispec.testing import Instance
from verispec.testing import strategies as vst

def find(strategy, condition, max_examples=2000):
    """hypothesis.find; raises NoSuchExample when no example out of max_examples satisfies condition."""
    from hypothesis import find as hfind

    return hfind(strategy, condition, settings=settings(max_examples=max_examples, database=None))


# ------------------------------------------------------------------------------------------------
# distributions

@given(vst.distributions(st.integers(1, 5)))
def test_float_distributions_are_valid(d):
    assert d.dtype == np.float64 and d.ndim == 1 and 1 <= len(d) <= 5
    as_probs(d)  # non-negative, finite, sums to 1 within 1e-9


@given(vst.distributions(4, exact=True))
def test_exact_distributions_sum_to_one_exactly(d):
    assert d.dtype == object and len(d) == 4
    assert all(isinstance(x, Fraction) for x in d)
    assert sum(d) == 1 and min(d) >= 0


@pytest.mark.parametrize("exact_", [False, True])
@pytest.mark.parametrize("name,condition", [
    ("one-hot", lambda d: max(d) == 1),
    ("uniform", lambda d: len(set(d)) == 1),
    ("zero", lambda d: min(d) == 0 and max(d) < 1),
    ("near-zero", lambda d: 0 < min(d) < 1e-11),
    ("peaked", lambda d: 0.9 < max(d) < 1),
])
def test_distribution_edge_cases_are_generated(name, condition, exact_):
    d = find(vst.distributions(3, exact=exact_), condition)
    assert condition(d)


def test_vocab_size_one_is_the_point_mass():
    assert list(find(vst.distributions(1), lambda d: True)) == [1.0]


# ------------------------------------------------------------------------------------------------
# models and pairs

def _check_model(model, V, exact_):
    assert isinstance(model, LanguageModel) and model.vocab_size == V
    assert model.exact == exact_
    for prefix in [(), (0,), (V - 1,), (0, V - 1)]:
        p = model.probs(prefix)
        as_probs(p, vocab_size=V)
        if exact_:
            assert sum(p) == 1


@pytest.mark.parametrize("family", vst.FAMILIES)
@pytest.mark.parametrize("exact_", [False, True])
def test_each_family_generates_valid_models(family, exact_):
    @settings(max_examples=15, database=None)
    @given(vst.language_models(3, families=(family,), exact=exact_))
    def check(model):
        _check_model(model, 3, exact_)

    check()


def test_default_families_all_appear():
    for cls_name in ("IID", "Markov", "RandomTree"):
        find(vst.language_models(2), lambda m: type(m).__name__ == cls_name)


@given(vst.model_pairs(st.integers(2, 4), exact=True))
def test_pairs_share_a_vocabulary(pair):
    target, draft = pair
    assert target.vocab_size == draft.vocab_size
    _check_model(target, target.vocab_size, True)
    _check_model(draft, target.vocab_size, True)


@given(vst.model_pairs(3, overlap=1, independent=False))
def test_full_overlap_gives_draft_equal_to_target(pair):
    target, draft = pair
    assert isinstance(draft, Mixture)
    for prefix in [(), (1,), (2, 0)]:
        np.testing.assert_allclose(draft.probs(prefix), target.probs(prefix), atol=1e-15)


def test_pairs_include_both_independent_and_mixed():
    find(vst.model_pairs(2), lambda pair: isinstance(pair[1], Mixture) and 0 < pair[1].weight < 1)
    find(vst.model_pairs(2), lambda pair: not isinstance(pair[1], Mixture))
    with pytest.raises(NoSuchExample):
        find(vst.model_pairs(2, independent=True), lambda pair: isinstance(pair[1], Mixture), max_examples=100)


# ------------------------------------------------------------------------------------------------
# temperatures and instances

@given(vst.temperatures())
def test_temperatures_are_valid(T):
    assert T >= 0 and np.isfinite(T)


def test_temperature_edge_cases():
    assert find(vst.temperatures(), lambda t: t == 0) == 0
    assert find(vst.temperatures(), lambda t: t == 1) == 1
    with pytest.raises(NoSuchExample):
        find(vst.temperatures(include_zero=False), lambda t: t == 0, max_examples=300)


@given(vst.instances(vocab_sizes=(2, 3), max_num_tokens=3, max_context=2, temperatures=vst.temperatures()))
def test_instances_are_valid_and_bounded(inst):
    assert isinstance(inst, Instance)
    assert inst.vocab_size in (2, 3) and inst.draft.vocab_size == inst.vocab_size
    assert 1 <= inst.num_tokens <= 3 and len(inst.context) <= 2
    assert all(0 <= t < inst.vocab_size for t in inst.context)
    assert "target     = models." in inst.describe()


@given(vst.instances(vocab_sizes=(2, 3), exact=True, max_num_tokens=3))
def test_exact_instances_are_rational(inst):
    assert inst.exact


def test_instances_cover_tempered_and_contexts():
    strat = vst.instances(temperatures=vst.temperatures())
    find(strat, lambda i: isinstance(i.target, Tempered) and i.target.temperature == 0)
    find(strat, lambda i: len(i.context) == 2)


@given(vst.instances(vocab_sizes=(2, 3), exact=True, max_num_tokens=3, temperatures=st.sampled_from([0, 1])))
def test_token_verification_is_exactly_lossless_on_generated_instances(inst):
    """The intended use: strategies + exact enumeration in a user's @given test."""
    m = methods.token(1)
    law = exact.output_distribution(inst.target, inst.draft, m, inst.context, inst.num_tokens)
    assert exact.total_variation(law, exact.target_distribution(inst.target, inst.context, inst.num_tokens)) == 0


# ------------------------------------------------------------------------------------------------
# bad knobs

@pytest.mark.parametrize("make,exc,name", [
    (lambda: vst.distributions(0), ValueError, "vocab_size"),
    (lambda: vst.distributions(2.5), TypeError, "vocab_size"),
    (lambda: vst.distributions(3, exact="no"), TypeError, "exact"),
    (lambda: vst.language_models(3, families=("gpt",)), ValueError, "families"),
    (lambda: vst.language_models(3, families=()), ValueError, "families"),
    (lambda: vst.model_pairs(3, overlap=1.5), ValueError, "overlap"),
    (lambda: vst.model_pairs(3, overlap="x"), TypeError, "overlap"),
    (lambda: vst.temperatures(min_value=0), ValueError, "min_value"),
    (lambda: vst.instances(vocab_sizes=()), ValueError, "vocab_sizes"),
    (lambda: vst.instances(max_num_tokens=0), ValueError, "max_num_tokens"),
    (lambda: vst.instances(max_context=-1), ValueError, "max_context"),
    (lambda: vst.instances(temperatures=(0, 1)), TypeError, "temperatures"),
])
def test_bad_knobs_are_named(make, exc, name):
    with pytest.raises(exc, match=name):
        make()


def test_profiles_are_registered_not_loaded():
    from hypothesis import settings as hs

    assert hs.get_profile("verispec-ci").derandomize is True
    assert hs.get_profile("verispec-dev").max_examples == 25
    assert not hs.get_current_profile_name().startswith("verispec")
