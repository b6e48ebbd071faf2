"""The uncommitted forest every KV storage keeps (`KVState`): per row, a committed prefix and the
nodes appended since the last commit, each attached to the prefix or to an earlier uncommitted node.

A node attends to its row's committed prefix, its ancestors and itself; its position id is the
committed length plus its depth. The storages (`verispec.empirical.kv`, and the static one in
`verispec.empirical.speedups.static_kv`) differ in where the keys and values sit.
"""

from __future__ import annotations

import torch

from .model import CausalLM, tree_ancestors

__all__ = ["KVState"]


class KVState:
    """The committed length and the uncommitted forest shared by every storage.

    Attributes:
        model: the `CausalLM`. pos: int64 [B], each row's committed length (next position id).
        ancestry: bool [B, m, m] of the uncommitted forest (`model.tree_ancestors`).
        real: bool [B, m]: which uncommitted nodes hold a real token (the rest is padding).
        padded_slots, peak_slots: counters (`verispec.empirical.kv`).
        checks: validate appends and commits (each check reads a value back: a host sync); a
            storage whose appends come from the engine's checked trees may turn them off.
        static: fixed shapes (`speedups.static_kv.StaticKV`): fed whole trees, padding included.
    """

    checks = True
    static = False

    def __init__(self, model: CausalLM, batch: int):
        self.model = model
        device = model.device
        self.pos = torch.zeros(batch, dtype=torch.long, device=device)  # [B]
        self.ancestry = torch.zeros(batch, 0, 0, dtype=torch.bool, device=device)  # [B, m, m]
        self.real = torch.zeros(batch, 0, dtype=torch.bool, device=device)  # [B, m]
        self.padded_slots = self.peak_slots = 0

    def reserve(self, committed: int) -> None:
        """Room for `committed` tokens per row: a growing storage needs none (`StaticKV.reserve`)."""

    def close(self) -> None:
        """Give preallocated buffers back: a growing storage holds none (`StaticKV.close`)."""

    @property
    def uncommitted(self) -> int:
        """m, the number of nodes appended since the last commit."""
        return self.real.shape[1]

    def _grow(self, parents: torch.Tensor, real: torch.Tensor):
        """Add n nodes (parents [B, n] in forest numbering, real [B, n]) to the forest; returns
        (their ancestry rows [B, n, m + n], their depth [B, n])."""
        B, n = parents.shape
        m = self.uncommitted
        if tuple(real.shape) != (B, n) or real.dtype != torch.bool:
            raise ValueError(f"real: expected a bool tensor of shape {(B, n)}")
        ancestry = tree_ancestors(parents, self.ancestry, check=self.checks)  # [B, m + n, m + n]
        parent_real = torch.cat([self.real, real], 1).gather(1, parents.clamp(min=0))  # [B, n]
        orphan = real & (parents >= 0) & ~parent_real
        if self.checks and bool(orphan.any()):
            b, j = (int(i) for i in orphan.nonzero()[0])
            raise ValueError(f"parents: row {b}, node {m + j} is real but its parent "
                             f"{int(parents[b, j])} is padding")
        self.ancestry, self.real = ancestry, torch.cat([self.real, real], 1)
        new = ancestry[:, m:]  # [B, n, m + n]
        return new, new.sum(-1) - 1

    def _check_keep(self, keep: torch.Tensor) -> torch.Tensor:
        """keep [B, m] bool: real nodes forming a root path (each kept node's ancestors kept)."""
        if not isinstance(keep, torch.Tensor) or keep.dtype != torch.bool or keep.shape != self.real.shape:
            raise ValueError(f"keep: expected a bool tensor of shape {tuple(self.real.shape)}")
        if keep.numel() and self.checks:
            dropped_ancestor = (self.ancestry & ~keep.unsqueeze(1)).any(-1)  # [B, m]
            deepest = torch.where(keep, self.ancestry.sum(-1), 0).amax(1)  # [B]: a path keeps that many nodes
            if bool((keep & (~self.real | dropped_ancestor)).any()) or bool((keep.sum(1) != deepest).any()):
                raise ValueError("keep: must mark a root path of real nodes in every row")
        return keep

    def _reset(self, kept: torch.Tensor) -> None:
        self.pos = self.pos + kept.sum(1)
        B = self.pos.shape[0]
        self.ancestry = self.ancestry.new_zeros(B, 0, 0)
        self.real = self.real.new_zeros(B, 0)

    def _select_rows(self, rows: torch.Tensor) -> None:
        if self.uncommitted:
            raise RuntimeError("select: commit before selecting rows")
        self.pos, self.ancestry, self.real = self.pos[rows], self.ancestry[rows], self.real[rows]

    def prefill(self, tokens: torch.Tensor, lengths: torch.Tensor) -> None:
        """Commit row b's first lengths[b] tokens of tokens [B, n] (right padding), as a chain;
        rows of one length go through `CausalLM.prefill` where the storage allows (benches reuse it)."""
        n = int(lengths.max()) if lengths.numel() else 0
        if n == 0:
            return
        tokens = tokens[:, :n]
        if bool((lengths == n).all()) and self._prefill_whole(tokens):
            self.pos = lengths.to(self.pos)
            return
        parents = (torch.arange(n, device=tokens.device) - 1).expand_as(tokens)  # a chain
        real = torch.arange(n, device=tokens.device) < lengths.unsqueeze(1)  # [B, n]
        self.append(tokens, parents, real, logits_to_keep=1)  # a prefill reads no logits
        self.commit(real)

    def _prefill_whole(self, tokens: torch.Tensor) -> bool:
        """Commit tokens [B, n] (no padding) with one `CausalLM.prefill`; False if not supported."""
        return False
