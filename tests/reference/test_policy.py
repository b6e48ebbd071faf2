"""The measured-cost model and the drafting policy of `verispec.reference.costs` / `.policy`: the fit,
the decision rules against brute force, the twins' exact laws (lossless on the sweep, proved at a
small size), the planted peeking policy caught, and `exact_rate` against the exact engine."""

from __future__ import annotations

import itertools
from fractions import Fraction as F

import pytest

from verispec.reference import exact, methods, models, policy
from verispec.reference.costs import CostModel, ForwardCost, fit_forward_cost
from verispec.testing import assert_lossless, planted_drafters

QUICK = dict(families=("iid", "markov"), vocab_sizes=(2, 3))


def _costs(draft=0.2, target=((1, 1.0), (4, 1.3), (16, 2.5)), slope=0.0):
    rows, base = zip(*target)
    return CostModel(ForwardCost((1,), (draft,), (0.0,)), ForwardCost(rows, base, (slope,) * len(rows)))


# ----------------------------------------------------------------------------------------------
# The cost model
# ----------------------------------------------------------------------------------------------

def test_the_fit_recovers_a_piecewise_linear_cost_and_keeps_its_samples():
    truth = {1: (0.10, 1e-4), 4: (0.12, 2e-4), 16: (0.30, 5e-4)}
    samples = [(m, r, n, b + s * n) for m in ("draft", "target") for r, (b, s) in truth.items()
               for n in (64, 256, 512) for _ in range(3)]
    model = CostModel.fitted(samples, key=(("host", "test"),))
    for r, (b, s) in truth.items():
        assert model.target.seconds(r, 300) == pytest.approx(b + s * 300, rel=1e-9)
    # linear in the rows between measured counts; past the largest: the last slope, never below it
    assert model.target.seconds(10, 0) == pytest.approx(0.12 + (0.30 - 0.12) * 6 / 12, rel=1e-9)
    assert model.target.seconds(28, 0) == pytest.approx(0.30 + (0.30 - 0.12) * 12 / 12, rel=1e-9)
    assert model.draft.seconds(1, 0) == pytest.approx(0.10)
    assert len(model.samples) == len(samples) and model.key == (("host", "test"),)
    again = CostModel.from_dict(model.to_dict())
    assert again.target == model.target and again.draft == model.draft and again.samples == model.samples
    base, slope = model.target.table(20)  # the engine's tensors: seconds = base + slope n
    assert base[9] + slope[9] * 300 == pytest.approx(model.target.seconds(10, 300), rel=1e-9)


def test_the_fit_takes_the_median_of_repeats_and_floors_noise_at_zero():
    cost = fit_forward_cost([(2, 100, 0.5), (2, 100, 0.1), (2, 100, 0.12), (2, 200, 0.11)])
    assert cost.rows == (2,) and cost.per_position == (0.0,)  # 0.12 then 0.11: no negative slope


@pytest.mark.parametrize("bad", [dict(rows=(2, 1), base=(1, 1), per_position=(0, 0)),
                                 dict(rows=(1,), base=(-1,), per_position=(0,)),
                                 dict(rows=(1, 2), base=(1,), per_position=(0,))])
def test_bad_forward_costs_are_refused(bad):
    with pytest.raises(ValueError):
        ForwardCost(**bad)


def test_bad_cost_inputs_are_refused():
    with pytest.raises(ValueError, match="samples"):
        CostModel.fitted([("gpu", 1, 0, 0.1)])
    with pytest.raises(ValueError, match="rows"):
        _costs().target.seconds(0)
    with pytest.raises(TypeError, match="costs"):
        policy.cost_chain(3, "cheap")
    with pytest.raises(ValueError, match="values"):
        policy.Calibration((0.5, 1.5))


# ----------------------------------------------------------------------------------------------
# The decision rules against brute force
# ----------------------------------------------------------------------------------------------

