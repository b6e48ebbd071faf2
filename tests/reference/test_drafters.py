"""Drafters and the lazily expanded Draft tree."""

from __future__ import annotations

import heapq
import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, strategies as st

from verispec.reference import drafters, models
from verispec.reference.contract import RuleContractError
from verispec.reference.drafters import Draft
from verispec.reference.randomness import Sampler, enumerate_law

from ._instances import Spec, build_models

F = Fraction
seeds = st.integers(0, 2 ** 32 - 1)


def _frac(values):
    return np.array([F(v) for v in values], dtype=object)


def _multinomial(q, k):
    """{sorted ((token, count), ...): probability} of k i.i.d. draws from q, counted directly."""
    law: dict = {}
    for draws in itertools.product(range(len(q)), repeat=k):
        prob = F(1)
        for t in draws:
            prob *= q[t]
        if prob:
            key = tuple(sorted((t, draws.count(t)) for t in set(draws)))
            law[key] = law.get(key, 0) + prob
    return law


@given(weights=st.lists(st.integers(0, 4), min_size=1, max_size=4).filter(any), k=st.integers(1, 4))
def test_draw_counts_is_the_multinomial(weights, k):
    q = _frac([F(w, sum(weights)) for w in weights])
    law = enumerate_law(lambda r: tuple(sorted(drafters.draw_counts(q, k, r).items()))).law
    assert law == _multinomial(q, k)
    # a closed-form cross-check of one entry: all k draws on the most likely token
    top = max(range(len(q)), key=lambda t: q[t])
    assert law[((top, k),)] == q[top] ** k


def test_draw_counts_float_matches_the_multinomial_pmf():
    q = np.array([0.2, 0.0, 0.5, 0.3])
    law = enumerate_law(lambda r: tuple(sorted(drafters.draw_counts(q, 3, r).items()))).law
    expected = _multinomial(_frac([F(1, 5), 0, F(1, 2), F(3, 10)]), 3)
    assert set(law) == set(expected)
    for key, prob in expected.items():
        assert abs(law[key] - float(prob)) <= 1e-15
    counts = {t: c for t, c in ((2, 1), (3, 2))}
    coefficient = math.factorial(3) // (math.factorial(1) * math.factorial(2))
    assert abs(law[tuple(sorted(counts.items()))] - coefficient * 0.5 * 0.3 ** 2) <= 1e-15


def _check_draft_consistency(draft: Draft, draft_model, context, L, K):
    paths = draft.paths
    assert len(paths) == K and all(len(path) == L for path in paths)
    assert draft.depth == L
    nodes = {path[:i] for path in paths for i in range(L + 1)}
    for node in nodes:
        through = [path for path in paths if path[:len(node)] == node]
        assert draft.num_paths(node) == len(through)
        assert draft.contains(node)
        if len(node) == L:
            assert draft.counts(node) == {} and draft.tokens(node) == () and draft.children(node) == ()
            continue
        tokens = draft.tokens(node)
        # path order: the tokens at a node are the next tokens of the paths through it, in order
        assert tokens == tuple(path[len(node)] for path in through)
        counts = draft.counts(node)
        assert counts == {t: tokens.count(t) for t in set(tokens)}
        assert sum(counts.values()) == len(through)
        assert draft.child_set(node) == tuple(sorted(counts))
        assert draft.children(node) == tuple(dict.fromkeys(tokens))
        assert draft.proposal(node).tolist() == draft_model.probs(context + node).tolist()
        for t in range(draft_model.vocab_size):
            if t not in counts:
                assert not draft.contains(node + (t,)) and draft.num_paths(node + (t,)) == 0


@given(seed=seeds, V=st.integers(2, 4), L=st.integers(1, 3), K=st.integers(1, 3))
def test_iid_paths_draft_is_consistent(seed, V, L, K):
    draft_model = models.random_tree(V, seed, concentration=0.5)
    context = (V - 1,)
    draft = drafters.iid_paths(L, K)(draft_model, context, Sampler(seed))
    _check_draft_consistency(draft, draft_model, context, L, K)


