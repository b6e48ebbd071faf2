"""The verification step of greedy draft sampling as a batched tensor function (Hu et al. 2025,
arXiv 2502.18779; torch twin of `verispec.reference.verifiers.hu_greedy.hu_greedy_step`).

Per row: accept the one drawn draft x (the last draft) with probability min(1, p(x) / q_last(x))
at u[:, 0]; else draw from norm(max(p - q_last, 0)) at u[:, 1] (a greedy draft reached there is
accepted by the caller, which sees it among the drafts). Reads the reference's uniforms.
"""

from __future__ import annotations

import torch

from .importance import single_draft


def hu_greedy_step(p: torch.Tensor, q_last: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor):
    """One step per row.

    Args:
        p: target [B, V]. q_last: the drawn draft's law [B, V] (zero on the greedy drafts).
        drafts: [B, K] int64 in path order, -1 where no path passes (the drawn draft is the last
            present one). u: uniforms [B, 2] (acceptance, correction).

    Returns:
        (y [B] int64 emitted token, used [B] int64: 1 when x is accepted, else 2).

    Raises:
        ValueError: shapes that do not match, or a row without drafts.
    """
    B, V = p.shape
    if q_last.shape != (B, V) or drafts.dim() != 2 or drafts.shape[0] != B or u.shape != (B, 2):
        raise ValueError(f"hu_greedy_step: shapes p {tuple(p.shape)}, q_last {tuple(q_last.shape)}, "
                         f"drafts {tuple(drafts.shape)}, u {tuple(u.shape)}")
    present = drafts >= 0  # [B, K]
    if not bool(present.any(1).all()):
        raise ValueError("hu_greedy_step: every row needs at least one draft")
    K = drafts.shape[1]
    last = K - 1 - present.flip(1).long().argmax(1)  # [B], the last present path
    x = drafts.gather(1, last.unsqueeze(1)).squeeze(1)  # [B], the drawn draft
    y, take = single_draft(p, q_last, x, u[:, 0], u[:, 1])
    return y, torch.where(take, 1, 2)
