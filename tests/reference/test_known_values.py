"""Known exact values and exact relations between methods (docs/algorithms.md, docs/theory.md).

- V=2, L=2, q=(1/3,2/3), p=(2/3,1/3) i.i.d.: token E[tau] = 10/9, block E[tau] = 11/9.
- block E[tau] >= token E[tau] on every instance (block attains the single-path LP optimum).
- gbv with K = 1 is block, exactly (whole iteration laws in Fractions).
- at target temperature 0, block's iteration law is token's.
- gbv's selected path X* has the law of the best-of-K path, and its L = 1 acceptance is
  sum_x min(p(x), q_skew(x)).

Not asserted: gbv >= block for K >= 2. It does not hold for the rule as specified: with
p = (1/2, 1/2), q = (3/5, 2/5), L = 1, K = 3, the best-of-3 path is token 1 with probability
98/125 > p(1), so gbv accepts 179/250 = 0.716 < block's 9/10 (see
`test_gbv_can_be_below_block`). Other reported values (V=3,L=2,K=2: gbv 1.643 vs block
1.469; V=2,L=3,K=3: gbv 2.544 vs 2.241) were not reproduced by the seeded families tried.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest
from hypothesis import given, strategies as st

from verispec.reference import drafters, exact, methods, models
from verispec.reference.randomness import enumerate_law, law_is_exact
from verispec.reference.verifiers.gbv import best_path, rank_key

from ._instances import Spec, build_models, pair_specs

F = Fraction
P_EXAMPLE = [F(2, 3), F(1, 3)]
Q_EXAMPLE = [F(1, 3), F(2, 3)]


def _example_pair():
    return models.iid(P_EXAMPLE), models.iid(Q_EXAMPLE)


def test_token_two_token_example_is_10_over_9():
    target, draft = _example_pair()
    value = exact.expected_accepted_length(target, draft, methods.get("token", draft_length=2))
    assert isinstance(value, Fraction) and value == F(10, 9)
    assert exact.block_efficiency(target, draft, methods.get("token", draft_length=2)) == F(19, 9)


def test_block_two_token_example_is_11_over_9():
    target, draft = _example_pair()
    value = exact.expected_accepted_length(target, draft, methods.get("block", draft_length=2))
    assert isinstance(value, Fraction) and value == F(11, 9)


def test_two_token_example_accepted_length_laws():
    """The full laws of tau behind 10/9 and 11/9 (derived by hand from the rules):
    token: P(tau >= 1) = 2/3, P(tau = 2) = 4/9; block: P(tau = 2) = 5/9, P(tau = 1) = 1/9."""
    target, draft = _example_pair()
    token = exact.accepted_length_distribution(target, draft, methods.get("token", draft_length=2))
    block = exact.accepted_length_distribution(target, draft, methods.get("block", draft_length=2))
    assert token == {0: F(1, 3), 1: F(2, 9), 2: F(4, 9)}
    assert block == {0: F(1, 3), 1: F(1, 9), 2: F(5, 9)}
    assert exact.acceptance_rates(target, draft, methods.get("token", draft_length=2)) == \
        [F(2, 3), F(2, 3), 0]


def test_leviathan_constant_rate_example():
    """i.i.d. models accept each token with a = sum min(p, q) = 2/3 under token verification."""
    target, draft = _example_pair()
    rates = exact.acceptance_rates(target, draft, methods.get("token", draft_length=3))
    assert rates[:3] == [F(2, 3)] * 3


@given(spec=pair_specs(rational=True))
def test_block_at_least_token(spec):
    """block E[tau] >= token E[tau], exactly, on random rational pairs."""
    target, draft = build_models(spec)
    token = exact.expected_accepted_length(target, draft, methods.get("token", draft_length=spec.L),
                                           spec.context)
    block = exact.expected_accepted_length(target, draft, methods.get("block", draft_length=spec.L),
                                           spec.context)
    assert isinstance(token, (Fraction, int)) and isinstance(block, (Fraction, int))
    assert block >= token
    assert 0 <= token and block <= spec.L


def test_block_strictly_better_somewhere():
    """The relation above is not an equality in disguise: 11/9 > 10/9 on the example."""
    target, draft = _example_pair()
    assert exact.expected_accepted_length(target, draft, methods.get("block", draft_length=2)) > \
        exact.expected_accepted_length(target, draft, methods.get("token", draft_length=2))


@given(spec=pair_specs(rational=True, max_V=3, max_L=3))
def test_gbv_with_one_path_is_block(spec):
    """gbv(L, K=1) and block(L) have identical iteration laws (Fractions, every emitted tuple)."""
    target, draft = build_models(spec)
    gbv = exact.iteration_distribution(target, draft, methods.get("gbv", draft_length=spec.L, num_paths=1),
                                       spec.context)
    block = exact.iteration_distribution(target, draft, methods.get("block", draft_length=spec.L),
                                         spec.context)
    assert law_is_exact(gbv) and gbv == block


@given(spec=pair_specs(rational=True, target_temperatures=(0,)))
def test_block_equals_token_at_target_temperature_zero(spec):
    """With a greedy (one-hot) target, block verification degenerates to token verification:
    identical iteration laws, for any draft (at T = 0 or 1)."""
    target, draft = build_models(spec)
    assert spec.target_T == 0
    block = exact.iteration_distribution(target, draft, methods.get("block", draft_length=spec.L),
                                         spec.context)
    token = exact.iteration_distribution(target, draft, methods.get("token", draft_length=spec.L),
                                         spec.context)
    assert law_is_exact(block) and block == token


def test_block_differs_from_token_at_temperature_one():
    """... whereas at T = 1 the two laws differ (so the test above can fail)."""
    target, draft = _example_pair()
    block = exact.iteration_distribution(target, draft, methods.get("block", draft_length=2))
    token = exact.iteration_distribution(target, draft, methods.get("token", draft_length=2))
    assert block != token


def test_gbv_can_be_below_block():
    """A documented counterexample to 'gbv >= block': best-of-3 over-selects token 1."""
    p, q = [F(1, 2), F(1, 2)], [F(3, 5), F(2, 5)]
    target, draft = models.iid(p), models.iid(q)
    gbv = exact.expected_accepted_length(target, draft, methods.get("gbv", draft_length=1, num_paths=3))
    block = exact.expected_accepted_length(target, draft, methods.get("block", draft_length=1))
    # q_skew(1) = 1 - (3/5)^3 = 98/125 (token 1 has the larger p/q), q_skew(0) = 27/125.
    assert gbv == min(p[0], F(27, 125)) + min(p[1], F(98, 125)) == F(179, 250)
    assert block == F(9, 10)
    assert gbv < block


def _brute_force_best_path_law(target, draft, context, L, K):
    """Law of the lexicographic maximum (rank r = p/q ascending, ties by id) of K i.i.d. paths,
    by listing all V**(L*K) ordered K-tuples of paths."""
    V = target.vocab_size
    paths = list(itertools.product(range(V), repeat=L))

    def joint(path):
        w = F(1)
        for i in range(L):
            w *= draft.probs(context + path[:i])[path[i]]
        return w

    def key(path):
        return tuple(rank_key(target.probs(context + path[:i]), draft.probs(context + path[:i]), path[i])
                     for i in range(L))

    law: dict = {}
    weights = {path: joint(path) for path in paths}
    for combo in itertools.product(paths, repeat=K):
        w = F(1)
        for path in combo:
            w *= weights[path]
        if w:
            best = max(combo, key=key)
            law[best] = law.get(best, 0) + w
    return law


@pytest.mark.parametrize("V, L, K, seed", [(2, 2, 2, 0), (2, 3, 3, 1), (3, 2, 2, 2), (3, 1, 3, 3)])
def test_gbv_skewed_proposal_is_the_best_of_k_law(V, L, K, seed):
    """gbv's selected path X* has the brute-force best-of-K law, and the product of its q_skew
    conditionals along X* is that same law (docs/algorithms.md, gbv step 3)."""
    spec = Spec(V=V, L=L, K=K, family="tree", target_seed=2 * seed, draft_seed=2 * seed + 1,
                rational=True, denominator=16, context=(0,))
    target, draft = build_models(spec)

    def program(rand):
        d = drafters.iid_paths(L, K)(draft, spec.context, rand)
        path, skews = best_path(target, spec.context, d, K)
        weight = F(1)
        for i, t in enumerate(path):
            weight *= skews[i][t]
        return path, weight

    law = enumerate_law(program).law
    selected: dict = {}
    skew_weight = {}
    for (path, weight), prob in law.items():
        selected[path] = selected.get(path, 0) + prob
        skew_weight[path] = weight
    brute = _brute_force_best_path_law(target, draft, spec.context, L, K)
    assert selected == brute
    assert skew_weight == brute


@given(seed=st.integers(0, 2 ** 32 - 1), V=st.integers(2, 4), K=st.integers(2, 3))
def test_gbv_one_position_acceptance(seed, V, K):
    """gbv with L = 1 accepts with probability sum_x min(p(x), q_skew(x)), q_skew the law of the
    highest-ratio token among K i.i.d. draws, computed here from its CDF in rank order."""
    target, draft = build_models(Spec(V=V, L=1, K=K, family="iid", target_seed=seed,
                                      draft_seed=seed + 1, rational=True, denominator=16))
    p, q = target.probs(()), draft.probs(())
    order = sorted(range(V), key=lambda t: rank_key(p, q, t))
    skew, below = {}, F(0)
    for t in order:
        skew[t] = (below + q[t]) ** K - below ** K
        below += q[t]
    expected = sum(min(p[t], skew[t]) for t in range(V))
    value = exact.expected_accepted_length(target, draft, methods.get("gbv", draft_length=1, num_paths=K))
    assert value == expected


def test_acceptance_rates_stay_exact_for_deterministic_laws():
    one_hot = models.iid([F(1), F(0)])
    rates = exact.acceptance_rates(one_hot, one_hot, methods.get("token", draft_length=2))
    assert rates == [1, 1, 0]
    assert all(isinstance(r, (Fraction, int)) for r in rates)