def test_expected_tokens_is_leviathans_formula():
    a, L = F(3, 4), 5
    assert policy.expected_tokens([a] * L) == (1 - a ** (L + 1)) / (1 - a)  # arXiv 2211.17192, eq. 1


def _ratio(rates, costs, n):
    return policy.expected_tokens(rates) / costs.chain_seconds(len(rates), n)


@pytest.mark.parametrize("costs", [_costs(), _costs(draft=0.05, slope=1e-3), _costs(draft=0.6),
                                   _costs(target=((1, 1.0), (15, 1.2), (16, 1.1), (17, 2.2)))])
def test_keeps_drafting_is_the_one_step_lookahead_it_states(costs):
    """Continue iff some j more tokens at the last rate beat stopping, checked by brute force."""
    grid = [0.1, 0.4, 0.7, 0.9, 0.99]
    decisions = set()
    for d in (1, 2, 3):
        for rates in itertools.product(grid, repeat=d):
            rates = list(rates)
            later = [_ratio(rates + [rates[-1]] * j, costs, 100) for j in range(1, 8 - d + 1)]
            expect = max(later, default=0) > _ratio(rates, costs, 100)
            assert policy.keeps_drafting(rates, costs, 100, 8) == expect, rates
            decisions.add(expect)
    assert decisions == {True, False}
    assert not policy.keeps_drafting([0.99] * 8, costs, 100, 8) and policy.keeps_drafting([], costs, 100, 8)


def test_planned_length_and_best_budget_are_the_argmax():
    costs = _costs(draft=0.1, target=((1, 1.0), (8, 1.4), (33, 4.0)))
    for a, K in itertools.product((0.2, 0.5, 0.8, 0.95), (1, 2, 3)):
        def value(L):
            tokens = 1 + sum(1 - (1 - a ** k) ** K for k in range(1, L + 1))
            return tokens / costs.chain_seconds(L, 50, K)
        best = max(range(1, 11), key=lambda L: (value(L), -L))
        assert policy.planned_length(a, K, costs, 50, 10) == best, (a, K)
    weights = [0.9, 0.8, 0.5, 0.3, 0.1, 0.05]
    for layers in (1, 3):
        def budget(m):
            return (1 + sum(weights[:m])) / costs.tree_seconds([1] * layers, m, 50)
        assert policy.best_budget(weights, costs, 50, layers) == max(range(1, 7), key=lambda m: (budget(m), -m))


def test_the_calibration_bins_the_draft_probability():
    g = policy.Calibration.prior(4)
    assert [g(c) for c in (0, F(1, 5), F(1, 4), F(3, 4), 1)] == [F(1, 8), F(1, 8), F(3, 8), F(7, 8), F(7, 8)]
    assert policy.Calibration()(F(2, 7)) == F(2, 7)


# ----------------------------------------------------------------------------------------------
# Lossless twins, a planted peek, a proof
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("verifier", ["token", "block"])
@pytest.mark.parametrize("calibration", [None, policy.Calibration.prior(4)])
def test_the_cost_chain_is_lossless(verifier, calibration):
    assert_lossless(policy.chain_method(3, policy.TOY_COSTS, calibration, verifier), **QUICK)


def test_the_cost_chain_really_chooses_lengths():
    """The chain is cut at different depths (not a fixed L in disguise): a confident token (q = 7/8)
    pays for another under the toy costs, an unlikely one (1/16) does not."""
    from verispec.reference.randomness import enumerate_law

    draft = models.iid([F(7, 8), F(1, 16), F(1, 16)], rational=True)
    tree = policy.chain_method(3, policy.TOY_COSTS).draft
    law = enumerate_law(lambda rand: len(tree(draft, (), rand).paths[0])).law
    assert law == {1: F(1, 8), 2: F(7, 64), 3: F(49, 64)}


