"""Sample-and-follow tree verification (used by OPT-Tree, Wang et al. 2024, arXiv 2406.17276).

At each node draw Y ~ p(. | node); if Y is a drafted child, enter it and continue, else Y is the
correction token. At a leaf Y is the bonus token. Every emitted token is an exact draw from p, so
the rule is lossless for any tree; at T = 0 p is a point mass and this follows the argmax.
The acceptance at a node is sum of p over its children.
"""

from __future__ import annotations


def sample_and_follow(target, draft_model, context, draft, rand) -> tuple[int, ...]:
    """Walk the draft tree by sampling from the target at each node."""
    node = ()
    while True:
        children = draft.counts(node)
        y = rand.categorical(target.probs(context + node))
        node = node + (y,)
        if y not in children:
            return node
