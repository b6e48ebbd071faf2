"""Draft trees of the reference drafters in the flattened node layout engines use, with their law.

`assert_tree_sampler_lossless` hands a sampler trees drawn by verispec's reference drafters
(`verispec.reference.drafters`). This module turns a drafter's `Draft` into the flat layout of
EAGLE / vLLM / SGLang tree verification and computes the exact law of that flat tree at a prefix:

* nodes in breadth-first order (depth, then sibling order), so ``parents[i] < i``;
  ``parents[i] = -1`` for the root's children;
* drawn trees (`iid_paths`, `chain`, `paths_without_replacement`): the K paths stay separate
  (the root's children are the paths' first tokens in path order, duplicates kept, each followed
  by its own chain), so sibling k's proposal is exactly the law it was drawn from: q for i.i.d.
  paths, q renormalised over the tokens not taken by siblings 1..k-1 without replacement;
* deterministic trees (`ranked_tree`, `opt_tree`): the trie of the chosen paths (distinct siblings
  in the drafter's order, most likely first); their nodes have no proposal (None).

The law is computed exactly by running the drafter under the enumerator
(`verispec.reference.randomness.enumerate_law`), so sampling trees from it is sampling the
drafter itself. The number of distinct trees grows as V^(L K) for drawn drafters (81 at V = 3,
L = K = 2; about 2 x 10^4 at L = K = 3, a second or so per prefix): keep the toy sizes small.
Sources: multi-draft speculative sampling, Miao et al. 2024 (SpecInfer,
arXiv:2305.09781) and Jeon et al. 2024 (without replacement, arXiv:2402.14160); static and
dynamic trees, Li et al. 2024 (EAGLE, arXiv:2401.15077), Wang et al. 2024 (OPT-Tree,
arXiv:2406.17276).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..reference.drafters import Drafter
from ..reference.randomness import enumerate_law

__all__ = ["FlatTree", "flat_tree_law", "flatten", "drafter_depth", "DRAWN_DRAFTERS", "DETERMINISTIC_DRAFTERS"]

#: Drafters whose children are drawn from q (siblings carry a proposal).
DRAWN_DRAFTERS = ("chain", "iid_paths", "paths_without_replacement")
#: Drafters whose children are chosen by a rule (no proposal).
DETERMINISTIC_DRAFTERS = ("ranked_tree", "opt_tree")

_MAX_TREES = 200_000  # distinct flat trees per prefix: guards against runaway enumerations


@dataclass(frozen=True)
class FlatTree:
    """One draft tree in the flattened layout.

    Attributes:
        tokens: tuple of M node token ids (breadth first).
        parents: tuple of M parent indices (-1 = a child of the root; ``parents[i] < i``).
    """

    tokens: tuple
    parents: tuple

    @property
    def num_nodes(self) -> int:
        return len(self.tokens)

    def depths(self) -> np.ndarray:
        """int64 [M]: 1 for the root's children, parent's + 1 below."""
        depth = np.zeros(self.num_nodes, dtype=np.int64)
        for i, parent in enumerate(self.parents):
            depth[i] = 1 if parent < 0 else depth[parent] + 1
        return depth

    def path(self, node: int) -> tuple:
        """The tokens from the root to `node` (inclusive)."""
        out = []
        while node >= 0:
            out.append(self.tokens[node])
            node = self.parents[node]
        return tuple(reversed(out))


def check_drafter(drafter) -> str:
    """The drafter's name when the harness supports it.

    Raises:
        TypeError: not a `verispec.reference.drafters.Drafter`.
        ValueError: a drafter other than `DRAWN_DRAFTERS` and `DETERMINISTIC_DRAFTERS`.
    """
    if not isinstance(drafter, Drafter):
        raise TypeError(f"drafter: expected a verispec.reference.drafters.Drafter, got {type(drafter).__name__}")
    if drafter.name not in DRAWN_DRAFTERS + DETERMINISTIC_DRAFTERS:
        raise ValueError(f"drafter: {drafter.name} is not supported; use one of "
                         f"{', '.join(DRAWN_DRAFTERS + DETERMINISTIC_DRAFTERS)}")
    return drafter.name


def drafter_depth(drafter) -> int:
    """The longest path the drafter can draft (L, the deepest rank path, or OPT-Tree's max_depth)."""
    check_drafter(drafter)
    params = drafter.params  # read by what the drafter declares, not by its name
    if "rank_paths" in params:  # a static ranked tree
        return max(len(u) for u in params["rank_paths"])
    if "node_budget" in params:  # OPT-Tree: at most n nodes, at most max_depth deep
        return min(params["max_depth"], params["node_budget"])
    return params["draft_length"]


def flatten(draft, deterministic: bool) -> FlatTree:
    """A `Draft` in the flat layout (see the module docstring): separate paths for drawn trees, the
    trie for deterministic ones."""
    if deterministic:
        tokens, parents, frontier = [], [], [((), -1)]
        while frontier:  # breadth first
            nxt = []
            for node, index in frontier:
                for t in draft.children(node):
                    tokens.append(int(t))
                    parents.append(index)
                    nxt.append((node + (t,), len(tokens) - 1))
            frontier = nxt
        return FlatTree(tuple(tokens), tuple(parents))
    paths = draft.paths
    tokens, parents = [], []
    last = [-1] * len(paths)  # the flat index of each path's deepest node so far
    for depth in range(max(len(p) for p in paths)):
        for j, path in enumerate(paths):
            if depth < len(path):
                tokens.append(int(path[depth]))
                parents.append(last[j])
                last[j] = len(tokens) - 1
    return FlatTree(tuple(tokens), tuple(parents))


def flat_tree_law(drafter, draft_model, prefix: tuple) -> dict:
    """{FlatTree: probability} of the drafter's tree below `prefix` (exact enumeration).

    Raises:
        TypeError / ValueError: an unsupported drafter (`check_drafter`).
        RuntimeError: more than 200,000 distinct draws (choose a smaller L, K or V).
    """
    name = check_drafter(drafter)
    deterministic = name in DETERMINISTIC_DRAFTERS

    def program(rand):
        return flatten(drafter(draft_model, tuple(prefix), rand), deterministic)

    return enumerate_law(program, max_branches=_MAX_TREES).law


def proposals(tree: FlatTree, drafter_name: str, draft_model, prefix: tuple) -> np.ndarray:
    """float64 [M, V]: the law each node was drawn from (drawn drafters only; see the module
    docstring): q at its parent, renormalised over the tokens earlier siblings took when the
    root's children are drawn without replacement."""
    V = draft_model.vocab_size
    out = np.empty((tree.num_nodes, V))
    taken = np.zeros(V, dtype=bool)
    for i, parent in enumerate(tree.parents):
        q = np.asarray(draft_model.probs(tuple(prefix) + tree.path(i)[:-1]), dtype=np.float64)  # [V]
        if parent < 0 and drafter_name == "paths_without_replacement":
            q = np.where(taken, 0.0, q)
            q = q / q.sum()
            taken[tree.tokens[i]] = True
        out[i] = q
    return out


def parent_distributions(tree: FlatTree, model, prefix: tuple) -> np.ndarray:
    """float64 [M, V]: the model's distribution at each node's parent (for a deterministic tree and
    the draft model: the soft q the drafter ranked the children by)."""
    return np.stack([np.asarray(model.probs(tuple(prefix) + tree.path(i)[:-1]), dtype=np.float64)
                     for i in range(tree.num_nodes)]) if tree.num_nodes else np.zeros((0, model.vocab_size))


def target_rows(tree: FlatTree, target, prefix: tuple) -> np.ndarray:
    """float64 [M + 1, V]: row 0 = p at the root (after `prefix`), row i + 1 = p after node i."""
    rows = [target.probs(tuple(prefix))] + [target.probs(tuple(prefix) + tree.path(i)) for i in range(tree.num_nodes)]
    return np.stack([np.asarray(r, dtype=np.float64) for r in rows])
