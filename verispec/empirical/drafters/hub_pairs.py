"""SpecHub's drafter on the engine: the torch twin of `verispec.reference.verifiers.spechub.hub_pairs`
(Sun et al. 2024, "SpecHub: Provable Acceleration to Multi-Draft Speculative Decoding",
arXiv 2411.05289; public code MasterGodzilla/Speculative_decoding_OT, `sampling_a_and_i`).

Two paths of L tokens. Their first tokens are the hub pair drawn from q at the root, with
a = argmax q (lowest id on ties): first ~ q; if first == a, second ~ q(. | != a), else second = a.
So the pair always differs and the paths share only the root. Below the root each path continues
as its own chain from q. When q(a) = 1 the second draft is undefined: a alone is drafted (path 1
is empty), as in the reference.
"""

from __future__ import annotations

import torch

from .base import PathsDrafter
from ..uniforms import categorical

__all__ = ["HubPairsDrafter", "hub_pair"]


def hub_pair(q: torch.Tensor, u: torch.Tensor):
    """SpecHub's ordered draft pair per row (module docstring): q float64 [B, V] draft laws, u [B, 2]
    uniforms (first draw, second draw) -> (tokens int64 [B, 2], single bool [B]: q(a) = 1, only
    tokens[:, 0] = a is a draft)."""
    rows = torch.arange(q.shape[0], device=q.device)
    a = torch.argmax(q, dim=-1)  # [B], the first maximal id
    single = q[rows, a] == 1
    first = categorical(q, u[:, 0])  # [B]
    rest = q.scatter(1, a.unsqueeze(1), 0.0)  # [B, V], q(. | != a) up to normalisation
    rest = torch.where(single.unsqueeze(1), q, rest)  # no second draw exists: any valid law
    second = torch.where(first == a, categorical(rest, u[:, 1]), a)
    return torch.stack([torch.where(single, a, first), second], dim=1), single


class HubPairsDrafter(PathsDrafter):
    """K = 2 paths of L tokens whose first tokens are `hub_pair`; i.i.d. chains from q below."""

    def __init__(self, draft_length: int, draft_temperature: float | None = None):
        super().__init__(draft_length, 2, True, draft_temperature)
        self.full_paths = False  # some paths are cut short

    def _first_tokens(self, q_root):
        """[B, 2] depth-1 tokens and lengths [B, 2] (path 1 empty where q(a) = 1)."""
        B = q_root.shape[0]
        tokens, single = hub_pair(q_root, self.source.take(B, 2, q_root.device))
        lengths = torch.full((B, 2), self.L, dtype=torch.long, device=q_root.device)
        lengths[:, 1] = torch.where(single, 0, self.L)
        return tokens, lengths
