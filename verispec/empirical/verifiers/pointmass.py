"""Point-mass tree verification: recursive rejection with a one-hot proposal per child
(`point_mass_tree_verify`), the verifier of deterministic drafts arranged as a trie (phrase pools:
Ouroboros, lookahead; `verispec.empirical.drafters.phrases`) on the node layout of the engine.
"""

from __future__ import annotations

import torch

from ..uniforms import bernoulli, categorical
from .common import Cursor, check_tensor, gather_last, residual

__all__ = ["point_mass_tree_verify", "point_mass_tree_uniforms"]


def child_table(parents: torch.Tensor, verifiable: torch.Tensor) -> torch.Tensor:
    """children [B, N, C] of every node (verifiable children only, in index order, -1 padded).

    A stable sort of the nodes by parent groups siblings in index order; a node's slot is its
    rank inside its group. C >= 1."""
    B, N = parents.shape
    device = parents.device
    group = torch.where(verifiable & (parents >= 0), parents, N)  # [B, N]; N = not a child
    order = torch.sort(group, dim=1, stable=True).indices  # [B, N]
    counts = torch.zeros(B, N + 1, dtype=torch.long, device=device).scatter_add_(1, group, torch.ones_like(group))
    first = counts.cumsum(1) - counts  # [B, N + 1], where each group starts in `order`
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(N, device=device).expand(B, N))  # [B, N]
    slot = rank - first.gather(1, group)  # [B, N]
    width = max(int(counts[:, :N].max()) if N else 0, 1)
    kids = torch.full((B, N + 1, width), -1, dtype=torch.long, device=device)
    child = group < N
    b_idx = torch.arange(B, device=device).unsqueeze(1).expand(B, N)
    j_idx = torch.arange(N, device=device).expand(B, N)
    kids[b_idx[child], group[child], slot[child]] = j_idx[child]
    return kids[:, :N]


def tree_height(parents: torch.Tensor, verifiable: torch.Tensor) -> int:
    """Largest depth (root 0) of a verifiable node. parents [B, N] with parents[:, j] < j."""
    depth = torch.zeros_like(parents)
    for j in range(1, parents.shape[1]):
        depth[:, j] = depth.gather(1, parents[:, j:j + 1].clamp(min=0)).squeeze(1) + 1
    return int(torch.where(verifiable, depth, 0).max()) if parents.numel() else 0


def _check_verify_input(p, tokens, parents, uniforms, verifiable):
    for name, t, ndim, kind in (("p", p, 3, "float"), ("tokens", tokens, 2, "int"), ("parents", parents, 2, "int"),
                                ("uniforms", uniforms, 2, "float")):
        check_tensor(t, name, ndim, kind)
    B, N, V = p.shape
    for name, t in (("tokens", tokens), ("parents", parents)):
        if tuple(t.shape) != (B, N):
            raise ValueError(f"{name}: expected shape [{B}, {N}] (as p), got {tuple(t.shape)}")
    if uniforms.shape[0] != B:
        raise ValueError(f"uniforms: expected shape [{B}, n], got {tuple(uniforms.shape)}")
    if bool(((uniforms < 0) | (uniforms >= 1) | torch.isnan(uniforms)).any()):
        raise ValueError("uniforms: values must lie in [0, 1)")
    if bool((parents[:, 0] != -1).any()) or bool((parents[:, 1:] < 0).any()):
        raise ValueError("parents: node 0 must be the only root (parent -1)")
    if bool((parents >= torch.arange(N, device=parents.device)).any()):
        raise ValueError("parents: every node's parent must come before it (parents[b, j] < j)")
    if bool(((tokens < 0) | (tokens >= V)).any()):
        raise ValueError(f"tokens: token ids must lie in [0, {V})")
    if not bool(torch.isfinite(p).all()) or bool((p < 0).any()):
        raise ValueError("p: probabilities must be finite and >= 0")
    if bool(((p.sum(-1, dtype=torch.float64) - 1).abs() > 1e-6).any()):
        raise ValueError("p: probability rows must sum to 1")
    if verifiable is None:
        return torch.ones(B, N, dtype=torch.bool, device=p.device)
    if not isinstance(verifiable, torch.Tensor) or verifiable.dtype != torch.bool or tuple(verifiable.shape) != (B, N):
        raise ValueError(f"verifiable: expected a bool tensor of shape [{B}, {N}]")
    return verifiable


