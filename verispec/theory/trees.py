"""Draft-tree optimisation: OPT-Tree (Wang et al. 2024, arXiv 2406.17276) against the exact optimum.

A draft tree is given as {node: [child tokens]} (the format of
`verispec.reference.drafters.opt_tree_structure`) or as an iterable of node tuples (relative to the
context, root = () excluded); either way it must be closed under taking parents.

- proxy E[A](T) = sum over nodes of the product of DRAFT probabilities on the root path
  (OPT-Tree's objective, "acceptance ~ draft probability");
- true acceptance = sum over nodes of the product of TARGET probabilities on the root path
  (E[tau] of sample-and-follow verification, `verispec.reference.verifiers.sample_and_follow`);
- `optimal_tree` picks the n largest-weight nodes of the full tree exactly (priority queue; the
  weight shrinks along paths, so the n largest form a subtree); `opt_tree_layerwise` is OPT-Tree's
  per-layer top-n approximation; `tree_report` measures the gaps.

No cvxpy here: importable cheaply.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from ..reference.deprecation import renamed_keywords
from ..reference.drafters import check_threshold, opt_tree_structure
from ..reference.models import LanguageModel, check_positive_int, check_pair, check_prefix


def tree_nodes(tree) -> list[tuple[int, ...]]:
    """The nodes of `tree` (root excluded), sorted by (depth, tokens).

    Args:
        tree: {node: [child tokens]} or an iterable of node tuples.

    Raises:
        TypeError: not a dict / iterable of tuples of ints.
        ValueError: a node whose parent is missing (not a subtree of the full tree).
    """
    if isinstance(tree, dict):
        nodes = set()
        for parent, kids in tree.items():
            if not isinstance(parent, tuple):
                raise TypeError(f"tree: keys must be node tuples, got {parent!r}")
            for t in kids:
                nodes.add(parent + (int(t),))
    else:
        try:
            nodes = {tuple(int(t) for t in u) for u in tree}
        except TypeError:
            raise TypeError("tree: expected {node: [children]} or an iterable of node tuples") from None
    nodes.discard(())
    for u in nodes:
        if len(u) > 1 and u[:-1] not in nodes:
            raise ValueError(f"tree: node {u} has no parent {u[:-1]} in the tree")
    return sorted(nodes, key=lambda u: (len(u), u))


def _path_product(tree, model: LanguageModel, context, name: str) -> float:
    if not isinstance(model, LanguageModel):
        raise TypeError(f"{name}: expected a LanguageModel, got {type(model).__name__}")
    context = check_prefix(context, model.vocab_size, "context")
    weight = {(): 1.0}
    total = 0.0
    for u in tree_nodes(tree):
        if u[-1] >= model.vocab_size:
            raise ValueError(f"tree: token {u[-1]} out of range [0, {model.vocab_size})")
        w = weight[u[:-1]] * float(model.probs(context + u[:-1])[u[-1]])
        weight[u] = w
        total += w
    return total


def expected_acceptance_proxy(tree, draft: LanguageModel, context=()) -> float:
    """OPT-Tree's E[A](T) = sum_{u in T} prod_i q(u_i | u_<i) (Wang et al. 2024, arXiv 2406.17276):
    expected accepted tokens if acceptance followed the draft's own probabilities. Units: tokens.

    Raises:
        TypeError / ValueError: bad tree (see `tree_nodes`), non-model, bad context.
    """
    return _path_product(tree, draft, context, "draft")


def true_acceptance(tree, target: LanguageModel, context=()) -> float:
    """E[tau] of sample-and-follow verification on a fixed tree: sum_{u in T} prod_i p(u_i | u_<i)
    (the probability that the target's own sample path enters u). Units: accepted draft tokens.

    Raises:
        TypeError / ValueError: bad tree, non-model, bad context.
    """
    return _path_product(tree, target, context, "target")


def optimal_tree(model: LanguageModel, context=(), node_budget: int = 1,
                 max_depth: int | None = None) -> dict:
    """The n-node subtree of the full tree maximising sum of path products of `model`'s probabilities.

    With the draft model this maximises OPT-Tree's proxy E[A] exactly; with the target model it
    maximises the true sample-and-follow acceptance. Best-first search with a priority queue
    (weights shrink along paths, so the n largest-weight nodes are a subtree and are popped in
    order); zero-probability children are never added. Cost O(n V log(nV)) model reads.

    Args:
        model: LanguageModel. context: tuple of token ids. node_budget: n >= 1.
        max_depth: optional depth cap >= 1 (default: no cap besides n).

    Returns:
        {node: [child tokens]} ordered by weight descending (ties: shallower, then token order).

    Raises:
        TypeError / ValueError: non-model, bad context, node_budget or max_depth < 1.
    """
    if not isinstance(model, LanguageModel):
        raise TypeError(f"model: expected a LanguageModel, got {type(model).__name__}")
    context = check_prefix(context, model.vocab_size, "context")
    n = check_positive_int(node_budget, "node_budget")
    depth_cap = n if max_depth is None else check_positive_int(max_depth, "max_depth")
    heap: list = []

    def push_children(u, w):
        if len(u) >= depth_cap:
            return
        q = np.asarray(model.probs(context + u), dtype=np.float64)  # [V]
        for t in range(len(q)):
            if q[t] > 0:
                heapq.heappush(heap, (-w * q[t], len(u) + 1, u + (t,)))

    push_children((), 1.0)
    children: dict = {}
    for _ in range(n):
        if not heap:
            break
        neg_w, _, u = heapq.heappop(heap)
        children.setdefault(u[:-1], []).append(u[-1])
        push_children(u, -neg_w)
    return children


@renamed_keywords(threshold="gain_threshold")
def opt_tree_layerwise(draft: LanguageModel, context=(), node_budget: int = 1, gain_threshold: float = 0.0,
                       max_depth: int | None = None) -> dict:
    """OPT-Tree's layer-wise construction (arXiv 2406.17276, Algorithm 1), via
    `verispec.reference.drafters.opt_tree_structure`. Returns {node: [child tokens]}.

    Raises:
        TypeError / ValueError: non-model, bad context, node_budget / max_depth < 1, gain_threshold < 0.
    """
    if not isinstance(draft, LanguageModel):
        raise TypeError(f"draft: expected a LanguageModel, got {type(draft).__name__}")
    context = check_prefix(context, draft.vocab_size, "context")
    n = check_positive_int(node_budget, "node_budget")
    depth = n if max_depth is None else check_positive_int(max_depth, "max_depth")
    return opt_tree_structure(lambda u: draft.probs(context + u), n, check_threshold(gain_threshold), depth)


@dataclass
class TreeReport:
    """OPT-Tree against the optimum on one instance (all values in accepted draft tokens).

    Attributes:
        node_budget, max_depth: the budget n and depth cap used.
        layerwise_proxy / optimal_proxy: E[A] (draft proxy) of OPT-Tree's tree and of the optimal
            proxy tree; proxy_gap = optimal_proxy - layerwise_proxy >= 0.
        layerwise_true / optimal_proxy_true: true sample-and-follow acceptance of those trees.
        true_optimal: the best true acceptance of any n-node tree (optimal tree under the target).
        trees: {"layerwise", "optimal_proxy", "true_optimal"} -> {node: [children]}.
    """

    node_budget: int
    max_depth: int
    layerwise_proxy: float
    optimal_proxy: float
    layerwise_true: float
    optimal_proxy_true: float
    true_optimal: float
    trees: dict

    @property
    def proxy_gap(self) -> float:
        return self.optimal_proxy - self.layerwise_proxy


@renamed_keywords(threshold="gain_threshold")
def tree_report(target: LanguageModel, draft: LanguageModel, context=(), node_budget: int = 1,
                gain_threshold: float = 0.0, max_depth: int | None = None) -> TreeReport:
    """OPT-Tree's gap to the optimum and proxy vs truth on one instance (docs/theory.md, "Trees").

    Raises:
        TypeError / ValueError: as `optimal_tree` / `opt_tree_layerwise`, or mismatched vocabularies.
    """
    check_pair(target, draft)
    n = check_positive_int(node_budget, "node_budget")
    depth = n if max_depth is None else check_positive_int(max_depth, "max_depth")
    layer = opt_tree_layerwise(draft, context, n, gain_threshold, depth)
    best = optimal_tree(draft, context, n, depth)
    true_best = optimal_tree(target, context, n, depth)
    return TreeReport(
        node_budget=n, max_depth=depth,
        layerwise_proxy=expected_acceptance_proxy(layer, draft, context),
        optimal_proxy=expected_acceptance_proxy(best, draft, context),
        layerwise_true=true_acceptance(layer, target, context),
        optimal_proxy_true=true_acceptance(best, target, context),
        true_optimal=true_acceptance(true_best, target, context),
        trees={"layerwise": layer, "optimal_proxy": best, "true_optimal": true_best},
    )
