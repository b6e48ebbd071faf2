"""Traversal verification (Weng et al. 2025, arXiv 2505.12398): bottom-up over the draft tree
with block-verification weights; on a chain it is exactly block verification.

Leaves are visited in DFS order (children in order of first appearance). A child c of node v has
weight w(c) = min(1, w(v) p_v(c) / q_v(c)) from v's *current* p_v, q_v, w(v). A node with no
children left is accepted with probability w(node) (its root path is accepted and the next token is
drawn from its current p). When a child's subtree is rejected, v is updated:
S = sum max(w(v) p_v - q_v, 0), p_v <- norm(max(w(v) p_v - q_v, 0)), w(v) <- S / (S + 1 - w(v))
(1 if 0/0), q_v <- q_v with the child zeroed and renormalised — and the remaining children's
weights (hence their descendants') are computed from the updated values.
"""

from __future__ import annotations

from ..probability import accept_probability, align, residual
from .block import stop_probability


def _traverse(target, context, draft, node, w, rand):
    """Process the subtree at `node` with weight w; the emitted tokens, or None if rejected."""
    p = target.probs(context + node)
    children = draft.children(node)
    if children:
        p, q = align(p, draft.proposal(node))  # [V], [V]
    for c in children:
        out = _traverse(target, context, draft, node + (c,), accept_probability(p[c], q[c], w), rand)
        if out is not None:
            return out
        # The subtree of c was rejected: move v's target to the residual, as block verification
        # does when its last draft token is rejected.
        p, w = residual(p, q, w), stop_probability(p, q, w)
        q = q.copy()
        q[c] = 0
        if q.sum() > 0:
            q = q / q.sum()
    if rand.bernoulli(w):
        return node + (rand.categorical(p),)
    return None


def traversal_verify(target, draft_model, context, draft, rand) -> tuple[int, ...]:
    """Traversal verification of the whole draft tree; the root (w = 1) always ends accepted."""
    out = _traverse(target, context, draft, (), 1, rand)
    assert out is not None, "the root is accepted with probability 1"
    return out
