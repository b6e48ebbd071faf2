"""The exact law of the SGLang-style tree sampler (`TreeRejectionSampler`) on the harness's trees.

`tree_sampler_law` runs the same rule as `verispec.testing.tree_reference.TreeRejectionSampler`
(recursive rejection over siblings in node order, relaxed by threshold_single and threshold_acc)
on the flat trees the tree harness hands a sampler (`verispec.testing.tree_draws.flatten`), with
every draw through a `Randomness`, and enumerates the draft-verify loop's law of the first N tokens
exactly (`verispec.reference.randomness.enumerate_law`; float64 numbers, exact enumeration). The
tree harness puts its TV beside the measured one when a sampler is rejected: thresholds below 1
make the rule lossy, and this is how lossy.

Sources: recursive rejection sampling, SpecInfer (Miao et al. 2024, arXiv:2305.09781); the
thresholds as SGLang's ``tree_speculative_sampling_target_only`` names them.
"""

from __future__ import annotations

import functools

import numpy as np

from ..reference import exact
from ..reference.randomness import enumerate_law
from .tree_draws import DETERMINISTIC_DRAFTERS, FlatTree, check_drafter, flatten, proposals, target_rows

__all__ = ["tree_sampler_law", "tree_sampler_tv", "threshold_tree_walk"]


def _residual(r, q):
    """norm(max(r - q, 0)) [V], or r when that has no mass (as the sampler does)."""
    out = np.maximum(r - q, 0.0)
    total = out.sum()
    return out / total if total > 0 else r


def threshold_tree_walk(tree: FlatTree, q_rows, p_rows, thresholds, rand) -> tuple:
    """One verification of `tree`: the accepted path's tokens, then the correction or bonus token.

    Args:
        tree: the flat tree. q_rows: float [M, V] (node j's proposal) or None (a deterministic
            tree: point masses). p_rows: float [M + 1, V] (row 0 at the root, row j + 1 after node j).
        thresholds: (threshold_single, threshold_acc). rand: `Randomness`.
    """
    single, acc = thresholds
    V = p_rows.shape[1]
    current, r, out = -1, p_rows[0], []
    while True:
        children = [j for j, parent in enumerate(tree.parents) if parent == current]  # node order
        if not children:
            return tuple(out) + (rand.categorical(p_rows[current + 1]),)  # bonus token
        for j in children:
            x = tree.tokens[j]
            q = np.eye(V)[x] if q_rows is None else q_rows[j]  # [V]
            accept = 1.0 if p_rows[current + 1][x] >= single else min(1.0, r[x] / (q[x] * acc))
            if rand.bernoulli(accept):
                break
            r = _residual(r, q)
        else:
            return tuple(out) + (rand.categorical(r),)  # correction token: every child rejected
        out.append(x)
        current, r = j, p_rows[j + 1]


def tree_sampler_law(thresholds, drafter, target, draft, context=(), num_tokens: int = 2,
                     target_only: bool | None = None) -> dict:
    """{N-token tuple: probability}: the loop's law with trees drawn by `drafter` and verified by
    `threshold_tree_walk` (deterministic drafters, or target_only=True: point-mass proposals).

    Raises: TypeError / ValueError: an unsupported drafter (`check_drafter`).
    """
    name = check_drafter(drafter)
    deterministic = name in DETERMINISTIC_DRAFTERS
    point_masses = deterministic if target_only is None else target_only
    context = tuple(context)

    @functools.lru_cache(maxsize=None)
    def iteration(prefix):  # {emitted tokens: probability} of one iteration after `prefix`
        def program(rand):
            tree = flatten(drafter(draft, prefix, rand), deterministic)
            q = None if point_masses else proposals(tree, name, draft, prefix)
            return threshold_tree_walk(tree, q, target_rows(tree, target, prefix), thresholds, rand)

        return enumerate_law(program).law

    @functools.lru_cache(maxsize=None)
    def loop(out):  # {the first N tokens: probability} of the loop once `out` is emitted
        if len(out) >= num_tokens:
            return {out[:num_tokens]: 1.0}
        law: dict = {}
        for emitted, prob in iteration(context + out).items():
            for tokens, rest in loop(out + emitted).items():
                law[tokens] = law.get(tokens, 0.0) + prob * rest
        return law

    return loop(())


def tree_sampler_tv(thresholds, drafter, target, draft, context=(), num_tokens: int = 2,
                    target_only: bool | None = None) -> float:
    """TV between `tree_sampler_law` and the target's law of the first N tokens."""
    law = tree_sampler_law(thresholds, drafter, target, draft, context, num_tokens, target_only)
    return float(exact.total_variation(law, exact.target_distribution(target, tuple(context), num_tokens)))
