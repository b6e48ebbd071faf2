"""SpecHub's one-step verifier as a pure batched tensor function (Sun et al. 2024, arXiv 2411.05289;
torch twin of `verispec.reference.verifiers.spechub.spechub_step`).

Fed the same uniforms, it emits the reference's token and reads as many uniforms: per row, the
first acceptance test reads u[:, 0]; a rejection goes on to the hub test with u[:, 1]; a second
rejection draws the correction from u[:, 2] (a single draft, q(a) = 1: the test reads u[:, 0] and
the correction u[:, 1]).
"""

from __future__ import annotations

import torch

from ..uniforms import bernoulli, categorical
from .common import accept_probability, residual


def hub_proposals(q: torch.Tensor):
    """(a [B], q_ia [B, V], q_ai [B, V]): the hub token a = argmax q (lowest id on ties) and the laws
    of the non-hub token in pairs (i, a) and (a, i), both zero at a."""
    a = torch.argmax(q, dim=-1)  # [B], first maximal index
    q_ia = q.scatter(1, a.unsqueeze(1), 0.0)  # [B, V]
    rest = q_ia.sum(-1, keepdim=True)  # [B, 1]
    q_a = q.gather(1, a.unsqueeze(1))  # [B, 1]
    q_ai = q_ia * (q_a / torch.where(rest > 0, rest, 1.0))  # [B, V]
    return a, q_ia, q_ai


def spechub_step(p: torch.Tensor, q: torch.Tensor, first: torch.Tensor, second: torch.Tensor,
                 u: torch.Tensor):
    """One SpecHub step per row.

    Args:
        p, q: target and draft distributions [B, V] (float64 recommended).
        first, second: the ordered draft pair [B] (int64); second = -1 marks a single draft (q(a) = 1).
        u: uniforms [B, 3] in [0, 1).

    Returns:
        (y [B] int64 emitted token, used [B] int64 uniforms read).

    Raises:
        ValueError: shapes that do not match.
    """
    B, V = p.shape
    if q.shape != (B, V) or first.shape != (B,) or second.shape != (B,) or u.shape != (B, 3):
        raise ValueError(f"spechub_step: shapes p {tuple(p.shape)}, q {tuple(q.shape)}, first "
                         f"{tuple(first.shape)}, second {tuple(second.shape)}, u {tuple(u.shape)}")
    rows = torch.arange(B, device=p.device)
    a, q_ia, q_ai = hub_proposals(q)
    single = second < 0  # [B]
    second_ = torch.where(single, first, second)
    hub_second = ~single & (second_ == a)  # pair (i, a)
    p_a = p[rows, a]  # [B]

    p1 = (p - q_ia).clamp(min=0).scatter(1, a.unsqueeze(1), p_a.unsqueeze(1))  # [B, V]
    r_ia = (q_ia - p).clamp(min=0).scatter(1, a.unsqueeze(1), 0.0)  # [B, V]
    p2 = (p1 - q_ai).clamp(min=0)  # [B, V]
    r_ai = (q_ai - p1).clamp(min=0).scatter(1, a.unsqueeze(1), 0.0)  # [B, V]
    hub_left_ai = (p_a - r_ai.sum(-1)).clamp(min=0)  # [B], p2(a) after the (a, i) pairs' share
    hub_left = (hub_left_ai - r_ia.sum(-1)).clamp(min=0)  # [B]
    p2 = p2.scatter(1, a.unsqueeze(1), hub_left.unsqueeze(1))
    mass = p2.sum(-1, keepdim=True)
    correction_law = torch.where(mass > 0, p2 / torch.where(mass > 0, mass, 1.0), p)  # [B, V]

    # first test: the non-hub token of the pair
    first_p = torch.where(hub_second, p[rows, first], p1[rows, second_])
    first_q = torch.where(hub_second, q_ia[rows, first], q_ai[rows, second_])
    take_first = bernoulli(accept_probability(first_p, first_q), u[:, 0])
    # second test: the hub, against what the earlier pairs left of p(a)
    hub_p = torch.where(hub_second, hub_left_ai, p_a)
    hub_q = torch.where(hub_second, r_ia.sum(-1), r_ai.sum(-1))
    take_hub = bernoulli(accept_probability(hub_p, hub_q), u[:, 1])
    correction = categorical(correction_law, u[:, 2])

    y = torch.where(take_first, torch.where(hub_second, first, second_),
                    torch.where(take_hub, a, correction))
    used = torch.where(take_first, 1, torch.where(take_hub, 2, 3))
    # a single draft: token-level speculative sampling of `first` against q
    single_take = bernoulli(accept_probability(p[rows, first], q[rows, first]), u[:, 0])
    single_y = torch.where(single_take, first, categorical(residual(p, q), u[:, 1]))
    y = torch.where(single, single_y, y)
    used = torch.where(single, torch.where(single_take, 1, 2), used)
    return y, used