def point_mass_tree_uniforms(parents: torch.Tensor, verifiable: torch.Tensor | None = None) -> int:
    """The most uniforms one row of `point_mass_tree_verify` can read: height * C + 1, with
    height the largest depth of a verifiable node and C the largest number of (verifiable)
    children (at most C tries per node entered, then one draw). parents int64 [B, N]."""
    if verifiable is None:
        verifiable = torch.ones_like(parents, dtype=torch.bool)
    return tree_height(parents, verifiable) * child_table(parents, verifiable).shape[-1] + 1


def point_mass_tree_verify(p: torch.Tensor, tokens: torch.Tensor, parents: torch.Tensor,
                           uniforms: torch.Tensor, verifiable: torch.Tensor | None = None):
    """Verify a tree of point-mass candidates (deterministic drafts) against the target, per row.

    From the root, at each node: try its children x (verifiable nodes only, in index order) with
    acceptance p'(x), p' = p(. | node) at first and p' <- norm(max(p' - one-hot(x), 0)) after each
    rejection (one uniform per try, `u < p'(x)`); on acceptance enter x; if none is accepted emit
    Y ~ p' (one uniform, inverse CDF); at a node without children emit Y ~ p (bonus). This is
    token verification with q = one-hot (Leviathan et al. 2023, arXiv 2211.17192; the reference
    `point_mass` method) per child, i.e. SpecInfer's recursive rejection sampling (arXiv
    2305.09781) with one point-mass proposal per child: every emitted token is an exact draw from
    the target (lossless at any T; at T = 0 it follows the argmax).

    Args:
        p: float64 [B, N, V], p[b, j] = target distribution after node j's root path.
        tokens: int64 [B, N], node j's token (node 0, the root, is the last emitted token).
        parents: int64 [B, N], parents[b, 0] = -1 and 0 <= parents[b, j] < j otherwise.
        uniforms: float [B, n], n >= `point_mass_tree_uniforms(parents, verifiable)`, in [0, 1).
        verifiable: optional bool [B, N]: nodes that may be accepted (False: e.g. a lookahead
            window riding in the same forward); default all.

    Returns:
        (path [B, N-1] int64: accepted node ids in order, -1 padded; tau [B] int64;
        y [B] int64: the correction/bonus token; consumed [B] int64: uniforms read).

    Raises:
        TypeError / ValueError: wrong dtypes or shapes, a second root, a parent after its child,
        token ids outside [0, V), p rows that are not distributions, uniforms outside [0, 1).
    """
    verifiable = _check_verify_input(p, tokens, parents, uniforms, verifiable)
    needed = point_mass_tree_uniforms(parents, verifiable)
    if uniforms.shape[1] < needed:
        raise ValueError(f"uniforms: need at least {needed} per row, got {uniforms.shape[1]}")
    return point_mass_walk(p, tokens, child_table(parents, verifiable), uniforms)


def point_mass_walk(p, tokens, kids, uniforms):
    """The walk of `point_mass_tree_verify` on checked input; kids [B, N, C] from `child_table`."""
    B, N, V = p.shape
    rows = torch.arange(B, device=p.device)
    cursor = Cursor(uniforms.to(p.device, torch.float64))
    node = torch.zeros(B, dtype=torch.long, device=p.device)
    done = torch.zeros(B, dtype=torch.bool, device=p.device)
    y = torch.zeros(B, dtype=torch.long, device=p.device)
    path = torch.full((B, max(N - 1, 1)), -1, dtype=torch.long, device=p.device)
    tau = torch.zeros(B, dtype=torch.long, device=p.device)
    for _ in range(N):
        if bool(done.all()):
            break
        current = p[rows, node]  # [B, V], p' of the walk at this node
        entered = torch.zeros(B, dtype=torch.bool, device=p.device)
        nxt = node.clone()
        for c in range(kids.shape[-1]):
            kid = kids[rows, node, c]  # [B]
            trying = ~done & ~entered & (kid >= 0)
            x = tokens[rows, kid.clamp(min=0)]  # [B]
            # a point mass accepts x with min(1, p'(x) / 1) = p'(x)
            accepted = trying & bernoulli(gather_last(current, x), cursor.take(trying))
            nxt = torch.where(accepted, kid, nxt)
            entered |= accepted
            rejected = (trying & ~accepted).unsqueeze(1)  # [B, 1]
            one_hot = torch.nn.functional.one_hot(x, V).to(current.dtype)  # [B, V]
            current = torch.where(rejected, residual(current, one_hot), current)
        stop = ~done & ~entered  # correction (after rejections) or bonus (leaf)
        y = torch.where(stop, categorical(current, cursor.take(stop)), y)
        path[rows[entered], tau[entered]] = nxt[entered]
        tau = tau + entered.long()
        node, done = nxt, done | stop
    return path, tau, y, cursor.pos