@given(seed=seeds, V=st.integers(2, 4), L=st.integers(1, 3))
def test_chain_is_one_path(seed, V, L):
    draft_model = models.random_tree(V, seed)
    draft = drafters.chain(L)(draft_model, (), Sampler(seed))
    _check_draft_consistency(draft, draft_model, (), L, 1)


def _path_law(draft_model, context, L):
    """{path: q(path)} of one autoregressive path of length L."""
    law = {(): F(1)}
    for _ in range(L):
        law = {path + (t,): prob * draft_model.probs(context + path)[t]
               for path, prob in law.items() for t in range(draft_model.vocab_size)
               if draft_model.probs(context + path)[t] > 0}
    return law


@pytest.mark.parametrize("V, L, K", [(2, 1, 3), (2, 2, 2), (2, 3, 2), (3, 1, 2), (3, 2, 2), (2, 2, 3), (4, 1, 3)])
@pytest.mark.parametrize("seed", [0, 1])
def test_iid_paths_order_has_the_law_of_k_ordered_iid_paths(V, L, K, seed):
    """Enumerating Draft.paths (counts drawn first, path order drawn lazily) gives exactly the
    product law of K independent autoregressive paths."""
    spec = Spec(V=V, L=L, K=K, family="tree", target_seed=seed, draft_seed=seed + 100,
                concentration=0.5, rational=True, denominator=16, context=(1,))
    _, draft_model = build_models(spec)
    law = enumerate_law(lambda r: drafters.iid_paths(L, K)(draft_model, spec.context, r).paths).law
    single = _path_law(draft_model, spec.context, L)
    expected = {}
    for combo in itertools.product(single, repeat=K):
        prob = F(1)
        for path in combo:
            prob *= single[path]
        expected[combo] = prob
    assert law == expected


@given(seed=seeds, V=st.integers(2, 4), L=st.integers(1, 3), K=st.integers(1, 4))
def test_paths_without_replacement_have_distinct_first_tokens(seed, V, L, K):
    draft_model = models.random_tree(V, seed, concentration=0.2, rational=True, denominator=8)
    draft = drafters.paths_without_replacement(L, K)(draft_model, (), Sampler(seed))
    support = [t for t in range(V) if draft_model.probs(())[t] > 0]
    paths = draft.paths
    firsts = [path[0] for path in paths]
    assert len(firsts) == len(set(firsts)) == min(K, len(support))
    assert set(firsts) <= set(support)
    assert all(len(path) == L for path in paths)
    for path in paths:
        for i in range(L):
            assert draft_model.probs(path[:i])[path[i]] > 0


def test_paths_without_replacement_first_token_law():
    """Ordered first tokens are successive draws from q renormalised over unused tokens."""
    q = [F(1, 2), F(1, 3), F(1, 6)]
    draft_model = models.iid(q)
    law = enumerate_law(lambda r: tuple(p[0] for p in
                                        drafters.paths_without_replacement(1, 2)(draft_model, (), r).paths)).law
    expected = {(a, b): q[a] * q[b] / (1 - q[a]) for a in range(3) for b in range(3) if a != b}
    assert law == expected


def test_draft_from_paths():
    paths = [(0, 1), (0, 1), (1,), (0, 2, 1)]
    q = _frac([F(1, 3)] * 3)
    draft = Draft.from_paths(paths, lambda node: q)
    assert draft.paths == tuple(paths)
    assert draft.tokens(()) == (0, 0, 1, 0)
    assert draft.counts(()) == {0: 3, 1: 1}
    assert draft.children(()) == (0, 1)
    assert draft.tokens((0,)) == (1, 1, 2)
    assert draft.children((0,)) == (1, 2)
    assert draft.num_paths((0, 1)) == 2 and draft.num_paths((0, 2)) == 1
    assert draft.tokens((1,)) == () and draft.tokens((0, 1)) == ()
    assert draft.contains((0, 2, 1)) and not draft.contains((1, 1)) and not draft.contains((2,))
    assert draft.depth == 3
    assert draft.proposal((0,)) is q
    with pytest.raises(ValueError, match="leaf"):
        draft.proposal((1,))


