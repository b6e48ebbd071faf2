"""Greedy draft sampling on the engine (Hu et al. 2025, arXiv 2502.18779): the torch twin of
`verispec.reference.drafters.greedy_draft_paths`. At the root: the K - 1 most likely tokens of q and
one token drawn from q_last = norm(q off them), the tree's q there; below it, chains from q."""

from __future__ import annotations

import torch

from .base import DraftTree, PathsDrafter
from ...reference.deprecation import renamed_keywords
from ..uniforms import categorical

__all__ = ["GreedyDraftDrafter", "greedy_draft"]


@renamed_keywords(num_drafts="num_paths")
def greedy_draft(q: torch.Tensor, num_paths: int, u: torch.Tensor):
    """Greedy drafts per row (`verispec.reference.drafters.greedy_draft`).

    Args:
        q: draft distributions [B, V] (float64). num_paths: K >= 1. u: uniforms [B] (the draw).

    Returns:
        (tokens [B, K] int64: greedy tokens by rank, then the drawn one, 0 past it; drawn [B, K]
        bool: which of the K are drafts; q_last [B, V] float64: the drawn token's law).
    """
    (B, V), K = q.shape, num_paths
    order = torch.sort(-q, dim=-1, stable=True).indices  # [B, V]: q descending, lower id first on ties
    greedy_count = ((q > 0).sum(-1) - 1).clamp(min=0, max=K - 1)  # [B]
    ranks = torch.arange(K, device=q.device)
    is_greedy = ranks.unsqueeze(0) < greedy_count.unsqueeze(1)  # [B, K]
    top = torch.zeros(B, K, dtype=torch.long, device=q.device)
    top[:, :min(K, V)] = order[:, :min(K, V)]
    # the greedy tokens' mask; the other ranks scatter into a spare column V, dropped after
    taken = torch.zeros(B, V + 1, dtype=torch.bool, device=q.device).scatter_(
        1, torch.where(is_greedy, top, V), True)[:, :V]  # [B, V]
    q_last = q.masked_fill(taken, 0.0) / q.masked_fill(taken, 0.0).sum(-1, keepdim=True)  # [B, V]
    tokens = torch.where(is_greedy, top, 0).scatter(1, greedy_count.unsqueeze(1), categorical(q_last, u).unsqueeze(1))
    return tokens, ranks.unsqueeze(0) <= greedy_count.unsqueeze(1), q_last


class GreedyDraftDrafter(PathsDrafter):
    """K paths of L tokens starting with `greedy_draft` (one uniform per row); chains from q below."""

    def __init__(self, draft_length: int, num_paths: int, draft_temperature: float | None = None):
        super().__init__(draft_length, num_paths, True, draft_temperature)
        self.full_paths = False  # some paths are cut short

    def _first_tokens(self, q_root):  # lengths 0 for the paths past the drawn draft
        B = q_root.shape[0]
        tokens, drawn, self._q_last = greedy_draft(q_root, self.K, self.source.take(B, 1, q_root.device)[:, 0])
        return tokens, torch.where(drawn, self.L, 0)

    def draft(self, rows) -> DraftTree:
        tree = super().draft(rows)
        tree.q[:, 0] = self._q_last  # the root's children: only the drawn one has a law, q_last
        return tree
