"""Static draft-tree shapes: the rank paths of a chain, a k-ary tree and an EAGLE-style tree.

A rank path (r_1, .., r_d) names the node reached by taking the r_1-th most likely child of the
root under the draft model, then the r_2-th most likely child of that, and so on (rank 0 = the
draft's argmax). `drafters.ranked_tree(static_shape(...))` drafts such a tree; the torch twin is
`verispec.empirical.drafters.tree.TreeDrafter`. These are the fixed-shape baselines OPT-Tree (Wang et al.,
arXiv 2406.17276) is measured against; EAGLE's hand-made trees (Li et al., arXiv 2401.15077) rank
children top-4 / top-3 / top-2, which the fixed prior below reproduces.
"""

from __future__ import annotations

import heapq

from .models import check_positive_int

__all__ = ["STATIC_TREES", "EAGLE_RANK_PRIOR", "static_shape"]

STATIC_TREES = ("chain", "kary", "eagle")

#: Fixed prior of the rank-r child (r = 0..3) for the EAGLE-style tree: a node's static score is the
#: product over its rank path; the tree is the n best-scoring rank paths (leftmost-biased, <= 4
#: children per node, like EAGLE's top-4/top-3/top-2 trees).
EAGLE_RANK_PRIOR = (0.6, 0.15, 0.07, 0.04)


def _kary(n: int, depth: int, k: int) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = []
    frontier: list[tuple[int, ...]] = [()]
    while frontier and len(out) < n:
        nxt = [u + (r,) for u in frontier if len(u) < depth for r in range(k)]
        out += nxt[:n - len(out)]
        frontier = nxt
    return out


def _eagle(n: int, depth: int) -> list[tuple[int, ...]]:
    heap = [(-EAGLE_RANK_PRIOR[r], 1, (r,)) for r in range(len(EAGLE_RANK_PRIOR))]
    heapq.heapify(heap)
    out = []
    while heap and len(out) < n:  # best first: scores shrink along paths, so a prefix is taken first
        neg, d, u = heapq.heappop(heap)
        out.append(u)
        if d < depth:
            for r, prior in enumerate(EAGLE_RANK_PRIOR):
                heapq.heappush(heap, (neg * prior, d + 1, u + (r,)))
    return sorted(out, key=lambda u: (len(u), u))


def static_shape(tree: str, node_budget: int, max_depth: int, branching: int = 2) -> list[tuple[int, ...]]:
    """The rank paths of a static tree, breadth first (depth, then lexicographic).

    Args:
        tree: "chain" (min(n, max_depth) nodes), "kary" (every node has `branching` children, filled
            breadth first), or "eagle" (the n rank paths with the largest product of `EAGLE_RANK_PRIOR`).
        node_budget: n >= 1. max_depth: >= 1. branching: k >= 1 (kary only).

    Returns:
        list of at most n rank-path tuples, closed under taking parents.

    Raises:
        ValueError: unknown static tree. TypeError / ValueError: non-positive ints.
    """
    n = check_positive_int(node_budget, "node_budget")
    depth = check_positive_int(max_depth, "max_depth")
    k = check_positive_int(branching, "branching")
    if tree == "chain":
        return [(0,) * d for d in range(1, min(n, depth) + 1)]
    if tree == "kary":
        return _kary(n, depth, k)
    if tree == "eagle":
        return _eagle(n, depth)
    raise ValueError(f"tree: unknown static tree {tree!r}; known: {', '.join(STATIC_TREES)}")