# ---------------------------------------------------------------------------------- OPT-Tree


def _tree_nodes(children):
    return {u + (t,) for u, kids in children.items() for t in kids}


def _weights(q_of, V, depth):
    """W(u) = product of draft probabilities along u, for every node up to `depth`."""
    weights = {}
    frontier = [((), 1.0)]
    for _ in range(depth):
        nxt = []
        for node, w in frontier:
            q = q_of(node)
            for t in range(V):
                if q[t] > 0:
                    weights[node + (t,)] = w * q[t]
                    nxt.append((node + (t,), w * q[t]))
        frontier = nxt
    return weights


@given(seed=seeds, V=st.integers(2, 4), n=st.integers(1, 8), depth=st.integers(1, 4),
       threshold=st.sampled_from((0.0, 0.05, 0.3)))
def test_opt_tree_structure_is_a_bounded_subtree(seed, V, n, depth, threshold):
    model = models.random_tree(V, seed, concentration=0.5)
    q_of = model.probs
    children = drafters.opt_tree_structure(q_of, n, threshold, depth)
    nodes = _tree_nodes(children)
    assert 1 <= len(nodes) <= n
    for node in nodes:
        assert len(node) <= depth
        assert node[:-1] == () or node[:-1] in nodes  # a subtree
        assert q_of(node[:-1])[node[-1]] > 0  # zero-probability children are never drafted
    for u, kids in children.items():
        assert len(kids) == len(set(kids))


@given(seed=seeds, V=st.integers(2, 3), n=st.integers(1, 6), depth=st.integers(1, 3))
def test_opt_tree_is_the_n_largest_weight_nodes(seed, V, n, depth):
    """With threshold 0 the layer-wise construction finds the n largest-W nodes of the full tree
    up to max_depth (W = product of q along the path)."""
    model = models.random_tree(V, seed)
    children = drafters.opt_tree_structure(model.probs, n, 0.0, depth)
    weights = _weights(model.probs, V, depth)
    best = set(heapq.nlargest(n, weights, key=lambda u: weights[u]))
    assert _tree_nodes(children) == best


def test_opt_tree_tiny_example():
    """q = (0.6, 0.4) at every node, n = 3: nodes 0 (.6), 1 (.4), 00 (.36)."""
    model = models.iid([0.6, 0.4])
    children = drafters.opt_tree_structure(model.probs, 3, 0.0, 3)
    assert _tree_nodes(children) == {(0,), (1,), (0, 0)}
    assert children[()] == [0, 1]  # by W descending
    draft = drafters.opt_tree(3, max_depth=3)(model, (), Sampler(0))
    assert sorted(draft.paths) == [(0, 0), (1,)]
    with pytest.raises(RuleContractError, match="drafted deterministically"):  # chosen, not drawn: no q
        draft.proposal((0,))


def test_opt_tree_threshold_stops_growth():
    """Layer 1 gains E[A] = 1 <= 10: growth stops there (the top-n root children), whereas with
    threshold 0 the second layer enters the tree."""
    model = models.iid([0.6, 0.4])
    assert _tree_nodes(drafters.opt_tree_structure(model.probs, 3, 10.0, 3)) == {(0,), (1,)}
    assert _tree_nodes(drafters.opt_tree_structure(model.probs, 3, 0.0, 3)) == {(0,), (1,), (0, 0)}


@given(seed=seeds, V=st.integers(2, 4), n=st.integers(2, 8), depth=st.integers(2, 4), width=st.integers(1, 3))
def test_opt_tree_width_expands_at_most_width_nodes_per_layer(seed, V, n, depth, width):
    """With `width`, at most `width` nodes of each depth have children, the tree stays a subtree
    of at most n nodes, and every expanded node is among its layer's `width` largest W."""
    model = models.random_tree(V, seed, concentration=0.5)
    asked = []

    def q_of(node):
        asked.append(node)
        return model.probs(node)

    children = drafters.opt_tree_structure(q_of, n, 0.0, depth, width)
    nodes = _tree_nodes(children)
    assert 1 <= len(nodes) <= n and all(u[:-1] == () or u[:-1] in nodes for u in nodes)
    for d in range(depth):
        assert sum(len(u) == d for u in set(asked)) <= width  # draft forwards of <= width rows
    assert all(u in set(asked) for u in children)  # a node with children was expanded


