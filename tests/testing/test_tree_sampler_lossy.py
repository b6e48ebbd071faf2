"""The SGLang-style tree sampler with thresholds below 1: reported LOSSY by the tree harness, with its
measured TV and, beside it, the exact TV of the same rule (`verispec.testing.tree_exact`).

Statistics: the harness runs at alpha = 1e-6, power 0.9 at TV 0.05 (see test_tree_sampler_harness).
The measured TV is the empirical law's TV from the target; it differs from the exact TV by at most
TV(empirical, exact law), whose mean is <= 1/2 sqrt(cells / n) <= 1/2 sqrt(81 / 6960) = 0.054 and
which exceeds its mean by t = 0.046 with probability <= exp(-2 n t^2) < 1e-12 (McDiarmid: one
sample moves it by <= 1/n). So |measured - exact| <= 0.1 fails with probability < 1e-12.
"""

from __future__ import annotations

import pytest

from verispec.reference import drafters, models
from verispec.reference.static_trees import static_shape
from verispec.testing import SamplerLosslessnessError, TreeRejectionSampler, assert_tree_sampler_lossless, planted_trees
from verispec.testing.tree_exact import tree_sampler_tv

FAST = dict(tv=0.05, families=("iid", "markov", "random_tree"), temperatures=(1, 0.5))
DRAFTERS = {"iid_paths": drafters.iid_paths(2, 2), "paths_without_replacement": drafters.paths_without_replacement(2, 2),
            "ranked_tree": drafters.ranked_tree(static_shape("eagle", 4, 2)),
            "opt_tree": drafters.opt_tree(4, max_depth=2)}


@pytest.mark.parametrize("name", sorted(DRAFTERS))
def test_the_exact_walk_is_lossless_at_thresholds_1_and_lossy_below(name):
    target, draft = models.random_markov(3, seed=3), models.random_markov(3, seed=4)
    assert tree_sampler_tv((1.0, 1.0), DRAFTERS[name], target, draft, (), 3) <= 1e-12
    assert tree_sampler_tv((0.5, 0.5), DRAFTERS[name], target, draft, (), 3) > 0.01


@pytest.mark.parametrize("thresholds", [{"threshold_acc": 0.5}, {"threshold_single": 0.3}])
@pytest.mark.parametrize("name", ["iid_paths", "ranked_tree"])
def test_thresholds_below_one_are_reported_lossy_with_measured_and_exact_tv(thresholds, name):
    sampler = TreeRejectionSampler(**thresholds)
    assert sampler.lossy
    with pytest.raises(SamplerLosslessnessError) as caught:
        assert_tree_sampler_lossless(sampler, drafter=DRAFTERS[name], layout="next_sibling", **FAST)
    err, inst = caught.value, caught.value.result.instance
    message = str(err)
    assert "is LOSSY (declared lossy by the sampler)" in message and "NOT lossless" not in message
    assert err.declared_lossy and err.exact_tv is not None
    single, acc = thresholds.get("threshold_single", 1.0), thresholds.get("threshold_acc", 1.0)
    assert err.exact_tv == tree_sampler_tv((single, acc), DRAFTERS[name], inst.target, inst.draft, inst.context,
                                           inst.num_tokens)
    assert err.exact_tv > 0.05 and abs(err.exact_tv - err.result.empirical_tv) <= 0.1  # see the module docstring
    assert f"exact TV of the sampler's rule on this instance = {err.exact_tv:.4f}" in message


def test_exact_sampler_is_not_declared_lossy_and_a_planted_bug_gets_no_exact_tv():
    assert not TreeRejectionSampler().lossy
    bug = planted_trees.TREE_BUGS[sorted(planted_trees.TREE_BUGS)[0]]
    with pytest.raises(SamplerLosslessnessError, match="NOT lossless") as caught:
        assert_tree_sampler_lossless(bug.sampler, drafter=bug.drafter, layout="next_sibling", **bug.harness, **FAST)
    assert not caught.value.declared_lossy
    if isinstance(bug.sampler, TreeRejectionSampler):  # a subclass overriding a step: not the enumerated rule
        assert caught.value.exact_tv is None
