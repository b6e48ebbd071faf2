"""Every planted bug of docs/testing.md is caught; every built-in method passes."""

from fractions import Fraction

import pytest

from verispec.reference import exact, methods, models
from verispec.testing import (LosslessnessError, NotWorseError, assert_lossless, assert_not_worse, planted)
from verispec.theory import closed_forms

CHEAP = dict(families=("iid", "markov"))


def test_registry_lists_every_planted_bug_of_testing_md():
    assert set(planted.BUGS) == {
        "always_accept", "residual_p", "bonus_from_q", "bonus_off_by_one", "greedy_draft_soft_q",
        "topk_draft_raw_q", "topk3_draft_raw_q", "temperature_ignored", "u_zero", "block_replaced_by_token",
        "traversal_leaf_order", "hsd_uncapped_last", "is_verified_against_q", "spechub_stale_hub_target",
        "block_point_mass_scalar_q", "draft_vocab_full_q", "spectr_unscaled_residual", "hu_greedy_soft_q"}
    assert planted.LOSSY == set(planted.BUGS) - {"block_replaced_by_token"}
    for name, factory in planted.BUGS.items():
        assert factory.__doc__ and len(factory.__doc__) > 40, name
        m = factory(2)
        assert isinstance(m, methods.Method) and m.draft_length == 2


@pytest.mark.parametrize("draft_length", [1, 2])
@pytest.mark.parametrize("name", sorted(planted.LOSSY))
def test_lossy_bug_is_caught_by_the_default_sweep(name, draft_length):
    if draft_length < planted.MIN_DRAFT_LENGTH.get(name, 1):
        assert_lossless(planted.BUGS[name](draft_length), vocab_sizes=(2,), **CHEAP)  # cannot show yet
        return
    with pytest.raises(LosslessnessError) as info:
        assert_lossless(planted.BUGS[name](draft_length))
    err = info.value
    assert isinstance(err, AssertionError)
    # clearly positive; an exact (rational) TV > 0 is a proof by itself, however small
    assert err.tv is not None and (float(err.tv) > 1e-3 or (err.exact and err.tv > 0))
    assert f"TV(method law, target law) = " in str(err)
    # the reported laws really differ by the reported TV
    assert exact.total_variation(err.law, err.target_law) == err.tv


def test_temperature_ignored_needs_a_tempered_target():
    bug = planted.temperature_ignored(2)
    assert_lossless(bug, temperatures=(1,), **CHEAP)  # at T = 1 it is token verification
    with pytest.raises(LosslessnessError) as info:
        assert_lossless(bug, temperatures=(0.5,), **CHEAP)
    assert "T=0.5" in str(info.value) and "models.temperature(" in str(info.value)


def test_bonus_off_by_one_needs_a_prefix_dependent_target():
    bug = planted.bonus_off_by_one(1)
    assert_lossless(bug, families=("iid",))
    with pytest.raises(LosslessnessError) as info:
        assert_lossless(bug)
    assert info.value.instance.num_tokens == 2  # the bonus is the second token when L = 1
    assert "markov" in info.value.instance.label


def test_topk_bug_needs_three_tokens():
    bug = planted.topk_draft_raw_q(2)
    assert_lossless(bug, vocab_sizes=(2,), **CHEAP)
    with pytest.raises(LosslessnessError) as info:
        assert_lossless(bug, vocab_sizes=(2, 3), **CHEAP)
    assert info.value.instance.vocab_size == 3


def test_greedy_soft_q_bug_hides_at_temperature_zero():
    bug = planted.greedy_draft_soft_q(2)
    assert_lossless(bug, temperatures=(0,), **CHEAP)
    with pytest.raises(LosslessnessError):
        assert_lossless(bug, temperatures=(1,), **CHEAP)


def test_u_zero_rejects_only_tokens_the_target_forbids():
    # drafts of p(x) = 0 are rejected, so u_zero differs from always_accept exactly there
    target = models.iid([Fraction(0), Fraction(1, 2), Fraction(1, 2)])
    draft = models.iid([Fraction(1, 3)] * 3)
    law_u0 = exact.output_distribution(target, draft, planted.u_zero(1), num_tokens=1)
    law_always = exact.output_distribution(target, draft, planted.always_accept(1), num_tokens=1)
    assert law_always[(0,)] == Fraction(1, 3)
    assert (0,) not in law_u0 and law_u0[(1,)] == Fraction(1, 3) + Fraction(1, 6)


