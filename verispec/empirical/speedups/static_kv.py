"""The static KV storage ("static"): preallocated per layer, every edit an index operation.

As gpt-fast's static cache (and transformers' `StaticCache`), each layer's keys and values are one
buffer [B, H_kv, S, D] allocated once, with S (the capacity) rounded up to a multiple of
`CAPACITY_STEP` so that one buffer, and the steps captured on it (`verispec.empirical.speedups.
graphs`), serve many prompts. Nothing grows or is concatenated per iteration:

- **append** writes row b's n new nodes at slots given by a device tensor `write` [B, n]: its real
  nodes at pos[b] + (real nodes it already holds uncommitted) + 0, 1, ... (so a row's real nodes
  sit contiguously after its committed prefix, whatever padding the batch carries), padding nodes
  at the last slot, S - 1, which no query ever sees. The attention mask [B, 1, n, S] is 0 on the
  committed slots (slot < pos[b]) and on the slots of a node's uncommitted ancestors and itself
  (`verispec.empirical.model.visible_slots`, mapped from node order to slots), the dtype's minimum
  elsewhere; position ids are pos[b] + depth, as every storage's.
- **commit** (keep a root path per row) moves the kept nodes' keys and values to pos[b], pos[b] + 1,
  ... with one gather and one scatter per layer, then pos[b] += kept. A chain's kept nodes already
  sit there (they are the first real nodes in slot order), so a chain's commit moves nothing
  (`commit(keep, prefix=True)`): rollback is pos alone.
- **select** (finished rows leave) copies the kept rows into a smaller buffer.

The storage reads no value back: pos, the write slots and the masks stay on the device, so an
iteration on it makes no host synchronisation (`verispec.empirical.speedups.syncs`). Its checks of
appends and commits are off (each would read a value back); the engine checks the trees of drafters
it does not trust before the target's append.

Which storages are static: this one. "sequence", "padded" and "vanilla" keep growing caches (the
compact gather of "padded" reorders a whole cache per commit), and "packed" (EMS-SD) keeps its
unpadded varlen layout, whose per-row key sets are host-side index lists by design.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from .. import model as model_module
from ..forest import KVState
from ..model import CausalLM, additive_mask

__all__ = ["StaticKV", "SlotCache", "CAPACITY_STEP", "lease_cache"]

#: Capacities are rounded up to a multiple of this many slots (one buffer serves many prompts).
CAPACITY_STEP = 256


class _SlotLayer(CacheLayerMixin):
    """One layer's keys and values [B, H_kv, S, D], written at the cache's `write` slots."""

    is_compileable = True
    is_sliding = False

    def __init__(self, owner: "SlotCache"):
        super().__init__()
        self.owner = owner

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        B, H, _, D = key_states.shape
        self.keys = key_states.new_zeros(B, H, self.owner.capacity, D)  # [B, H_kv, S, D]
        self.values = value_states.new_zeros(B, value_states.shape[1], self.owner.capacity, value_states.shape[3])
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        write = self.owner.write  # [B, n] slots
        self.keys.scatter_(2, write[:, None, :, None].expand_as(key_states), key_states)
        self.values.scatter_(2, write[:, None, :, None].expand_as(value_states), value_states)
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.owner.capacity, 0

    def get_seq_length(self) -> int:
        return self.owner.capacity

    def get_max_length(self) -> int:
        return self.owner.capacity


class SlotCache(Cache):
    """A transformers `Cache` of preallocated slots: every layer's keys / values [B, H_kv, S, D]
    (allocated at the first forward), written at the slots `write` int64 [B, n] (set before each
    forward: one slot per new token and row). `move(source, destination)` copies slots within each
    row; `leased` marks a cache a `StaticKV` is using (`lease_cache`)."""

    def __init__(self, layers: int, batch: int, capacity: int):
        super().__init__(layers=[_SlotLayer(self) for _ in range(layers)])
        self.batch, self.capacity, self.leased = batch, capacity, False
        self.write = torch.zeros(batch, 0, dtype=torch.long)

    @torch.no_grad()
    def move(self, source: torch.Tensor, destination: torch.Tensor) -> None:
        """Per row, copy the keys and values at slots source [B, k] to destination [B, k] (all
        sources are read before any destination is written)."""
        for layer in self.layers:
            if not layer.is_initialized:
                continue
            for name in ("keys", "values"):
                buffer = getattr(layer, name)  # [B, H, S, D]
                B, H, _, D = buffer.shape
                taken = buffer.gather(2, source[:, None, :, None].expand(B, H, source.shape[1], D))
                buffer.scatter_(2, destination[:, None, :, None].expand(B, H, destination.shape[1], D), taken)

    @torch.no_grad()
    def copy_rows(self, other: "SlotCache", rows: torch.Tensor) -> None:
        """This cache's rows 0..b-1 <- `other`'s rows `rows` [b], the first min(capacities) slots."""
        S = min(self.capacity, other.capacity)
        for mine, theirs in zip(self.layers, other.layers):
            if theirs.is_initialized:
                if not mine.is_initialized:
                    mine.lazy_initialization(theirs.keys[:self.batch, :, :0], theirs.values[:self.batch, :, :0])
                mine.keys[:, :, :S].copy_(theirs.keys[:, :, :S].index_select(0, rows))
                mine.values[:, :, :S].copy_(theirs.values[:, :, :S].index_select(0, rows))


def _layers(lm: CausalLM) -> int:
    config = lm.model.config.get_text_config() if hasattr(lm.model.config, "get_text_config") else lm.model.config
    types = set(getattr(config, "layer_types", None) or ["full_attention"])
    if types != {"full_attention"}:
        raise ValueError(f"model: layer types {sorted(types)}; the static storage supports full attention only")
    return int(config.num_hidden_layers)


def lease_cache(lm: CausalLM, batch: int, capacity: int) -> SlotCache:
    """A free `SlotCache` of `lm` for (batch, capacity), reused across calls: one kept in
    `lm.cache_pool` that no live storage holds, else a new one added there. The caller sets
    `leased = False` when done (`StaticKV.close`)."""
    pool = lm.cache_pool.setdefault((batch, capacity), [])
    cache = next((c for c in pool if not c.leased), None)
    if cache is None:
        cache = SlotCache(_layers(lm), batch, capacity)
        pool.append(cache)
    cache.leased = True
    return cache


def round_capacity(slots: int) -> int:
    """`slots` + 1 (the padding slot) rounded up to a multiple of `CAPACITY_STEP`."""
    return -(-(slots + 1) // CAPACITY_STEP) * CAPACITY_STEP


class StaticKV(KVState):
    """The static storage (module docstring), B rows of one model.

    Args:
        model: `CausalLM` (full-attention layers). batch: B. committed: the most slots a row's
            committed prefix will hold (the engine's prompt + new tokens + room); the capacity is
            that plus the largest uncommitted forest seen, rounded (`round_capacity`), and grows
            (a new buffer) only when an append or `reserve` needs more.

    Attributes (besides `KVState`'s): cache: the leased `SlotCache`. slot: int64 [B, m], the slot
        of each uncommitted node (S - 1 for padding). filled: int64 [B], real uncommitted nodes.
    """

    checks = False
    static = True  # the engine feeds whole trees (padding included) and commits by index
    memos = ("chains",)  # made from shapes alone: a captured step may fill it (`speedups.graphs`)

    def __init__(self, model: CausalLM, batch: int, committed: int = 0):
        super().__init__(model, batch)
        device = model.device
        self.committed_max, self.forest_max = committed, 0
        self.cache = lease_cache(model, batch, round_capacity(committed))
        self.slot = torch.zeros(batch, 0, dtype=torch.long, device=device)  # [B, m]
        self.filled = torch.zeros(batch, dtype=torch.long, device=device)  # [B]
        self.written_padding = torch.zeros((), dtype=torch.long, device=device)  # padding nodes written
        self.peak = torch.zeros((), dtype=torch.long, device=device)  # most slots in use, summed over rows
        self.columns = torch.arange(self.cache.capacity, device=device)  # [S]
        self.chains = {}  # n -> (causal pattern bool [n, n], depth [n]): a chain's mask, once per length

    @property
    def capacity(self) -> int:
        return self.cache.capacity

    def reserve(self, committed: int) -> None:
        """Make room for committed prefixes of up to `committed` slots per row."""
        self.committed_max = max(self.committed_max, committed)
        self._fit(self.uncommitted)

    def _fit(self, forest: int) -> None:
        """Grow the buffer (new capacity, contents copied) if `forest` uncommitted nodes may not fit."""
        self.forest_max = max(self.forest_max, forest)
        need = round_capacity(self.committed_max + self.forest_max)
        if need <= self.capacity:
            return
        old = self.cache
        self.cache = lease_cache(self.model, old.batch, need)
        rows = torch.arange(old.batch, device=self.pos.device)
        self.cache.copy_rows(old, rows)  # slots past the old capacity stay zero: never visible yet
        self.slot = torch.where(self.slot == old.capacity - 1, need - 1, self.slot)
        old.leased = False
        self.columns = torch.arange(need, device=self.pos.device)

    def close(self) -> None:
        """Give the buffer back to the model's pool (the storage is unusable afterwards)."""
        self.cache.leased = False

    @property
    def padded_slots(self) -> int:
        """Padding nodes written (to the padding slot; a rejected node's slot is reused, never kept)."""
        return int(self.written_padding)

    @padded_slots.setter
    def padded_slots(self, value) -> None:  # KVState's constructor sets 0
        pass

    @property
    def peak_slots(self) -> int:
        return int(self.peak)

    @peak_slots.setter
    def peak_slots(self, value) -> None:
        pass

    def _grow_chain(self, real: torch.Tensor):
        """`_grow` for n nodes forming a chain on an empty forest: the causal pattern of length n,
        made once per length (`chains`), and depth = 0 .. n - 1."""
        B, n = real.shape
        if n not in self.chains:
            self.chains[n] = (torch.ones(n, n, dtype=torch.bool, device=real.device).tril(),
                              torch.arange(n, device=real.device))
        causal, depth = self.chains[n]
        self.ancestry, self.real = causal.expand(B, n, n), real
        return self.ancestry, depth.expand(B, n)

    def append(self, tokens: torch.Tensor, parents: torch.Tensor, real: torch.Tensor,
               logits_to_keep: int = 0, chain: bool = False) -> torch.Tensor:
        """As `PaddedKV.append`: ONE forward of n nodes per row (tokens / parents / real [B, n]) ->
        logits float32 [B, n, V] ([B, k, V] with logits_to_keep = k). `chain=True` promises that
        the nodes are a chain (parents -1, 0, 1, ...) on an empty forest: its mask pattern is made
        once per length, not from the parents."""
        B, n = tokens.shape
        self._fit(self.uncommitted + n)
        trash = self.capacity - 1
        if chain and not self.uncommitted:
            ancestry, depth = self._grow_chain(real)  # [B, n, n], [B, n]
        else:
            ancestry, depth = self._grow(parents, real)  # [B, n, m + n], [B, n]
        write = torch.where(real, (self.pos + self.filled).unsqueeze(1) + real.long().cumsum(1) - 1, trash)  # [B, n]
        self.filled = self.filled + real.sum(1)
        self.slot = torch.cat([self.slot, write], 1)  # [B, m + n]
        committed = self.columns < self.pos.unsqueeze(1)  # [B, S]
        # what a new node may see, in node order (`model.visible_slots`, looked up per call: a
        # planted-bug test replaces it), then mapped onto the slots the nodes sit in
        allowed = model_module.visible_slots(committed, ancestry & self.real.unsqueeze(1))  # [B, n, S + m + n]
        seen = allowed[..., :self.capacity].clone()  # [B, n, S]
        seen.scatter_(2, self.slot.unsqueeze(1).expand(B, n, self.slot.shape[1]), allowed[..., self.capacity:])
        seen[..., trash] = False
        mask = additive_mask(seen, self.model.dtype).unsqueeze(1)  # [B, 1, n, S]
        self.cache.write = write
        logits, _ = self.model.forward(tokens, self.cache, position_ids=self.pos.unsqueeze(1) + depth,
                                       attention_mask={"full_attention": mask}, logits_to_keep=logits_to_keep)
        self.written_padding += (~real).sum()
        self.peak = torch.maximum(self.peak, (self.pos + self.filled).sum())
        return logits

    def commit(self, keep: torch.Tensor, prefix: bool = False) -> None:
        """Keep, per row, the uncommitted nodes marked in keep [B, m] (a root path) at slots pos[b],
        pos[b] + 1, ...; `prefix=True` promises they are the row's first real uncommitted nodes
        (a chain), which already sit there: nothing moves."""
        keep = self._check_keep(keep)
        kept = keep.sum(1)  # [B]
        if not prefix and keep.shape[1]:
            m = keep.shape[1]
            order = torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices  # [B, m]: kept first
            moving = torch.arange(m, device=keep.device) < kept.unsqueeze(1)  # [B, m]
            trash = self.capacity - 1
            source = torch.where(moving, self.slot.gather(1, order), trash)
            destination = torch.where(moving, self.pos.unsqueeze(1) + torch.arange(m, device=keep.device), trash)
            self.cache.move(source, destination)
        self._reset(keep)
        self.slot = self.slot[:, :0]
        self.filled = torch.zeros_like(self.filled)

    def select(self, rows: torch.Tensor) -> None:
        """Keep only batch rows `rows` (after a commit): they move to a (pooled) buffer of that batch."""
        old = self.cache
        self.cache = lease_cache(self.model, rows.numel(), old.capacity)
        self.cache.copy_rows(old, rows)
        old.leased = False
        self._select_rows(rows)
        self.slot, self.filled = self.slot[rows], self.filled[rows]

    def slots(self) -> torch.Tensor:
        """Committed slots summed over rows (int64 scalar, on the device)."""
        return self.pos.sum()
