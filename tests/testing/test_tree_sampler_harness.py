"""assert_tree_sampler_lossless: the G-test harness for batched tree (multi-draft) samplers.

Statistical design (docs/testing.md, "Checking a tree sampler"):

* Default-suite runs use tv = 0.05 with alpha = 1e-6 for the whole run (Bonferroni over the
  instances) and power 0.9 against every law at TV >= 0.05 (+ pooled mass): n = 6,960 at V = 2
  and 11,596 at V = 3 for N = 4 tokens. A correct sampler fails a run with probability <= 1e-6.
* Planted bugs (`verispec.testing.planted_trees`) and thresholds below 1 are further than 0.05
  from the target law on the first instances, so they are caught in well under a second each.
* False-alarm rate: over 60 fixed seeds (one Markov V = 3 instance, N = 3, tv = 0.1, i.i.d. paths)
  the p-values of the correct sampler must be uniform: at most 9 below 0.05 (binomial(60, 0.05)
  exceeds 9 with probability 7e-4) and a KS test of uniformity must not reject at 1e-3.
* No statistics inside hypothesis `@given`: the layout converters are checked on seeded random
  trees instead.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from verispec.reference import drafters, models
from verispec.reference.static_trees import static_shape
from verispec.testing import (SamplerContractError, SamplerLosslessnessError, TreeRejectionSampler,
                              assert_tree_sampler_lossless, parents_tree_sampler, planted_trees,
                              reference_tree_sampler, tree_layout)
from verispec.testing.tree_draws import flat_tree_law, proposals

from ..scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
FAST = dict(tv=0.05, families=("iid", "markov", "random_tree"), temperatures=(1, 0.5))  # alpha 1e-6, power 0.9
EAGLE = drafters.ranked_tree(static_shape("eagle", 4, 2))
DRAFTERS = {"iid_paths": drafters.iid_paths(2, 2),
            "paths_without_replacement": drafters.paths_without_replacement(2, 2), "ranked_tree": EAGLE,
            "opt_tree": drafters.opt_tree(4, max_depth=2)}


def _random_parents(rng, batch, num_nodes):
    return np.stack([[rng.integers(-1, i) for i in range(num_nodes)] for _ in range(batch)]).astype(np.int64)


def test_layout_converters_round_trip_on_seeded_trees():
    rng = np.random.default_rng(0)
    for num_nodes in (1, 2, 5, 9):
        parents = _random_parents(rng, 16, num_nodes)
        next_token, next_sibling = tree_layout.next_sibling_layout(parents)
        assert np.array_equal(tree_layout.parents_layout(next_token, next_sibling), parents)
        depth = tree_layout.tree_depth(parents)
        for b in range(16):
            d = np.zeros(num_nodes + 1, dtype=int)
            for i, p in enumerate(parents[b]):
                d[i + 1] = d[p + 1] + 1
            assert depth[b] == d.max()


def test_next_sibling_layout_keeps_node_order_among_siblings():
    next_token, next_sibling = tree_layout.next_sibling_layout(np.array([[-1, -1, 0, 0, 1]]))
    assert next_token.tolist() == [[1, 3, 5, -1, -1, -1]]
    assert next_sibling.tolist() == [[-1, 2, -1, 4, -1, -1]]


def test_emitted_from_accept_index():
    predicts = np.array([7, 8, 9, 4, 5, 6])  # batch 2, M + 1 = 3
    out = tree_layout.emitted_from_accept_index(predicts, np.array([[0, 2], [3, -1]]), np.array([1, 0]))
    assert out.tolist() == [[7, 9], [4, -1]]
    with pytest.raises(ValueError, match="accept_token_num"):
        tree_layout.emitted_from_accept_index(predicts, np.array([[0, 2]]), np.array([2]))


def test_parents_must_point_backwards():
    with pytest.raises(ValueError, match="parents"):
        tree_layout.next_sibling_layout(np.array([[-1, 1]]))


def test_tree_laws_sum_to_one_and_proposals_follow_the_draw():
    q = models.random_tree(3, seed=1)
    for drafter in DRAFTERS.values():
        assert abs(sum(flat_tree_law(drafter, q, (1,)).values()) - 1) < 1e-12
    law = flat_tree_law(drafters.paths_without_replacement(2, 2), q, ())
    tree = next(iter(law))
    rows = proposals(tree, "paths_without_replacement", q, ())
    first = tree.tokens[0]
    assert rows[1][first] == 0 and abs(rows[1].sum() - 1) < 1e-12  # the second root child: q without the first
    assert np.allclose(rows[0], q.probs(()))


@pytest.mark.parametrize("name", sorted(DRAFTERS))
def test_reference_tree_sampler_passes_next_sibling_layout(name):
    report = assert_tree_sampler_lossless(reference_tree_sampler, drafter=DRAFTERS[name], layout="next_sibling", **FAST)
    assert len(report.results) == 12 and report.min_p_value > report.alpha / 12
    assert "assert_tree_sampler_lossless" in str(report)


def test_p_values_of_the_correct_sampler_are_uniform():
    target, draft = models.random_markov(3, seed=11), models.random_markov(3, seed=12)
    p_values = [assert_tree_sampler_lossless(reference_tree_sampler, drafter=DRAFTERS["iid_paths"],
                                             layout="next_sibling", target=target, draft=draft, num_tokens=3, tv=0.1,
                                             seed=seed).min_p_value for seed in range(60)]
    assert sum(p < 0.05 for p in p_values) <= 9
    assert stats.kstest(p_values, "uniform").pvalue > 1e-3


@pytest.mark.parametrize("name", ["iid_paths", "ranked_tree"])
def test_reference_tree_sampler_passes_parents_layout(name):
    assert_tree_sampler_lossless(parents_tree_sampler, drafter=DRAFTERS[name], layout="parents", **FAST)


def test_target_only_sampler_ignores_the_soft_q_of_a_deterministic_tree():
    assert_tree_sampler_lossless(TreeRejectionSampler(target_only=True), drafter=EAGLE, layout="next_sibling",
                                 deterministic_draft_probs="soft", **FAST)


@pytest.mark.parametrize("name", sorted(planted_trees.TREE_BUGS))
def test_planted_tree_bugs_are_caught(name):
    bug = planted_trees.TREE_BUGS[name]
    with pytest.raises(SamplerLosslessnessError, match="NOT lossless") as caught:
        assert_tree_sampler_lossless(bug.sampler, drafter=bug.drafter, layout="next_sibling", **bug.harness, **FAST)
    assert caught.value.result.empirical_tv > 0.02


@pytest.mark.parametrize("thresholds", [{"threshold_acc": 0.5}, {"threshold_single": 0.3}])
@pytest.mark.parametrize("name", ["iid_paths", "ranked_tree"])
def test_thresholds_below_one_are_reported_lossy_with_their_tv(thresholds, name):
    with pytest.raises(SamplerLosslessnessError) as caught:
        assert_tree_sampler_lossless(TreeRejectionSampler(**thresholds), drafter=DRAFTERS[name], layout="next_sibling",
                                     **FAST)
    assert caught.value.result.empirical_tv > 0.05
    assert f"empirical TV = {caught.value.result.empirical_tv:.4f}" in str(caught.value)


def _example():
    return load_script(str(ROOT / "examples" / "sglang_style_tree_sampler.py"))


def test_sglang_style_kernel_example_passes_exact_and_fails_with_thresholds():
    example = _example()
    assert_tree_sampler_lossless(example.as_harness_sampler(), drafter=EAGLE, layout="next_sibling", **FAST)
    assert_tree_sampler_lossless(example.as_harness_sampler(), drafter=DRAFTERS["opt_tree"], layout="next_sibling",
                                 **FAST)
    with pytest.raises(SamplerLosslessnessError):
        assert_tree_sampler_lossless(example.as_harness_sampler(threshold_acc=0.5), drafter=EAGLE,
                                     layout="next_sibling", **FAST)


def _one(fn):
    return dict(target=models.random_markov(2, seed=3), draft=models.random_markov(2, seed=4), num_samples=50)


CHAIN_OF_ONE = drafters.ranked_tree(static_shape("chain", 1, 1))  # one node: the draft's argmax


@pytest.mark.parametrize("broken, match", [
    (lambda tokens, parents, q, p, g: np.zeros((len(tokens), 1), dtype=np.int64), "expected shape"),
    (lambda tokens, parents, q, p, g: np.full((len(tokens), 2), -1), "emitted no token"),
    (lambda tokens, parents, q, p, g: np.stack([-np.ones_like(tokens[:, 0]), tokens[:, 0]], 1), "placeholder"),
    (lambda tokens, parents, q, p, g: np.stack([1 - tokens[:, 0], tokens[:, 0]], 1), "not a root path"),
    (lambda tokens, parents, q, p, g: np.full((len(tokens), 2), 2), "outside"),
    (lambda tokens, parents, q, p, g: 1 / 0, "raised ZeroDivisionError"),
])
def test_contract_errors_are_not_verdicts(broken, match):
    with pytest.raises(SamplerContractError, match=match):
        assert_tree_sampler_lossless(broken, drafter=CHAIN_OF_ONE, **_one(broken))


def test_bad_arguments_name_the_argument():
    args = _one(None)
    with pytest.raises(ValueError, match="layout"):
        assert_tree_sampler_lossless(parents_tree_sampler, drafter=EAGLE, layout="csr", **args)
    with pytest.raises(TypeError, match="drafter"):
        assert_tree_sampler_lossless(parents_tree_sampler, drafter="eagle", **args)
    with pytest.raises(ValueError, match="drafter"):
        assert_tree_sampler_lossless(parents_tree_sampler, drafter=drafters.greedy(2), **args)
    with pytest.raises(ValueError, match="deterministic_draft_probs"):
        assert_tree_sampler_lossless(parents_tree_sampler, drafter=EAGLE, deterministic_draft_probs="hard", **args)
    with pytest.raises(TypeError, match="fn"):
        assert_tree_sampler_lossless(None, drafter=EAGLE, **args)


def test_torch_backend_hands_tensors():
    torch = pytest.importorskip("torch")

    def via_numpy(tokens, parents, q, p, generator):
        assert isinstance(tokens, torch.Tensor) and p.dtype == torch.float64
        rng = np.random.default_rng(int(torch.randint(0, 2 ** 31, (1,), generator=generator)))
        return torch.from_numpy(parents_tree_sampler(tokens.numpy(), parents.numpy(), None if q is None else q.numpy(),
                                                     p.numpy(), rng))

    assert_tree_sampler_lossless(via_numpy, drafter=EAGLE, backend="torch", dtype=torch.float64,
                                 vocab_sizes=(2,), **FAST)