def test_block_replaced_by_token_is_lossless_but_slower():
    bug = planted.block_replaced_by_token(2)
    report = assert_lossless(bug, **CHEAP)
    assert report.num_exact > 0 and report.max_tv <= 1e-12
    with pytest.raises(NotWorseError) as info:
        assert_not_worse(bug, methods.block(2), **CHEAP)
    assert info.value.gap > 1e-3
    assert "LOWER expected accepted length" in str(info.value)
    # the real block method is not worse than itself/token on the same sweep
    assert_not_worse(methods.block(2), bug, **CHEAP)
    assert planted.LOSSLESS_BUT_SLOWER["block_replaced_by_token"] is methods.block


def test_block_replaced_by_token_gap_matches_the_documented_value():
    # docs/algorithms.md: V=2, L=2, q=(1/3,2/3), p=(2/3,1/3): token E[tau] = 10/9, block 11/9
    p = models.iid([Fraction(2, 3), Fraction(1, 3)])
    q = models.iid([Fraction(1, 3), Fraction(2, 3)])
    assert planted.efficiency_gap(p, q, 2) == Fraction(1, 9)
    assert closed_forms.block_expected_accepted_length(p, q, (), 2) - \
        closed_forms.token_expected_accepted_length(p, q, (), 2) == Fraction(1, 9)
    # generic random-tree pair: strictly positive; greedy (T = 0): zero
    t, d = models.random_tree(3, 1, rational=True), models.random_tree(3, 2, rational=True)
    assert planted.efficiency_gap(t, d, 2) > 0
    assert planted.efficiency_gap(models.temperature(t, 0), models.temperature(d, 0), 2) == 0


BUILTIN = [
    ("token", dict(draft_length=2), {}),
    ("block", dict(draft_length=2), {}),
    ("nss", dict(draft_length=2, num_paths=2), CHEAP),
    ("rrs", dict(draft_length=2, num_paths=2), CHEAP),
    ("rrsw", dict(draft_length=2, num_paths=2), CHEAP),
    ("spectr", dict(draft_length=1, num_paths=2), CHEAP),
    ("traversal", dict(draft_length=2, num_paths=2), CHEAP),
    ("gbv", dict(draft_length=2, num_paths=2), CHEAP),
    ("opt_tree", dict(node_budget=3, max_depth=2), {}),
    ("point_mass", dict(draft_length=2), {}),
    ("prompt_lookup", dict(draft_length=2), {}),
    ("khisti", dict(draft_length=2, num_paths=2), CHEAP),
    ("optimal_is", dict(draft_length=2, num_paths=2), CHEAP),
    ("global_resolution", dict(draft_length=2, num_paths=2), CHEAP),
    ("spechub", dict(draft_length=2), CHEAP),
    ("hu_greedy", dict(draft_length=2, num_paths=2), CHEAP),
    ("target_only", dict(), {}),
    ("kary", dict(node_budget=3, max_depth=2), CHEAP),
    ("eagle", dict(node_budget=3, max_depth=2), CHEAP),
    ("chain_tree", dict(node_budget=3, max_depth=2), CHEAP),
    ("adaptive", dict(draft_length=2), CHEAP),
    ("hybrid", dict(draft_length=2, lookup_length=2), CHEAP),
]


def test_builtin_list_covers_every_method():
    assert {name for name, _, _ in BUILTIN} == set(methods.names())


@pytest.mark.parametrize("name,params,options", BUILTIN, ids=[b[0] for b in BUILTIN])
def test_builtin_method_passes(name, params, options):
    report = assert_lossless(methods.get(name, **params), **options)
    assert report.num_instances >= 8 and report.max_tv <= 1e-12


@pytest.mark.parametrize("name", ["token", "block", "gbv", "nss", "rrs", "rrsw", "traversal"])
def test_rational_rules_are_exact(name):
    params = dict(draft_length=1) if name in ("token", "block") else dict(draft_length=1, num_paths=2)
    # exactness, not size, is checked here: the small sizes keep it cheap
    report = assert_lossless(methods.get(name, **params), exact=True, temperatures=(1, 0), vocab_sizes=(2, 3))
    assert report.num_exact == report.num_instances


def test_gbv_is_exact_on_rational_models():
    """Regression: gbv's skewed draft once mixed int/int -> float into Fraction arithmetic."""
    t = models.iid([Fraction(31, 32), Fraction(1, 32)])
    d = models.iid([Fraction(3, 32), Fraction(29, 32)])
    assert_lossless(methods.gbv(1, 2), target=t, draft=d, num_tokens=1, exact=True)


def test_gbv_does_not_crash_on_rational_random_tree():
    """Regression: the float/Fraction mix made the block residual sum to != 1 exactly."""
    t = models.random_tree(3, 3170341645, rational=True, denominator=32)
    d = models.random_tree(3, 3387507784, rational=True, denominator=32)
    assert_lossless(methods.gbv(2, 2), target=t, draft=d, num_tokens=4)
