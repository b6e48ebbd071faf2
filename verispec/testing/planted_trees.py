"""Planted bugs in a tree sampler, each a way engines have been or could be wrong, to show that
`assert_tree_sampler_lossless` can fail.

Each is a next-sibling-layout sampler (`verispec.testing.tree_reference.TreeRejectionSampler`
with one step changed) plus the harness settings under which the bug shows:

* ``sibling_residual_not_subtracted``: after rejecting a sibling the residual stays r instead of
  norm(max(r - q, 0)), so a rejected sibling's token can come back as the correction token
  (recursive rejection sampling, Chen et al. 2023, arXiv:2302.01318; Jeon et al. 2024,
  arXiv:2402.14160).
* ``soft_q_on_deterministic_tree``: a deterministic top-k tree (EAGLE-style ``ranked_tree``)
  verified with the draft model's soft q as if its children had been drawn from q (the tree form
  of transformers issue #32867); the correct rule uses point masses (``target_only``).
* ``bonus_from_parent_row``: at a leaf the bonus token is drawn from the target row of the leaf's
  parent instead of the row after the leaf (an off-by-one in the flattened ``target_probs``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..reference import drafters
from ..reference.static_trees import static_shape
from .tree_reference import TreeRejectionSampler

__all__ = ["TreeBug", "TREE_BUGS", "SiblingResidualNotSubtracted", "BonusFromParentRow"]


class SiblingResidualNotSubtracted(TreeRejectionSampler):
    """Keeps the residual unchanged after a rejected sibling (the planted bug)."""

    def residual(self, r, q):
        return r


class BonusFromParentRow(TreeRejectionSampler):
    """Draws the bonus token from the leaf's parent's target row (the planted bug)."""

    def bonus_row(self, current, previous):
        return previous


@dataclass(frozen=True)
class TreeBug:
    """A planted tree-sampler bug: the sampler (next-sibling layout), the drafter that reveals it
    and any further harness keyword arguments (``harness``)."""

    name: str
    sampler: object
    drafter: object
    harness: dict = field(default_factory=dict)
    description: str = ""


def _eagle_tree():
    return drafters.ranked_tree(static_shape("eagle", 4, 2))


#: name -> TreeBug (a constant registry: treat as read-only).
TREE_BUGS = {
    bug.name: bug for bug in (
        TreeBug("sibling_residual_not_subtracted", SiblingResidualNotSubtracted(), _eagle_tree(), {},
                "the residual after a rejected sibling is not reduced by that sibling's q"),
        TreeBug("soft_q_on_deterministic_tree", TreeRejectionSampler(target_only=False), _eagle_tree(),
                {"deterministic_draft_probs": "soft"},
                "a deterministic top-k tree verified with the soft q (as if its children were drawn)"),
        TreeBug("bonus_from_parent_row", BonusFromParentRow(), drafters.iid_paths(2, 2), {},
                "the bonus token is drawn from the parent's target row, not the leaf's"),
    )
}