def test_planned_paths_and_budget_trees_are_lossless():
    gbv = policy.planned_method(lambda L: methods.gbv(L, 2), 3, policy.TOY_COSTS, F(3, 5), num_paths=2)
    assert_lossless(gbv, **QUICK)
    assert_lossless(policy.planned_method(lambda L: methods.block(L), 3, _costs(draft=0.05), 0.9), **QUICK)
    assert_lossless(policy.budget_tree_method(4, policy.TOY_COSTS, max_depth=3), **QUICK)
    assert_lossless(policy.budget_tree_method(4, policy.TOY_COSTS, max_depth=3, width=1), **QUICK)


def test_a_policy_that_peeks_at_the_target_is_caught():
    target = models.iid([F(1, 2), F(1, 4), F(1, 4)], rational=True)
    draft = models.iid([F(1, 8), F(1, 8), F(3, 4)], rational=True)
    assert_lossless(policy.chain_method(2, policy.TOY_COSTS), target=target, draft=draft)  # the honest policy
    with pytest.raises(AssertionError, match="NOT lossless"):
        assert_lossless(planted_drafters.peeking_policy(target, 2, policy.TOY_COSTS), target=target, draft=draft)


def test_the_toy_chain_is_proved_lossless_at_v2_l2():
    pytest.importorskip("z3")
    from verispec.formal import prove

    result = prove(policy.toy_chain(2), vocab_size=2)
    assert result.verdict == "proved", result.summary()


# ----------------------------------------------------------------------------------------------
# Exact expected tokens and seconds
# ----------------------------------------------------------------------------------------------

def test_exact_rate_of_a_fixed_chain_is_its_block_efficiency_over_its_price():
    target, draft = models.random_tree(3, 1, rational=True), models.random_tree(3, 2, rational=True)
    costs = _costs()
    for L in (1, 2, 3):
        rate = policy.exact_rate(target, draft, methods.token(L), costs, (0,))
        assert rate.tokens == exact.block_efficiency(target, draft, methods.token(L), (0,))
        assert rate.seconds == pytest.approx(costs.chain_seconds(L, 1))  # a fixed chain is drawn in full


def test_exact_rate_of_the_policy_counts_its_drafted_lengths():
    target, draft = models.random_tree(3, 1, rational=True), models.random_tree(3, 2, rational=True)
    method = policy.chain_method(3, policy.TOY_COSTS)
    rate = policy.exact_rate(target, draft, method, policy.TOY_COSTS, ())
    assert rate.tokens == exact.block_efficiency(target, draft, method, ())
    prices = {policy.TOY_COSTS.chain_seconds(d, 0) for d in (1, 2, 3)}
    assert min(prices) <= rate.seconds <= max(prices) and isinstance(rate.seconds, F)
    assert rate.tokens_per_second == rate.tokens / rate.seconds


def test_the_rows_computation_compares_the_policy_with_every_fixed_length():
    """benchmarks/policy_rows.py on two prompts' rows, a few draws: the best fixed length is the
    argmax of the fixed rates, the ratio is the rates' ratio, and at T = 0 (deterministic) the
    policy's rate does not depend on the number of draws."""
    import types

    import numpy as np

    from ..scripts import load_script

    script = load_script("benchmarks/policy_rows.py")
    data, costs = dict(np.load(script.ROWS)), _costs(draft=0.1)
    results = {}
    for T, samples in ((0.0, 1), (0.0, 3), (1.0, 3)):
        result = script.evaluate(script.prompt_rows(data, T)[:2], costs, types.SimpleNamespace(samples=samples,
                                                                                               max_length=8))
        rates = {int(L): r for L, r in result["fixed_rates"].items()}
        assert result["best_fixed_length"] == max(rates, key=rates.get) and len(rates) == 8
        assert result["policy_prior"]["ratio_to_best_fixed"] == pytest.approx(
            result["policy_prior"]["rate"] / result["best_fixed_rate"])
        results[T, samples] = result
    assert results[0.0, 1]["policy_prior"]["rate"] == results[0.0, 3]["policy_prior"]["rate"]
