"""The Randomness interface: the exact enumerator and the numpy Sampler."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, strategies as st

from verispec.reference.randomness import (Sampler, enumerate_law, law_is_exact, total_mass)

F = Fraction


def _frac(values):
    return np.array([F(v) for v in values], dtype=object)


# ---------------------------------------------------------------- enumerate_law: exact laws


def test_fair_coin():
    result = enumerate_law(lambda r: r.bernoulli(F(1, 2)))
    assert result.law == {True: F(1, 2), False: F(1, 2)}
    assert result.num_branches == 2
    assert law_is_exact(result.law)


def test_biased_coin_float():
    result = enumerate_law(lambda r: r.bernoulli(0.25))
    assert result.law == pytest.approx({True: 0.25, False: 0.75}, abs=1e-15)
    assert not law_is_exact(result.law)


def test_categorical_with_zeros():
    probs = _frac([F(1, 6), 0, F(1, 3), 0, F(1, 2)])
    result = enumerate_law(lambda r: r.categorical(probs))
    assert result.law == {0: F(1, 6), 2: F(1, 3), 4: F(1, 2)}
    assert result.num_branches == 3  # one leaf per token of positive probability
    assert total_mass(result.law) == 1


def test_nested_draws():
    """Heads: a die on {0,1,2} with probs (1/2,1/4,1/4); tails: a second coin with bias 1/3."""
    die = _frac([F(1, 2), F(1, 4), F(1, 4)])

    def program(r):
        if r.bernoulli(F(1, 2)):
            return ("die", r.categorical(die))
        return ("coin", r.bernoulli(F(1, 3)))

    result = enumerate_law(program)
    assert result.law == {
        ("die", 0): F(1, 4), ("die", 1): F(1, 8), ("die", 2): F(1, 8),
        ("coin", True): F(1, 6), ("coin", False): F(1, 3),
    }
    assert result.num_branches == 5


def test_dependent_draws_sum_of_two_dice():
    """The draws may depend on earlier ones and outcomes may merge: law of a sum."""
    d3 = _frac([F(1, 3)] * 3)

    def program(r):
        first = r.categorical(d3)
        second = r.categorical(d3) if first < 2 else 0
        return first + second

    result = enumerate_law(program)
    # first in {0, 1}: uniform second; first = 2: sum 2.
    expected: dict = {}
    for a, b in itertools.product(range(2), range(3)):
        expected[a + b] = expected.get(a + b, 0) + F(1, 9)
    expected[2] += F(1, 3)
    assert result.law == expected
    assert result.num_branches == 7


def test_sequence_of_coins_counts_every_leaf():
    result = enumerate_law(lambda r: tuple(r.bernoulli(F(1, 3)) for _ in range(4)))
    assert result.num_branches == 16
    assert len(result.law) == 16
    for outcome, prob in result.law.items():
        heads = sum(outcome)
        assert prob == F(1, 3) ** heads * F(2, 3) ** (4 - heads)


@pytest.mark.parametrize("p", [0, 1, F(0), F(1), 0.0, 1.0])
def test_certain_bernoulli_never_branches(p):
    result = enumerate_law(lambda r: tuple(r.bernoulli(p) for _ in range(10)))
    assert result.num_branches == 1
    assert result.law == {(bool(p),) * 10: 1}


def test_point_mass_categorical_never_branches():
    one_hot = _frac([0, 1, 0])
    result = enumerate_law(lambda r: (r.categorical(one_hot), r.categorical(np.array([0.0, 0.0, 1.0]))))
    assert result.law == {(1, 2): 1}
    assert result.num_branches == 1


def test_max_branches_guard():
    program = lambda r: tuple(r.bernoulli(F(1, 2)) for _ in range(6))  # noqa: E731 - 64 leaves
    assert enumerate_law(program, max_branches=64).num_branches == 64
    with pytest.raises(RuntimeError, match="max_branches"):
        enumerate_law(program, max_branches=10)


@given(weights=st.lists(st.integers(0, 5), min_size=1, max_size=6).filter(any),
       draws=st.integers(1, 3))
def test_enumerated_iid_categoricals_are_the_product_law(weights, draws):
    total = sum(weights)
    probs = _frac([F(w, total) for w in weights])
    result = enumerate_law(lambda r: tuple(r.categorical(probs) for _ in range(draws)))
    support = [i for i, w in enumerate(weights) if w]
    assert result.num_branches == len(support) ** draws
    expected = {}
    for outcome in itertools.product(support, repeat=draws):
        prob = F(1)
        for t in outcome:
            prob *= probs[t]
        expected[outcome] = prob
    assert result.law == expected


def test_enumerator_rejects_invalid_probabilities():
    with pytest.raises(ValueError, match="bernoulli"):
        enumerate_law(lambda r: r.bernoulli(F(3, 2)))
    with pytest.raises(ValueError, match="categorical"):
        enumerate_law(lambda r: r.categorical(_frac([F(1, 2), F(1, 3)])))
    with pytest.raises(ValueError, match="categorical"):
        enumerate_law(lambda r: r.categorical(np.array([0.7, 0.7])))


# ---------------------------------------------------------------------------------- Sampler


def _draws(sampler, n=200):
    probs = np.array([0.1, 0.2, 0.3, 0.4])
    return [(sampler.bernoulli(0.3), sampler.categorical(probs)) for _ in range(n)]


def test_sampler_is_deterministic_given_a_seed():
    assert _draws(Sampler(12345)) == _draws(Sampler(12345))
    assert _draws(Sampler(np.random.SeedSequence(7))) == _draws(Sampler(np.random.SeedSequence(7)))
    assert _draws(Sampler(np.random.default_rng(3))) == _draws(Sampler(3))


def test_sampler_seeds_differ():
    assert _draws(Sampler(1)) != _draws(Sampler(2))


def test_sampler_uses_the_given_generator():
    generator = np.random.default_rng(0)
    sampler = Sampler(generator)
    assert sampler.generator is generator


class _Uniforms:
    """A stand-in Generator whose random() returns a fixed stream of uniforms."""

    def __init__(self, values):
        self.values = list(values)

    def random(self):
        return self.values.pop(0)


def _sampler_with(values):
    sampler = Sampler(0)
    sampler.generator = _Uniforms(values)
    return sampler


def test_sampler_bernoulli_is_u_less_than_p():
    sampler = _sampler_with([0.3, 0.2999, 0.0, 0.999999])
    assert sampler.bernoulli(0.3) is False
    assert sampler.bernoulli(0.3) is True
    assert sampler.bernoulli(0) is False  # u = 0 is not < 0
    assert sampler.bernoulli(1) is True


def test_sampler_categorical_is_the_inverse_cdf():
    probs = np.array([0.25, 0.25, 0.5])
    sampler = _sampler_with([0.0, 0.2499, 0.25, 0.5, 0.9999])
    assert [sampler.categorical(probs) for _ in range(5)] == [0, 0, 1, 2, 2]


def test_sampler_categorical_exact_probs():
    sampler = _sampler_with([0.1, 0.6])
    probs = _frac([F(1, 2), F(1, 2)])
    assert [sampler.categorical(probs) for _ in range(2)] == [0, 1]


EDGE_UNIFORMS = [0.0, 2.0 ** -53, 0.5, 1 - 2.0 ** -53, np.nextafter(1.0, 0.0)]


@pytest.mark.parametrize("probs", [
    [0.0, 0.3, 0.7, 0.0],
    [0.0, 0.0, 1.0],
    [0.5, 0.0, 0.5, 0.0, 0.0],
    [0.1] * 10 + [0.0],  # sums to 0.9999999999999999: u near 1 overshoots the cumsum
    [1e-300, 0.0, 1.0 - 1e-16, 0.0],
])
def test_sampler_never_returns_a_zero_probability_token_at_edge_uniforms(probs):
    probs = np.array(probs)
    sampler = _sampler_with(EDGE_UNIFORMS)
    for _ in EDGE_UNIFORMS:
        assert probs[sampler.categorical(probs)] > 0


@given(seed=st.integers(0, 2 ** 63), weights=st.lists(st.integers(0, 3), min_size=1, max_size=8).filter(any))
def test_sampler_never_returns_a_zero_probability_token(seed, weights):
    probs = np.array(weights, dtype=float) / sum(weights)
    sampler = Sampler(seed)
    for _ in range(50):
        assert probs[sampler.categorical(probs)] > 0


def test_sampler_rejects_bad_probabilities():
    sampler = Sampler(0)
    with pytest.raises(ValueError, match="bernoulli"):
        sampler.bernoulli(1.5)
    with pytest.raises(ValueError, match="bernoulli"):
        sampler.bernoulli(float("nan"))
    with pytest.raises(ValueError, match="categorical"):
        sampler.categorical(np.array([0.5, 0.6]))
    with pytest.raises(ValueError, match="categorical"):
        sampler.categorical(np.array([[0.5, 0.5]]))
