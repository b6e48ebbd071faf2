"""Sample-and-follow on a draft tree in node layout (OPT-Tree's verifier, Wang et al. 2024,
arXiv 2406.17276; the torch twin of `verispec.reference.verifiers.tree.sample_and_follow`).

At the current node draw Y ~ p(. | node) (one uniform, inverse CDF; greedy: the argmax, no
uniform); if Y is a drafted child, enter it, else Y is the correction (the bonus at a leaf). Every
emitted token is an exact draw from p, so the rule is lossless for ANY tree and never reads q.
"""

from __future__ import annotations

import torch

from ..uniforms import categorical

__all__ = ["sample_and_follow_nodes"]


def sample_and_follow_nodes(p: torch.Tensor, tokens: torch.Tensor, parents: torch.Tensor, real: torch.Tensor,
                            uniforms: torch.Tensor | None, greedy: bool, max_steps: int, *, early_exit: bool = True):
    """Sample-and-follow on one tree per row (module docstring).

    Args:
        p: float [B, N, V] target distribution after every node's root path (node 0 = the root).
        tokens, parents: int64 [B, N] (parents[:, 0] = -1). real: bool [B, N] (padding: False).
        uniforms: float [B, max_steps + 1] (one per visited node; None when greedy).
        greedy: follow the argmax (T = 0). max_steps: the deepest node's depth (or a bound of it).
        early_exit: stop the walk once every row has stopped (reads a value back per step: a host
            synchronisation); False walks all max_steps + 1 steps.

    Returns:
        (path [B, max_steps]: node id of the i-th accepted node (0 past tau), tau [B], y [B]).
    """
    B = p.shape[0]
    device = p.device
    rows = torch.arange(B, device=device)
    cur = torch.zeros(B, dtype=torch.long, device=device)
    alive = torch.ones(B, dtype=torch.bool, device=device)
    tau = torch.zeros(B, dtype=torch.long, device=device)
    y = torch.zeros(B, dtype=torch.long, device=device)
    path = torch.zeros(B, max_steps, dtype=torch.long, device=device)
    for step in range(max_steps + 1):
        here = p[rows, cur]  # [B, V]
        draw = here.argmax(-1) if greedy else categorical(here, uniforms[:, step])  # Y ~ p(. | node)
        y = torch.where(alive, draw, y)
        child = real & (parents == cur.unsqueeze(1)) & (tokens == draw.unsqueeze(1))  # [B, N]
        child[:, 0] = False  # the root is nobody's child
        enter = alive & child.any(1)  # siblings carry distinct tokens: at most one match
        if step < max_steps:
            path[:, step] = torch.where(enter, child.long().argmax(1), 0)
        tau = tau + enter.long()
        cur = torch.where(enter, child.long().argmax(1), cur)
        alive = enter
        if early_exit and not bool(alive.any()):
            break
    return path, tau, y
