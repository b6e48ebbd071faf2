"""Draft trees: OPT-Tree (Wang et al. 2024, arXiv 2406.17276) against the exact optimum, and
true sample-and-follow acceptance against the reference enumerator."""

import itertools

import pytest

from verispec.reference import exact, methods, models
from verispec.theory import trees


def _all_subtrees(V, n, depth):
    """Every n-node subtree (closed under parents) of the full V-ary tree of the given depth."""
    full = [u for d in range(1, depth + 1) for u in itertools.product(range(V), repeat=d)]
    for combo in itertools.combinations(full, n):
        chosen = set(combo)
        if all(len(u) == 1 or u[:-1] in chosen for u in chosen):
            yield chosen


def test_optimal_tree_is_optimal_by_brute_force():
    for seed in range(6):
        draft = models.random_tree(2, seed, 0.5)
        for n in (1, 3, 4):
            best = max(trees.expected_acceptance_proxy(t, draft) for t in _all_subtrees(2, n, n))
            assert trees.expected_acceptance_proxy(trees.optimal_tree(draft, (), n), draft) == pytest.approx(best, abs=1e-12)


def test_optimal_dominates_layerwise_and_threshold_opens_a_gap():
    gaps = 0
    for seed in range(40):
        draft, target = models.random_tree(4, seed, 0.5), models.random_tree(4, seed + 7)
        for threshold in (0.0, 0.1):
            report = trees.tree_report(target, draft, (), 10, gain_threshold=threshold, max_depth=6)
            assert report.proxy_gap >= -1e-12
            if threshold == 0.0:
                # With threshold 0 the layer-wise top-n provably finds the n largest-W nodes.
                assert report.proxy_gap == pytest.approx(0, abs=1e-12)
            gaps += report.proxy_gap > 1e-6
            assert report.true_optimal >= max(report.layerwise_true, report.optimal_proxy_true) - 1e-12
    assert gaps >= 3  # early stopping (threshold > 0) does lose proxy value on some instances


def test_true_acceptance_equals_enumerated_opt_tree():
    for seed in range(10):
        V = 2 + seed % 2
        draft, target = models.random_tree(V, seed, 0.7), models.random_tree(V, seed + 30)
        n, depth = 4 + seed % 3, 3
        tree = trees.opt_tree_layerwise(draft, (1,), n, max_depth=depth)
        enumerated = exact.expected_accepted_length(target, draft, methods.opt_tree(n, max_depth=depth), (1,))
        assert trees.true_acceptance(tree, target, (1,)) == pytest.approx(float(enumerated), abs=1e-12)


def test_proxy_equals_truth_when_draft_is_target():
    model = models.random_tree(3, 4)
    tree = trees.optimal_tree(model, (), 7)
    assert trees.expected_acceptance_proxy(tree, model) == pytest.approx(trees.true_acceptance(tree, model))


def test_proxy_can_mislead():
    # The proxy-optimal tree is not always the truly better tree (seed found by search).
    worse = 0
    for seed in range(30):
        draft, target = models.random_tree(2, seed, 0.2), models.random_tree(2, seed + 7)
        report = trees.tree_report(target, draft, (), 10, gain_threshold=0.2, max_depth=6)
        worse += report.optimal_proxy_true < report.layerwise_true - 1e-6
    assert worse >= 1


def test_tree_formats_and_validation():
    nodes = [(0,), (0, 1), (1,)]
    as_dict = {(): [0, 1], (0,): [1]}
    assert trees.tree_nodes(nodes) == trees.tree_nodes(as_dict) == [(0,), (1,), (0, 1)]
    model = models.iid([0.25, 0.75])
    assert trees.true_acceptance(nodes, model) == pytest.approx(0.25 + 0.75 + 0.25 * 0.75)
    with pytest.raises(ValueError, match="tree"):
        trees.tree_nodes([(0, 1)])
    with pytest.raises(ValueError, match="tree"):
        trees.true_acceptance([(5,)], model)
    with pytest.raises(TypeError, match="target"):
        trees.true_acceptance(nodes, "model")
    with pytest.raises(ValueError, match="node_budget"):
        trees.optimal_tree(model, (), 0)
    with pytest.raises(ValueError, match="threshold"):
        trees.opt_tree_layerwise(model, (), 3, gain_threshold=-1)
    with pytest.raises(ValueError, match="context"):
        trees.optimal_tree(model, (3,), 2)


def test_optimal_tree_respects_depth_and_zero_probabilities():
    model = models.iid([0.0, 1.0])
    tree = trees.optimal_tree(model, (), 5, max_depth=2)
    assert trees.tree_nodes(tree) == [(1,), (1, 1)]
    assert trees.expected_acceptance_proxy(tree, model) == pytest.approx(2.0)
