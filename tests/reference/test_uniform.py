"""`rand.uniform()`: exact under enumeration (lazy splits at the thresholds), a float when sampling."""

import math
from fractions import Fraction

import numpy as np
import pytest

from verispec.reference import drafters, exact, methods, models
from verispec.reference.methods import Method
from verispec.reference.probability import residual
from verispec.reference.randomness import Sampler, enumerate_law

PROBS = [Fraction(1, 6), Fraction(1, 3), Fraction(0), Fraction(1, 2)]


def cdf_walk(probs, u):
    """The inverse CDF at u: the first token whose cumulative probability exceeds u."""
    cumulative = 0
    for token, p in enumerate(probs):
        cumulative = cumulative + p
        if u < cumulative:
            return token
    return max(t for t, p in enumerate(probs) if p > 0)


def test_cdf_walk_with_one_uniform_is_exact_and_lazy():
    result = enumerate_law(lambda rand: cdf_walk(PROBS, rand.uniform()))
    assert result.law == {0: Fraction(1, 6), 1: Fraction(1, 3), 3: Fraction(1, 2)}
    assert result.num_branches == 3  # one leaf per token of positive probability, nothing drawn up front


def test_cdf_walk_shares_the_uniform_stream_with_sampler_categorical():
    a, b = Sampler(7), Sampler(7)
    floats = np.array([float(p) for p in PROBS])  # [V]
    assert [cdf_walk(floats, a.uniform()) for _ in range(200)] == [b.categorical(floats) for _ in range(200)]


def test_float32_coin_on_a_2_to_the_minus_24_grid():
    p = Fraction(1, 3)
    law = enumerate_law(lambda rand: math.floor(rand.uniform() * 2 ** 24) / 2 ** 24 < p).law
    assert law[True] == Fraction(math.ceil(p * 2 ** 24), 2 ** 24)  # the grid rounds the coin up
    assert law[True] + law[False] == 1 and law[True] != p


def test_affine_maps_and_reflections():
    law = enumerate_law(lambda rand: (1 - rand.uniform()) * 4 + 1 >= 4).law  # 1 - u >= 3/4
    assert law == {True: Fraction(1, 4), False: Fraction(3, 4)}
    law = enumerate_law(lambda rand: rand.uniform() / 3 > Fraction(1, 4)).law  # u > 3/4
    assert law == {True: Fraction(1, 4), False: Fraction(3, 4)}


def test_repeated_comparisons_of_one_uniform_are_consistent():
    def program(rand):
        u = rand.uniform()
        return (u < Fraction(1, 2), u < Fraction(1, 4), u < Fraction(1, 2))

    law = enumerate_law(program).law
    assert law == {(True, True, True): Fraction(1, 4), (True, False, True): Fraction(1, 4),
                   (False, False, False): Fraction(1, 2)}


def test_equality_and_float_of_an_exact_uniform_raise():
    def program(rand):
        return float(rand.uniform())

    with pytest.raises(TypeError, match="uniform"):
        enumerate_law(program)
    with pytest.raises(TypeError, match="uniform"):
        enumerate_law(lambda rand: rand.uniform() == Fraction(1, 2))


def uniform_token_verify(target, draft_model, context, draft, rand):
    """Token verification ported from engine code: accept when u * q(x) <= p(x), correction by a
    CDF walk of the residual with a second uniform (Leviathan et al. 2023, arXiv 2211.17192)."""
    node = ()
    while draft.counts(node):
        x = draft.tokens(node)[0]
        p, q = target.probs(context + node), draft.proposal(node)  # [V], [V]
        if not rand.uniform() * q[x] <= p[x]:
            return node + (cdf_walk(residual(p, q), rand.uniform()),)
        node = node + (x,)
    return node + (cdf_walk(target.probs(context + node), rand.uniform()),)


def uniform_token(draft_length):
    return Method("uniform_token", drafters.chain(draft_length), uniform_token_verify,
                  {"draft_length": draft_length}, model_state_only=True)


def test_u_times_q_acceptance_port_has_the_exact_law_of_token_verification():
    target = models.random_tree(3, seed=1, rational=True)
    draft = models.random_tree(3, seed=2, rational=True)
    ported = exact.output_distribution(target, draft, uniform_token(2), (), 4)
    assert ported == exact.output_distribution(target, draft, methods.token(2), (), 4)
    assert ported == exact.target_distribution(target, (), 4)


def test_u_times_q_acceptance_port_is_proved_for_every_pair():
    from verispec.formal import prove

    result = prove(uniform_token(1), 2, 1, timeout=600)
    assert result.verdict == "proved", result.summary()


def test_sampling_mode_draws_floats():
    rand = Sampler(0)
    draws = [rand.uniform() for _ in range(100)]
    assert all(isinstance(u, float) and 0 <= u < 1 for u in draws)