def test_opt_tree_width_one_is_a_greedy_chain_with_runner_up_leaves():
    """q = (.55, .45) at the root, (.1 / .9) below token 1, (.5, .5) elsewhere; n = 3. Uncapped,
    (1, 0) (W = .405) beats (0, 0) (.275); with width 1 only the root's largest-W child (0,) is
    expanded: the greedy chain 0, 0 with the runner-up (1,) as a leaf."""
    table = {(): [0.55, 0.45], (1,): [0.9, 0.1]}

    def q_of(node):
        return np.array(table.get(node, [0.5, 0.5]))

    assert _tree_nodes(drafters.opt_tree_structure(q_of, 3, 0.0, 3)) == {(0,), (1,), (1, 0)}
    assert drafters.opt_tree_structure(q_of, 3, 0.0, 3, width=1) == {(): [0, 1], (0,): [0]}
    assert drafters.opt_tree(3, width=1).width == 1


def test_opt_tree_drafter_defaults_max_depth_to_budget():
    drafter = drafters.opt_tree(4)
    assert drafter.max_depth == 4 and drafter.node_budget == 4


# ------------------------------------------------------------------------ point-mass drafts


@pytest.mark.parametrize("sequence, L, n, phrase", [
    ((1, 2, 3, 1, 2), 2, 2, (3, 1)),        # suffix (1, 2) occurred at 0
    ((1, 2, 9, 2, 5, 1, 2), 2, 2, (9, 2)),  # the longest suffix wins over the later (2,) at 3
    ((1, 2, 9, 2, 5, 1, 2), 2, 1, (5, 1)),  # with n = 1: the latest earlier (2,) is at 3
    ((5, 1, 7, 1, 8, 1), 3, 2, (8, 1)),     # latest earlier occurrence of (1,); truncated by the end
    ((4, 5, 4), 5, 2, (5, 4)),
    ((1, 2, 3), 2, 2, ()),                  # no earlier occurrence
    ((7,), 3, 2, ()),
    ((), 3, 2, ()),
    ((0, 0, 0, 0), 2, 3, (0,)),             # (0,0,0) at 0 -> followed by (0,)
])
def test_lookup_phrase_examples(sequence, L, n, phrase):
    assert drafters.lookup_phrase(sequence, L, n) == phrase


def test_prompt_lookup_drafter_is_a_point_mass_chain():
    model = models.iid([0.5, 0.25, 0.25])
    draft = drafters.prompt_lookup(2)(model, (0, 1, 2, 0, 1), Sampler(0))
    assert draft.paths == ((2, 0),)
    assert draft.proposal(()).tolist() == [0, 0, 1]
    assert draft.proposal((2,)).tolist() == [1, 0, 0]
    empty = drafters.prompt_lookup(2)(model, (0, 1, 2), Sampler(0))
    assert empty.paths == ((),) and empty.counts(()) == {}


def test_greedy_drafter_is_the_argmax_chain():
    draft_model = models.markov([0.2, 0.8, 0.0], [[0.1, 0.1, 0.8], [0.5, 0.5, 0.0], [0.3, 0.3, 0.4]])
    draft = drafters.greedy(3)(draft_model, (), Sampler(0))
    assert draft.paths == ((1, 0, 2),)  # ties (0.5, 0.5) go to the lowest id
    assert draft.proposal((1,)).tolist() == [1, 0, 0]


def test_point_mass_drafter_truncates_and_checks_the_phrase():
    model = models.iid([0.5, 0.5])
    draft = drafters.point_mass(lambda context: [1, 0, 1, 1], draft_length=2)(model, (), Sampler(0))
    assert draft.paths == ((1, 0),)
    with pytest.raises(ValueError, match="phrase"):
        drafters.point_mass(lambda context: [3])(model, (), Sampler(0)).paths
