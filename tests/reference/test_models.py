"""Toy language models: reproducibility, exactness, temperature, mixture, state keys."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, strategies as st

from verispec.reference import exact, methods, models
from verispec.reference.probability import is_exact

F = Fraction
seeds = st.integers(0, 2 ** 32 - 1)


def _prefixes(V, max_len):
    for n in range(max_len + 1):
        yield from itertools.product(range(V), repeat=n)


# ------------------------------------------------------------------------------ random_tree


@given(seed=seeds, V=st.integers(2, 4))
def test_random_tree_depends_only_on_seed_and_prefix(seed, V):
    """Two instances with one seed agree on every prefix, whatever order they are queried in."""
    a = models.random_tree(V, seed)
    b = models.random_tree(V, seed)
    prefixes = list(_prefixes(V, 2))
    first = {prefix: a.probs(prefix).copy() for prefix in prefixes}
    for prefix in reversed(prefixes):
        np.testing.assert_array_equal(b.probs(prefix), first[prefix])
        assert b.probs(list(prefix)).tolist() == first[prefix].tolist()  # list prefixes too


def test_random_tree_seeds_and_prefixes_differ():
    a, b = models.random_tree(3, 0), models.random_tree(3, 1)
    assert not np.allclose(a.probs(()), b.probs(()))
    assert not np.allclose(a.probs((0,)), a.probs((1,)))
    assert not np.allclose(a.probs((0,)), a.probs((0, 0)))


@given(seed=seeds, V=st.integers(2, 4), concentration=st.sampled_from((0.1, 1.0, 10.0)))
def test_random_tree_float_conditionals_are_distributions(seed, V, concentration):
    model = models.random_tree(V, seed, concentration)
    assert not model.exact
    for prefix in _prefixes(V, 2):
        p = model.probs(prefix)
        assert p.shape == (V,) and p.dtype == np.float64
        assert np.all(p >= 0) and abs(p.sum() - 1) <= 1e-12


@given(seed=seeds, V=st.integers(2, 4), concentration=st.sampled_from((0.1, 1.0, 10.0)),
       denominator=st.sampled_from((4, 16, 64)))
def test_rational_random_tree_sums_exactly_to_one(seed, V, concentration, denominator):
    rational = models.random_tree(V, seed, concentration, rational=True, denominator=denominator)
    real = models.random_tree(V, seed, concentration)
    assert rational.exact
    for prefix in _prefixes(V, 2):
        p = rational.probs(prefix)
        assert is_exact(p) and all(isinstance(x, Fraction) for x in p)
        assert sum(p) == 1 and all(x >= 0 for x in p)
        assert all((x * denominator).denominator == 1 for x in p)  # multiples of 1/denominator
        # rounding of the float model: each entry moves by less than 1/denominator
        assert np.all(np.abs(np.asarray(p, dtype=float) - real.probs(prefix)) < 1 / denominator)


def test_coarse_rounding_makes_zeros():
    """Low concentration + coarse grid gives zero entries (the edge cases exact tests need)."""
    model = models.random_tree(4, 3, concentration=0.1, rational=True, denominator=8)
    assert any(x == 0 for prefix in _prefixes(4, 1) for x in model.probs(prefix))


# ----------------------------------------------------------------------------- Markov, iid


@given(seed=seeds, V=st.integers(2, 4), rational=st.booleans())
def test_random_markov_rows_and_state_key(seed, V, rational):
    model = models.random_markov(V, seed, rational=rational)
    assert model.exact == rational
    assert models.random_markov(V, seed, rational=rational).probs((0,)).tolist() == model.probs((0,)).tolist()
    for row in [model.initial] + list(model.transition):
        assert (sum(row) == 1) if rational else abs(row.sum() - 1) <= 1e-12
    # probs(prefix + s) depends only on (state_key(prefix), s)
    by_state: dict = {}
    for prefix in _prefixes(V, 3):
        for suffix in _prefixes(V, 1):
            key = (model.state_key(prefix), suffix)
            value = tuple(model.probs(prefix + suffix))
            assert by_state.setdefault(key, value) == value
    assert model.state_key(()) == ()
    assert model.state_key((2, 0, 1)) == (1,)


def test_markov_follows_the_last_token():
    initial = [F(1, 2), F(1, 2)]
    transition = [[F(1, 4), F(3, 4)], [F(1), F(0)]]
    model = models.markov(initial, transition)
    assert model.exact
    assert list(model.probs(())) == initial
    assert list(model.probs((1, 0))) == transition[0]
    assert list(model.probs((0, 1))) == transition[1]
    law = exact.target_distribution(model, (), 2)
    assert law == {(0, 0): F(1, 8), (0, 1): F(3, 8), (1, 0): F(1, 2)}


def test_markov_rational_flag_rounds():
    model = models.markov([0.3, 0.7], [[0.5, 0.5], [0.1, 0.9]], rational=True, denominator=10)
    assert model.exact
    assert list(model.probs(())) == [F(3, 10), F(7, 10)]
    assert list(model.probs((1,))) == [F(1, 10), F(9, 10)]


def test_iid_ignores_the_prefix():
    model = models.iid([F(1, 5), F(4, 5)])
    assert model.exact and model.state_key((1, 0, 1)) == ()
    for prefix in _prefixes(2, 3):
        assert list(model.probs(prefix)) == [F(1, 5), F(4, 5)]
    assert exact.target_distribution(model, (), 2) == {
        (0, 0): F(1, 25), (0, 1): F(4, 25), (1, 0): F(4, 25), (1, 1): F(16, 25)}
    floaty = models.iid([0.25, 0.75])
    assert not floaty.exact and floaty.probs((0, 1)).tolist() == [0.25, 0.75]
    rounded = models.iid([0.33, 0.67], rational=True, denominator=3)
    assert rounded.exact and list(rounded.probs(())) == [F(1, 3), F(2, 3)]


def test_table_lookup_and_default():
    model = models.table({(): [F(1, 2), F(1, 2)], (1,): [F(0), F(1)]}, default=[F(1, 3), F(2, 3)])
    assert model.exact
    assert list(model.probs((1,))) == [0, 1]
    assert list(model.probs((0,))) == [F(1, 3), F(2, 3)]
    no_default = models.table({(): [0.5, 0.5]})
    with pytest.raises(KeyError):
        no_default.probs((0,))


def test_probs_are_cached():
    model = models.random_tree(3, 5)
    assert model.probs((0, 1)) is model.probs((0, 1))


# ------------------------------------------------------------------------------ temperature


@pytest.mark.parametrize("probs, argmax", [
    ([0.4, 0.4, 0.2], 0),
    ([0.2, 0.4, 0.4], 1),
    ([0.1, 0.2, 0.3, 0.3, 0.1], 2),
    ([0.25, 0.25, 0.25, 0.25], 0),
    ([0.0, 0.0, 1.0], 2),
])
def test_temperature_zero_is_argmax_with_ties_to_lowest_id(probs, argmax):
    model = models.temperature(models.iid(probs), 0)
    expected = np.zeros(len(probs))
    expected[argmax] = 1
    np.testing.assert_array_equal(model.probs(()), expected)


def test_temperature_zero_of_exact_model_is_exact():
    model = models.temperature(models.iid([F(1, 3), F(1, 3), F(1, 3)]), 0)
    assert model.exact
    assert list(model.probs(())) == [1, 0, 0]
    assert all(isinstance(x, Fraction) for x in model.probs(()))


@given(seed=seeds, V=st.integers(2, 4), rational=st.booleans())
def test_temperature_one_is_the_identity(seed, V, rational):
    base = models.random_tree(V, seed, rational=rational)
    model = models.temperature(base, 1)
    assert model.exact == rational
    for prefix in _prefixes(V, 2):
        assert model.probs(prefix) is base.probs(prefix)


def test_temperature_scales_log_probabilities():
    base = models.iid([0.1, 0.3, 0.6, 0.0])
    half = models.temperature(base, 0.5).probs(())
    np.testing.assert_allclose(half, np.array([0.01, 0.09, 0.36, 0.0]) / 0.46, rtol=1e-13)
    two = models.temperature(base, 2).probs(())
    root = np.sqrt([0.1, 0.3, 0.6, 0.0])
    np.testing.assert_allclose(two, root / root.sum(), rtol=1e-13)
    assert two[3] == 0 and half[3] == 0  # zeros stay zeros
    assert not models.temperature(models.iid([F(1, 4), F(3, 4)]), 2).exact


def test_temperature_keeps_the_base_state_key():
    base = models.random_markov(3, 1)
    assert models.temperature(base, 0.5).state_key((2, 1)) == base.state_key((2, 1)) == (1,)


# ---------------------------------------------------------------------------------- mixture


def test_mixture_is_the_convex_combination():
    a = models.iid([F(1), F(0)])
    b = models.markov([F(0), F(1)], [[F(1, 2), F(1, 2)], [F(1, 4), F(3, 4)]])
    mix = models.mixture(a, b, F(1, 4))
    assert mix.exact
    assert list(mix.probs(())) == [F(3, 4), F(1, 4)]
    assert list(mix.probs((1,))) == [F(3, 4) + F(1, 16), F(3, 16)]
    assert mix.state_key((0, 1)) == ((), (1,))
    assert list(models.mixture(a, b, 0).probs(())) == [1, 0]
    assert list(models.mixture(a, b, 1).probs(())) == [0, 1]
    assert not models.mixture(a, b, 0.25).exact


def test_mixture_of_float_models_is_float64():
    a, b = models.iid([0.2, 0.8]), models.iid([0.6, 0.4])
    p = models.mixture(a, b, 0.5).probs(())
    assert p.dtype == np.float64
    np.testing.assert_allclose(p, [0.4, 0.6], rtol=1e-15)


def test_mixture_with_fraction_weight_of_float_models():
    a, b = models.random_markov(3, 5, 0.3), models.random_markov(3, 6, 0.3)
    draft = models.mixture(a, b, F(1, 2))
    assert not draft.exact
    method = methods.get("rrs", draft_length=2, num_paths=2)
    law = exact.output_distribution(a, draft, method, (), 2)  # raises ValueError today
    assert exact.total_variation(law, exact.target_distribution(a, (), 2)) <= 1e-12
    assert draft.probs(()).dtype == np.float64


# ----------------------------------------------------------------------------- target law


@given(seed=seeds, V=st.integers(2, 3), N=st.integers(1, 3), rational=st.booleans())
def test_target_distribution_is_the_chain_rule(seed, V, N, rational):
    model = models.random_tree(V, seed, concentration=0.3, rational=rational, denominator=8)
    context = (V - 1,)
    law = exact.target_distribution(model, context, N)
    for sequence in itertools.product(range(V), repeat=N):
        prob = 1
        for i, t in enumerate(sequence):
            prob = prob * model.probs(context + sequence[:i])[t]
        if prob == 0:
            assert sequence not in law  # zero-probability sequences are left out
        elif rational:
            assert law[sequence] == prob
        else:
            assert abs(law[sequence] - prob) <= 1e-15
    assert (sum(law.values()) == 1) if rational else abs(sum(law.values()) - 1) <= 1e-12
