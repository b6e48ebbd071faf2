"""The KV state of one model for a batch of rows: append a token tree, keep the accepted path.

Every storage holds, per row, a *committed* prefix (tokens emitted) and an *uncommitted forest*
(nodes appended since the last commit, each attached to the prefix or to an earlier uncommitted
node). A node attends to its row's committed prefix, its ancestors and itself; its position id is
the committed length plus its depth. `commit(keep)` keeps a root path per row and drops the rest.

- `PaddedKV(model, batch, compact=True)`: a [B, S] cache and a slot validity mask (4D additive
  mask). compact gathers each row's kept slots left at every commit; compact=False crops to the
  longest kept length and leaves rejected slots masked (vanilla batching, EMS-SD's baseline).
- `SequenceKV(model)`: one sequence (B = 1), always compact.
- `PackedKV(model, batch)`: EMS-SD's unpadded KV and inputs (Ni et al. 2024, arXiv 2405.07542):
  every row's slots in one sequence, owner[slot] = row, only real nodes fed.
- `StaticKV(model, batch)`: preallocated per layer, appends at device-side slots, commits and
  rollbacks as index operations, no value read back (`verispec.empirical.speedups.static_kv`).

Counters: `padded_slots` (slots written that hold no real token, plus rejected slots left masked,
read off the tensors fed and kept) and `peak_slots` (most slots held after a forward).
"""

from __future__ import annotations

import torch

from ..reference.deprecation import deprecated
from . import model as model_module
from .forest import KVState
from .model import CausalLM, additive_mask, cache_length, crop_cache, gather_cache, select_cache_rows
from .speedups.attention import new_counting_cache, packed_forward, packed_rows, use_packed_attention
from .speedups.static_kv import StaticKV

__all__ = ["KVState", "PaddedKV", "SequenceKV", "PackedKV", "StaticKV", "STORAGES", "new_kv"]


