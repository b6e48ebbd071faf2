"""Importance-sampling (IS) multi-draft steps as pure batched tensor functions: torch twins of
`verispec.reference.verifiers.importance.optimal_is_step` and `khisti_step` (Khisti et al. 2024,
arXiv 2410.18234).

The selection laws come from the reference's linear programs (`optimal_selection`,
`pair_selection`), solved on the CPU per node as the GBV authors' public code does with scipy; these
functions take them as tables and do the sampling. Fed the same uniforms, they emit the
reference's token and read as many uniforms.
"""

from __future__ import annotations

import torch

from ..uniforms import bernoulli, categorical
from .common import accept_probability, residual


def single_draft(p, q_sel, y, u_accept, u_correction):
    """Single-draft speculative sampling of y ~ q_sel against p -> (token [B], accepted [B])."""
    rows = torch.arange(p.shape[0], device=p.device)
    take = bernoulli(accept_probability(p[rows, y], q_sel[rows, y]), u_accept)
    return torch.where(take, y, categorical(residual(p, q_sel), u_correction)), take


def optimal_is_step(p: torch.Tensor, q_sel: torch.Tensor, candidates: torch.Tensor,
                    select: torch.Tensor, u: torch.Tensor):
    """Optimal IS selection among the distinct drafted tokens, then single-draft SD.

    Args:
        p: target [B, V]; q_sel: law of the selected token [B, V] (the reference's q_I).
        candidates: the sorted distinct drafted tokens [B, S] (int64, padded with any id);
        select: their selection probabilities [B, S] (0 on padding).
        u: uniforms [B, 3]: selection, acceptance, correction.

    Returns:
        (y [B] int64, used [B] int64: 2 when accepted, else 3).
    """
    pick = categorical(select, u[:, 0])  # [B]
    y = candidates.gather(1, pick.unsqueeze(1)).squeeze(1)  # [B]
    out, take = single_draft(p, q_sel, y, u[:, 1], u[:, 2])
    return out, torch.where(take, 2, 3)


def khisti_step(p: torch.Tensor, keeps: torch.Tensor, q_sel: torch.Tensor, drafts: torch.Tensor,
                u: torch.Tensor):
    """Khisti et al.'s pairwise IS tournament, then single-draft SD.

    Args:
        p: target [B, V]. keeps: [B, K - 1, V, V], keeps[:, r, i, j] = probability that the running
            winner i keeps its place against draft j in round r. q_sel: law of the final winner
            [B, V]. drafts: the K drafted tokens in path order [B, K]. u: uniforms [B, K + 1].

    Returns:
        (y [B] int64, used [B] int64: K when accepted, else K + 1).
    """
    B, K = drafts.shape
    rows = torch.arange(B, device=p.device)
    winner = drafts[:, 0]
    for r in range(K - 1):
        challenger = drafts[:, r + 1]
        keep = keeps[rows, r, winner, challenger]  # [B]
        winner = torch.where(bernoulli(keep, u[:, r]), winner, challenger)
    out, take = single_draft(p, q_sel, winner, u[:, K - 1], u[:, K])
    return out, torch.where(take, K, K + 1)
