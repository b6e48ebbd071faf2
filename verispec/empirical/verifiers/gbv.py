"""Greedy multi-path block verification, GBV (Thomas & Pal 2026, arXiv 2602.16961), the torch twin
of `verispec.reference.verifiers.gbv`."""

from __future__ import annotations

import torch

from .block import block_rule
from .common import RuleOutput, check_tree


def _rank(p: torch.Tensor, q: torch.Tensor):
    """Tokens ranked by r(t) = p(t)/q(t) ascending (inf where q = 0), ties by token id.

    Returns (order [B, V] token ids in rank order, position [B, V] rank of each token,
    below [B, V] q-mass of the tokens ranked strictly below each token)."""
    r = torch.where(q == 0, torch.full_like(q, float("inf")), p / torch.where(q == 0, 1, q))  # [B, V]
    order = torch.sort(r, dim=-1, stable=True).indices  # [B, V]
    V = q.shape[-1]
    position = torch.empty_like(order).scatter_(-1, order, torch.arange(V, device=q.device).expand_as(order))
    q_sorted = q.gather(-1, order)  # [B, V]
    exclusive = torch.cat([torch.zeros_like(q_sorted[:, :1]), q_sorted.cumsum(-1)[:, :-1]], dim=-1)  # [B, V]
    below = torch.empty_like(q).scatter_(-1, order, exclusive)  # [B, V]
    return order, position, below


def skewed_proposal(p: torch.Tensor, q: torch.Tensor, A: torch.Tensor, x: torch.Tensor,
                    num_paths: int, below: torch.Tensor | None = None) -> torch.Tensor:
    """q_skew(. | u) of the best of K i.i.d. paths at node u (Thomas & Pal 2026, arXiv 2602.16961).

    q_skew(t) ∝ (A + y(t) + z(t))^K - (A + y(t))^K with y(t) = x * (q-mass ranked below t),
    z(t) = x q(t), evaluated stably as q(t) sum_{i<K} a^i b^(K-1-i), a = (A + y + z)/(A + x),
    b = (A + y)/(A + x).

    Args:
        p, q: [B, V] target and draft at u. A: [B] mass of full paths ranked below every path
        through u. x: [B] joint draft probability of u. num_paths: K >= 1.
        below: [B, V] optional precomputed q-mass below each token (from the ranking).

    Returns:
        [B, V] normalised skewed proposal.
    """
    if below is None:
        below = _rank(p, q)[2]
    A, x = A.unsqueeze(-1), x.unsqueeze(-1)  # [B, 1]
    scale = A + x
    a = (A + x * (below + q)) / scale  # [B, V]
    b = (A + x * below) / scale  # [B, V]
    total = torch.zeros_like(q)
    for i in range(num_paths):
        total = total + a ** i * b ** (num_paths - 1 - i)
    weights = q * total  # [B, V]
    return weights / weights.sum(-1, keepdim=True)


def gbv_rule(p: torch.Tensor, q: torch.Tensor, paths: torch.Tensor, uniforms: torch.Tensor,
             validate: bool = True) -> RuleOutput:
    """Greedy multi-path block verification, GBV (Thomas & Pal 2026, arXiv 2602.16961).

    Descend from the root to the drafted child of highest rank r(t) = p(t)/q(t) (ties by id),
    which selects X*, the lexicographic maximum of the K i.i.d. drafted paths; collect the skewed
    proposal of the best-of-K path at each node; run `block_rule` on X* with q replaced by q_skew.
    K = 1 is exactly block verification. Uniforms read: as `block_rule` (at most L + 1).

    Args:
        p: [B, K, L+1, V]. q: [B, K, L, V]. paths: int [B, K, L] (all of length L; K i.i.d.
        paths from q). uniforms: [B, >= L+1]. validate: check inputs.

    Returns `RuleOutput` (path_index: the lowest index of a path equal to X*); raises TypeError /
    ValueError as `token_rule`, for the tree layout.
    """
    check_tree(p, q, paths, uniforms, None, lambda L, K: L + 1, validate)
    B, K, L = paths.shape
    rows = torch.arange(B, device=p.device)
    paths = paths.long()
    A = torch.zeros(B, dtype=p.dtype, device=p.device)
    x = torch.ones(B, dtype=p.dtype, device=p.device)
    alive = torch.ones(B, K, dtype=torch.bool, device=p.device)  # paths through the current node
    skews = []
    for d in range(L):
        node = alive.long().argmax(-1)  # [B], lowest path through the node
        p_d, q_d = p[rows, node, d], q[rows, node, d]  # [B, V]
        _, position, below = _rank(p_d, q_d)
        skews.append(skewed_proposal(p_d, q_d, A, x, K, below))
        tokens = paths[:, :, d]  # [B, K]
        rank = torch.where(alive, position.gather(-1, tokens), torch.full_like(tokens, -1))  # [B, K]
        best = tokens.gather(1, rank.argmax(-1, keepdim=True)).squeeze(1)  # [B]
        A = A + x * below[rows, best]
        x = x * q_d[rows, best]
        alive = alive & (tokens == best.unsqueeze(1))
    k_star = alive.long().argmax(-1)  # [B]
    out = block_rule(p[rows, k_star], torch.stack(skews, dim=1), paths[rows, k_star], uniforms, validate=False)
    return out._replace(path_index=k_star)