def _packed_positions(pos: torch.Tensor, rows: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
    """Position id of each packed node: its row's committed length + its depth in the forest."""
    return pos[rows] + depth


class PaddedKV(KVState):
    """A [B, S] cache with a validity mask (module docstring); compact=False is vanilla batching."""

    def __init__(self, model: CausalLM, batch: int, compact: bool = True):
        super().__init__(model, batch)
        self.compact = compact
        self.cache = model.new_cache()
        self.valid = torch.zeros(batch, 0, dtype=torch.bool, device=model.device)  # [B, S0] committed

    def _prefill_whole(self, tokens) -> bool:
        _, self.cache = self.model.prefill(tokens, logits_to_keep=1)
        self.valid = torch.ones(tokens.shape, dtype=torch.bool, device=self.model.device)
        return True

    def append(self, tokens: torch.Tensor, parents: torch.Tensor, real: torch.Tensor,
               logits_to_keep: int = 0, chain: bool = False) -> torch.Tensor:
        """ONE forward of n new nodes per row: tokens / parents (forest numbering, -1: attached to
        the committed prefix) / real: [B, n]. Returns logits float32 [B, n, V] (rows of padding
        nodes are meaningless), or [B, k, V] of the last k columns with logits_to_keep = k >= 1
        (the output layer runs on those only). `chain`: the static KV's hint (`StaticKV.append`);
        a growing cache builds its mask from the parents either way."""
        ancestry, depth = self._grow(parents, real)  # [B, n, m + n], [B, n]
        # what a new node may see: `model.visible_slots`, looked up per call (a planted-bug test replaces it)
        mask = additive_mask(model_module.visible_slots(self.valid, ancestry), self.model.dtype).unsqueeze(1)
        position = self.pos.unsqueeze(1) + depth  # [B, n]
        logits, self.cache = self.model.forward(tokens, self.cache, position_ids=position, attention_mask=mask,
                                                logits_to_keep=logits_to_keep)
        self.padded_slots += int((~real).sum())  # written, holding no token of the row
        self.peak_slots = max(self.peak_slots, cache_length(self.cache) * tokens.shape[0])
        return logits

    def commit(self, keep: torch.Tensor, prefix: bool = False) -> None:
        """Keep, per row, the uncommitted nodes marked in keep [B, m] (a root path). `prefix`: the
        static KV's hint (`StaticKV.commit`); a growing cache gathers the kept nodes either way."""
        keep = self._check_keep(keep)
        if self.compact:
            every = torch.cat([self.valid, keep], dim=1)  # [B, S]
            counts = every.sum(1)
            width = int(counts.max())
            gather_cache(self.cache, torch.sort((~every).long(), dim=1, stable=True).indices[:, :width])
            self.valid = torch.arange(width, device=keep.device) < counts.unsqueeze(1)
        else:  # vanilla: crop to the longest kept length, the rest stays written and masked
            columns = keep.any(0).nonzero()
            end = int(columns[-1, 0]) + 1 if columns.numel() else 0
            crop_cache(self.cache, self.valid.shape[1] + end)
            self.padded_slots += int((self.real[:, :end] & ~keep[:, :end]).sum())  # rejected, kept masked
            self.valid = torch.cat([self.valid, keep[:, :end]], dim=1)
        self._reset(keep)

    def select(self, rows: torch.Tensor) -> None:
        """Keep only batch rows `rows` (after a commit)."""
        self._select_rows(rows)
        select_cache_rows(self.cache, rows)
        self.valid = self.valid[rows]

    def slots(self) -> int:
        """Slots held, summed over rows (padding and masked slots included)."""
        return cache_length(self.cache) * self.valid.shape[0]


class SequenceKV(PaddedKV):
    """One sequence (B = 1): always compact, nothing masked stays in the cache."""

    def __init__(self, model: CausalLM, batch: int = 1):
        if batch != 1:
            raise ValueError(f"batch: a SequenceKV holds one row, got {batch}")
        super().__init__(model, 1, compact=True)

    def rollback(self, length: int) -> None:
        """Keep the first `length` committed tokens (after a commit): the sequence's prefix."""
        if self.uncommitted:
            raise RuntimeError("rollback: commit before rolling back")
        crop_cache(self.cache, length)
        self.valid = self.valid[:, :length]
        self.pos = self.pos.clamp(max=length)


class PackedKV(KVState):
    """EMS-SD layout (module docstring): batch dimension 1, owner[slot] = row of every slot.

    attention="varlen" (default): every forward runs per-row attention
    (`verispec.empirical.speedups.attention`; tree layers below cached siblings with a `forest`);
    "dense": a [1, 1, Q, S + Q] block-diagonal mask over the whole packed cache (a baseline).
    """

    def __init__(self, model: CausalLM, batch: int, attention: str = "varlen"):
        super().__init__(model, batch)
        if attention not in ("varlen", "dense"):
            raise ValueError(f"attention: expected 'varlen' or 'dense', got {attention!r}")
        self.varlen = attention == "varlen"
        if self.varlen:
            use_packed_attention(model)  # idempotent; other storages' forwards are unchanged
            self.cache = new_counting_cache(model)
        else:
            self.cache = model.new_cache()
        device = model.device
        self.owner = torch.zeros(0, dtype=torch.long, device=device)  # [S], committed then uncommitted
        self.base = 0  # committed slots
        self.slot = torch.zeros(batch, 0, dtype=torch.long, device=device)  # [B, m]: -1 = not fed
        self.parent = torch.zeros(batch, 0, dtype=torch.long, device=device)  # [B, m]: forest parents

    def _prefill_whole(self, tokens) -> bool:
        if tokens.shape[0] != 1:  # several rows are packed into one sequence, not prefilled side by side
            return False
        _, self.cache = self.model.prefill(tokens, logits_to_keep=1)
        self.owner = torch.zeros(tokens.shape[1], dtype=torch.long, device=self.model.device)
        self.base = tokens.shape[1]
        return True

    def _attention_mask(self, ancestry: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """[1, 1, Q, S + Q] additive mask of the Q packed nodes (rows, cols: [Q] into the new
        block; ancestry [B, n, m + n] its rows): a node sees its row's committed slots and the
        slots of its ancestors, itself included (self.slot already holds the new slots)."""
        Q, S = rows.numel(), self.owner.numel()
        committed = rows.unsqueeze(1) == self.owner[:self.base].unsqueeze(0)  # [Q, base]
        mine = ancestry[rows, cols]  # [Q, m + n]
        slot = self.slot[rows]  # [Q, m + n]
        fed = slot >= 0
        width = S + Q - self.base + 1  # the last column absorbs nodes that were never fed
        later = torch.zeros(Q, width, dtype=torch.bool, device=rows.device)
        later.scatter_(1, torch.where(fed, slot - self.base, width - 1), mine & fed)
        allowed = torch.cat([committed, later[:, :-1]], dim=1)  # [Q, S + Q]
        return additive_mask(allowed, self.model.dtype)[None, None]

    def append(self, tokens: torch.Tensor, parents: torch.Tensor, real: torch.Tensor,
               logits_to_keep: int = 0, chain: bool = False) -> torch.Tensor:
        """As `PaddedKV.append` (`chain` ignored); only the real nodes are fed, packed into one sequence (the output
        layer runs on all of them, as a row's last k columns are not the packed sequence's last)."""
        B, n = tokens.shape
        ancestry, depth = self._grow(parents, real)  # [B, n, m + n], [B, n]
        rows, cols = real.nonzero(as_tuple=True)  # row-major: each row's nodes in order
        Q, S = rows.numel(), self.owner.numel()
        new_slot = torch.full((B, n), -1, dtype=torch.long, device=tokens.device)
        new_slot[rows, cols] = S + torch.arange(Q, device=tokens.device)
        self.slot = torch.cat([self.slot, new_slot], dim=1)
        self.parent = torch.cat([self.parent, parents], dim=1)
        first = n - logits_to_keep if 0 < logits_to_keep < n else 0  # the first column returned
        logits = torch.zeros(B, n - first, self.model.vocab_size, device=self.model.device)  # [B, n - first, V]
        if Q == 0:
            return logits
        position = _packed_positions(self.pos, rows, depth[rows, cols]).unsqueeze(0)  # [1, Q]
        fed = tokens[rows, cols].unsqueeze(0)  # [1, Q]
        written = getattr(self.cache, "slots_written", 0)
        if self.varlen:
            packed = packed_forward(self.model, fed, self.cache, position,
                                    self._varlen_rows(ancestry, parents, rows, cols, S))
        else:
            mask = self._attention_mask(ancestry, rows, cols)
            packed, self.cache = self.model.forward(fed, self.cache, position_ids=position, attention_mask=mask)
        kept = cols >= first
        logits[rows[kept], cols[kept] - first] = packed[0, kept]
        self.owner = torch.cat([self.owner, rows])
        # Slots the cache counted as written (a plain cache: the width fed) minus the real nodes.
        written = self.cache.slots_written - written if hasattr(self.cache, "slots_written") else fed.shape[1]
        self.padded_slots += written - int(real.sum())
        self.peak_slots = max(self.peak_slots, cache_length(self.cache))
        return logits

    def _varlen_rows(self, ancestry, parents, rows, cols, S):
        """The per-row attention spec (`verispec.empirical.speedups.attention.packed_rows`) of this forward.

        When every new node descends from every earlier uncommitted slot of its row (a
        verification tree, a chain, a draft's pending tokens) each node sees all its row's cached
        slots and no `forest` is needed. Otherwise (a draft tree layer below cached siblings) the
        cached uncommitted slots go in as a `forest`, so a node sees only its cached ancestors."""
        n = parents.shape[1]
        m = self.uncommitted - n  # uncommitted nodes before this forward
        old_fed = self.slot[:, :m] >= 0  # [B, m]
        parent = parents[rows, cols]  # [Q], forest numbering
        below = self.slot[rows, parent.clamp(min=0)]  # [Q]: the parent's cache slot (if fed)
        packed_parent = torch.where(parent >= m, below - S, -1)
        if not m or bool((ancestry[rows, cols, :m] == old_fed[rows]).all()):
            return packed_rows(self.owner, rows, packed_parent)
        packed_parent = torch.where((parent >= 0) & (parent < m), -2 - below, packed_parent)
        return packed_rows(self.owner, rows, packed_parent, self._forest(m, S))

    def _forest(self, m: int, S: int) -> torch.Tensor:
        """int64 [S]: -1 for a committed slot; for an uncommitted cached slot its parent's slot,
        or -2 when it hangs off the committed prefix (`attention.packed_rows`' `forest`)."""
        forest = torch.full((S,), -1, dtype=torch.long, device=self.owner.device)
        b, i = (self.slot[:, :m] >= 0).nonzero(as_tuple=True)  # the fed uncommitted nodes
        p = self.parent[b, i]  # [u], forest numbering (a real node's parent is real, hence fed)
        forest[self.slot[b, i]] = torch.where(p >= 0, self.slot[b, p.clamp(min=0)], -2)
        return forest

    def commit(self, keep: torch.Tensor, prefix: bool = False) -> None:
        """Keep exactly the kept slots (a gather): no rejected or padded slot stays in the cache
        (`prefix` ignored, as `PaddedKV.commit`)."""
        keep = self._check_keep(keep)
        kept = torch.sort(self.slot[keep]).values  # cache positions of the kept nodes
        positions = torch.cat([torch.arange(self.base, device=keep.device), kept])
        if positions.numel() != cache_length(self.cache):
            gather_cache(self.cache, positions.unsqueeze(0))
        self.padded_slots += positions.numel() - self.base - int(keep.sum())  # retained, not kept
        self.owner = self.owner[positions]
        self.base = self.owner.numel()
        self.slot, self.parent = self.slot[:, :0], self.parent[:, :0]
        self._reset(keep)

    def select(self, rows: torch.Tensor) -> None:
        """Keep only batch rows `rows` (after a commit)."""
        remap = torch.full_like(self.pos, -1)
        remap[rows] = torch.arange(rows.numel(), device=rows.device)
        positions = (remap[self.owner] >= 0).nonzero().squeeze(1)
        if positions.numel() != cache_length(self.cache):
            gather_cache(self.cache, positions.unsqueeze(0))
        self._select_rows(rows)
        self.owner = remap[self.owner[positions]]
        self.base = self.owner.numel()
        self.slot, self.parent = self.slot[rows], self.parent[rows]

    def slots(self) -> int:
        """Slots held (all rows)."""
        return cache_length(self.cache)


#: Storage name -> factory(model, batch).
STORAGES = {"sequence": SequenceKV, "padded": PaddedKV, "vanilla": lambda m, b: PaddedKV(m, b, compact=False),
            "packed": PackedKV, "static": StaticKV}
#: Deprecated storage names -> their name now.
OLD_STORAGES = {"ems": "packed"}


def storage_name(storage: str) -> str:
    """`storage`, or its name now if it is a deprecated one (with a DeprecationWarning)."""
    if storage in OLD_STORAGES:
        deprecated(f"storage={storage!r}", f"storage={OLD_STORAGES[storage]!r}", stacklevel=4)  # the user's call
        return OLD_STORAGES[storage]
    return storage


def new_kv(storage: str, model: CausalLM, batch: int) -> KVState:
    """A fresh KV state of kind `storage` ("sequence", "padded", "vanilla", "packed", "static";
    "ems", the packed storage's former name, is accepted with a DeprecationWarning).

    Raises:
        ValueError: unknown storage.
    """
    storage = storage_name(storage)
    if storage not in STORAGES:
        raise ValueError(f"storage: expected one of {', '.join(STORAGES)}, got {storage!r}")
    return STORAGES[storage](model, batch)
