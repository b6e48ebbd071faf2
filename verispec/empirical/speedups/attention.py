"""Per-row (varlen) attention for a packed batch: EMS-SD's unpadded layout as compute, not only layout.

EMS-SD (Ni et al. 2024, arXiv 2405.07542, Sec. 3) holds a batch of rows of different lengths in
ONE sequence (KV batch dimension 1, `owner[slot]` = the slot's row) and feeds every row's new
tokens packed into one [1, Q] input. A dense block-diagonal mask would make every row's queries
score every row's keys (about B times the work); here each row attends to its own keys only, all
rows in ONE SDPA call per layer (no Python loop over rows in the forward):

    q = query[:, :, query_index]   # [R, H, q_max, D]     row b's queries, padded to the longest
    k = key[:, :, key_index]       # [R, H_kv, k_max, D]  row b's cached slots, then its new tokens
    out[real queries] = SDPA(q, k, v, mask)   # mask [R, 1, q_max, k_max]

with mask[b] row b's committed cache plus, among new tokens, ancestors and itself (a chain, a tree
by `parents`, or with `forest` uncommitted nodes of earlier forwards seen by their descendants
only); padded keys are masked out. The cache itself stays unpadded (EMS-SD's point); only the
transient gathered keys of one layer are padded, so the scores computed are R q_max k_max (sum_b
q_b k_b when rows have equal lengths), not the dense mask's Q (K + Q).

    use_packed_attention(lm)                              # once; forwards without PackedRows unchanged
    rows = packed_rows(owner, new_rows, parents=None)     # once per packed forward
    logits = packed_forward(lm, tokens, cache, positions, rows)   # [1, Q, V]

`use_packed_attention` registers an attention function with transformers' `AttentionInterface`
that runs the varlen path when the mask is a `PackedRows` and the model's own implementation
otherwise. Why not flex_attention (dense scores uncompiled, a compile per shape) or FlashAttention
varlen (GPU only, no tree mask): docs/ems_sd.md. `new_counting_cache` gives a cache that counts
the slots it writes, so padded KV slots are measured, not set by construction.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from dataclasses import dataclass

import torch

from ..model import CausalLM, cache_length
from .counting_cache import CountingCache

__all__ = ["PACKED_IMPLEMENTATIONS", "PackedRows", "packed_rows", "varlen_attention", "use_packed_attention",
           "packed_attention_mask", "packed_forward", "new_counting_cache"]

#: base attention implementation -> the name this module registers for it.
PACKED_IMPLEMENTATIONS = {"sdpa": "verispec_packed_sdpa", "eager": "verispec_packed_eager"}


# ----------------------------------------------------------------------------------------------
# Which keys each row sees
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PackedRows:
    """The per-row key sets of one packed forward (built by `packed_rows`; shared by all layers).

    Attributes:
        cache_length: K, the cache length before the forward (the key axis is K + Q long).
        query_length: Q, the packed new tokens.
        segments: one (row, query_start, query_end, key_index, mask) per row with new tokens:
            queries [query_start, query_end) of the packed axis; key_index int64 [k_b], positions
            on the key axis (the row's cached slots, then its new tokens at K + j); mask bool
            [q_b, k_b] (True = may attend) or None when every key is visible.
        owner: int64 [K], the row of each cached slot (-1: a slot no row sees).
    """

    cache_length: int
    query_length: int
    segments: tuple
    owner: torch.Tensor

    @property
    def scores(self) -> int:
        """sum_b q_b k_b: the attention scores the rows need per head and layer."""
        return sum((end - start) * index.numel() for _, start, end, index, _ in self.segments)

    @property
    def padded_scores(self) -> int:
        """R q_max k_max: the scores the one batched SDPA call computes per head and layer (equal
        to `scores` when every row has the same q_b and k_b)."""
        query_index, _, key_index, _ = self.batch
        return query_index.numel() * key_index.shape[1]

    @functools.cached_property
    def batch(self):
        """The rows as one padded batch, built once per forward and shared by every layer:
        (query_index int64 [R, q_max]: packed query positions; query_real bool [R, q_max];
        key_index int64 [R, k_max]: positions on the key axis; mask bool [R, 1, q_max, k_max],
        True = may attend). Padded keys are masked; a padded query row sees every key of its row
        (its output is dropped, and a fully masked row would give NaN)."""
        R = len(self.segments)
        q_max = max(end - start for _, start, end, _, _ in self.segments)
        k_max = max(index.numel() for _, _, _, index, _ in self.segments)
        device = self.owner.device
        query_index = torch.zeros(R, q_max, dtype=torch.long, device=device)  # [R, q_max]
        query_real = torch.zeros(R, q_max, dtype=torch.bool, device=device)
        key_index = torch.zeros(R, k_max, dtype=torch.long, device=device)  # [R, k_max]
        mask = torch.zeros(R, 1, q_max, k_max, dtype=torch.bool, device=device)
        for r, (_, start, end, index, row_mask) in enumerate(self.segments):
            q_b, k_b = end - start, index.numel()
            query_index[r, :q_b] = torch.arange(start, end, device=device)
            query_real[r, :q_b] = True
            key_index[r, :k_b] = index
            mask[r, 0, :, :k_b] = True if row_mask is None else torch.cat(
                [row_mask, row_mask.new_ones(q_max - q_b, k_b)])
        return query_index, query_real, key_index, mask


def _check_index_vector(value, name: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or value.dtype not in (torch.int64, torch.int32) or value.dim() != 1:
        got = (value.dtype, tuple(value.shape)) if isinstance(value, torch.Tensor) else type(value).__name__
        raise TypeError(f"{name}: expected a 1-D int64 tensor, got {got}")
    return value.long()


def _new_visibility(packed: torch.Tensor, start: int, row: int) -> tuple[torch.Tensor, list[int]]:
    """packed [q] (each new token's parent: a packed index, -1 = the committed prefix, -2 - c =
    cached slot c) -> (bool [q, q]: entry (j, i) True when new token i is j or one of j's
    ancestors; the cached slot each token's ancestry enters the cache at, -1 for none)."""
    q = packed.numel()
    allowed = torch.eye(q, dtype=torch.bool, device=packed.device)  # [q, q]
    anchor = [-1] * q
    for j, parent in enumerate(packed.tolist()):
        if parent <= -2:
            anchor[j] = -2 - parent
        elif parent >= 0:
            local = parent - start
            if not 0 <= local < j:
                raise ValueError(f"parents: packed token {start + j} (row {row}) has a parent that is not an "
                                 "earlier new token of the same row (nor -1, the row's committed prefix)")
            allowed[j] |= allowed[local]
            anchor[j] = anchor[local]
    return allowed, anchor


def _past_visibility(past: torch.Tensor, forest: torch.Tensor | None, anchor: list[int], row: int):
    """Which of the row's cached slots past [s] each new token sees -> bool [q, s], or None when it
    sees them all: the committed slots (forest == -1) and the chain of uncommitted slots from its
    anchor up through `forest`."""
    if forest is None:
        if any(a >= 0 for a in anchor):
            raise ValueError("parents: a cached parent (-2 - slot) needs `forest`")
        return None
    column = {slot: i for i, slot in enumerate(past.tolist())}
    committed = forest[past] == -1  # [s]
    if bool(committed.all()) and all(a < 0 for a in anchor):
        return None
    visible = committed.unsqueeze(0).repeat(len(anchor), 1)  # [q, s]
    for j, slot in enumerate(anchor):
        while slot >= 0:
            if slot not in column or int(forest[slot]) == -1:
                raise ValueError(f"forest: row {row}'s uncommitted chain reaches slot {slot}, which is not an "
                                 "uncommitted slot of the same row")
            visible[j, column[slot]] = True
            parent = int(forest[slot])
            if parent >= slot:
                raise ValueError(f"forest: slot {slot}'s parent {parent} must be an earlier slot")
            slot = parent
    return visible


def _check_forest(forest, K: int):
    if forest is None:
        return None
    forest = _check_index_vector(forest, "forest")
    if forest.numel() != K or bool((forest < -2).any()):
        raise ValueError(f"forest: expected [{K}] values in -2, -1 or a cached slot index (the cache length)")
    return forest


def packed_rows(owner: torch.Tensor, rows: torch.Tensor, parents: torch.Tensor | None = None,
                forest: torch.Tensor | None = None) -> PackedRows:
    """Describe one packed forward: which keys each packed query may attend to.

    Args:
        owner: int64 [K]: the row of every cached slot, in cache order (-1: padding no row sees).
        rows: int64 [Q]: the row of every packed new token, non-decreasing (each row's new tokens
            contiguous, in row order); Q >= 1.
        parents: optional int64 [Q]: each new token's parent: the packed index of an earlier new
            token of the same row; -1 when it hangs off its row's committed prefix; -2 - c when it
            hangs below cached slot c, an uncommitted node of an earlier forward (needs `forest`).
            Default: a chain per row (each token's parent is the row's previous new token).
        forest: optional int64 [K], for caches holding uncommitted nodes of earlier forwards (a
            draft tree grown layer by layer): -1 for a committed slot (every later token of its row
            sees it); for an uncommitted slot, its parent: -2 = the committed prefix, c = cached
            slot c (c < the slot). Default: every cached slot is committed.

    Returns:
        `PackedRows`. A query sees its own row's committed slots, its ancestors (new tokens and,
        with `forest`, uncommitted cached slots), and itself; never another row's slot, never a
        sibling.

    Raises:
        TypeError: a non-integer or non-1-D tensor. ValueError: empty `rows`, `rows` not
        non-decreasing or negative, `parents` of the wrong shape or pointing outside the row, a
        malformed `forest`.
    """
    owner, rows = _check_index_vector(owner, "owner"), _check_index_vector(rows, "rows")
    if rows.numel() == 0:
        raise ValueError("rows: expected at least one packed new token")
    if bool((rows < 0).any()) or bool((rows[1:] < rows[:-1]).any()):
        raise ValueError("rows: expected non-negative row ids, non-decreasing (each row's new tokens contiguous)")
    K, Q, device = owner.numel(), rows.numel(), rows.device
    if parents is None:
        parents = torch.arange(Q, device=device) - 1
        parents[torch.cat([torch.ones(1, dtype=torch.bool, device=device), rows[1:] != rows[:-1]])] = -1
    parents = _check_index_vector(parents, "parents")
    if parents.shape != rows.shape:
        raise ValueError(f"parents: expected shape {tuple(rows.shape)} (as rows), got {tuple(parents.shape)}")
    forest = _check_forest(forest, K)
    B = int(max(rows.max(), owner.max() if K else -1)) + 1
    counts = torch.bincount(rows, minlength=B).tolist()  # [B] new tokens per row
    past_order = torch.sort(owner.clamp(min=-1), stable=True).indices  # slots grouped by row, cache order kept
    past_counts = torch.bincount(owner.clamp(min=-1) + 1, minlength=B + 1).tolist()  # [B + 1]; 0 = no row
    past_start = [0, *itertools.accumulate(past_counts)]  # past_start[b + 1]: where row b's slots begin
    segments, start = [], 0
    for b in (b for b in range(B) if counts[b]):
        past = past_order[past_start[b + 1]:past_start[b + 2]]  # [s_b]
        segments.append(_segment(b, start, counts[b], past, parents[start:start + counts[b]], forest, K))
        start += counts[b]
    return PackedRows(cache_length=K, query_length=Q, segments=tuple(segments), owner=owner)


def _segment(b: int, start: int, q_b: int, past: torch.Tensor, parents: torch.Tensor, forest, K: int):
    """(row, query_start, query_end, key_index [k_b], mask [q_b, k_b] or None) of one row."""
    device = past.device
    index = torch.cat([past, K + torch.arange(start, start + q_b, device=device)])  # [k_b]
    new, anchor = _new_visibility(parents, start, b)  # [q_b, q_b]
    old = _past_visibility(past, forest, anchor, b)  # [q_b, s_b] or None
    if old is None and bool(new.all()):
        return b, start, start + q_b, index, None
    if old is None:
        old = torch.ones(q_b, past.numel(), dtype=torch.bool, device=device)
    return b, start, start + q_b, index, torch.cat([old, new], dim=1)


# ----------------------------------------------------------------------------------------------
# The attention itself
# ----------------------------------------------------------------------------------------------

def varlen_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, rows: PackedRows,
                     scaling: float | None = None, dropout: float = 0.0) -> torch.Tensor:
    """Each row's queries attend only to that row's keys (scaled dot-product attention per row).

    Args:
        query: [1, H, Q, D], the packed new tokens' queries (rotary embedding applied).
        key, value: [1, H_kv, K + Q, D] (H divisible by H_kv: grouped-query attention), the cache
            after this forward's write: K cached slots, then the Q new tokens in packed order.
        rows: `PackedRows` of this forward. scaling: the softmax scale (default D ** -0.5).
        dropout: attention dropout probability (0 in inference).

    Returns:
        [1, Q, H, D] (the layout transformers' attention functions return).

    Raises:
        ValueError: shapes that do not match `rows` (a cache of another length, a batch > 1).
    """
    if query.dim() != 4 or query.shape[0] != 1 or query.shape[2] != rows.query_length:
        raise ValueError(f"query: expected [1, H, {rows.query_length}, D] (the packed tokens of `rows`), "
                         f"got {tuple(query.shape)}")
    if key.shape[0] != 1 or key.shape[2] != rows.cache_length + rows.query_length:
        raise ValueError(f"key: expected [1, H_kv, {rows.cache_length + rows.query_length}, D] (cache length "
                         f"{rows.cache_length} + {rows.query_length} new), got {tuple(key.shape)}")
    query_index, query_real, key_index, mask = rows.batch  # see PackedRows.batch
    (R, q_max), k_max, H, D = query_index.shape, key_index.shape[1], query.shape[1], query.shape[3]
    q = query[0].index_select(1, query_index.flatten()).view(H, R, q_max, D).transpose(0, 1)  # [R, H, q_max, D]
    H_kv = key.shape[1]
    k = key[0].index_select(1, key_index.flatten()).view(H_kv, R, k_max, D).transpose(0, 1)  # [R, H_kv, k_max, D]
    v = value[0].index_select(1, key_index.flatten()).view(H_kv, R, k_max, -1).transpose(0, 1)
    batched = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=dropout, scale=scaling, enable_gqa=H != H_kv)  # [R, H, q_max, D_v]
    out = query.new_zeros(query.shape[2], H, v.shape[-1])  # [Q, H, D_v]
    real = query_real.flatten()  # [R * q_max]
    out[query_index.flatten()[real]] = batched.transpose(1, 2).reshape(R * q_max, H, -1)[real]
    return out.unsqueeze(0)  # [1, Q, H, D]


def _base_function(name: str, module):
    if name == "sdpa":
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward
    eager = getattr(inspect.getmodule(type(module)), "eager_attention_forward", None)
    if eager is None:
        raise ValueError(f"model: {type(module).__name__}'s module defines no eager_attention_forward")
    return eager


def _make_attention_function(base: str):
    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        if isinstance(attention_mask, PackedRows):
            if kwargs.get("sliding_window") is not None:
                raise ValueError("model: sliding-window attention layers are not supported by the packed layout")
            return varlen_attention(query, key, value, attention_mask, scaling, dropout), None
        return _base_function(base, module)(module, query, key, value, attention_mask, scaling=scaling,
                                            dropout=dropout, **kwargs)

    attention.__name__ = f"{PACKED_IMPLEMENTATIONS[base]}_forward"
    return attention


def _register(base: str) -> str:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    name = PACKED_IMPLEMENTATIONS[base]
    if name not in AttentionInterface._global_mapping:
        AttentionInterface.register(name, _make_attention_function(base))
        AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[base])
    return name


def use_packed_attention(lm) -> str:
    """Switch a `CausalLM` to the packed-aware attention function (idempotent); returns its name.

    Forwards whose attention mask is not a `PackedRows` run the model's previous implementation
    ("sdpa" or "eager") unchanged, with the same mask preparation.

    Raises:
        TypeError: `lm` is not a `CausalLM`.
        ValueError: an implementation other than sdpa / eager (e.g. FlashAttention).
    """
    if not isinstance(lm, CausalLM):
        raise TypeError(f"lm: expected a CausalLM, got {type(lm).__name__}")
    current = lm.model.config._attn_implementation
    if current in PACKED_IMPLEMENTATIONS.values():
        return current
    if current not in PACKED_IMPLEMENTATIONS:
        raise ValueError(f"lm: attention implementation {current!r}; the packed layout needs 'sdpa' or 'eager'")
    name = _register(current)
    lm.model.set_attn_implementation(name)
    return name


def packed_attention_mask(lm, rows: PackedRows) -> dict:
    """The `attention_mask` argument of a packed forward: {layer type: rows} (transformers passes a
    prepared dict through to every layer unchanged).

    Raises:
        TypeError: `rows` is not a `PackedRows`. ValueError: `lm` was not switched with
        `use_packed_attention`, or it has sliding-window layers.
    """
    if not isinstance(rows, PackedRows):
        raise TypeError(f"rows: expected a PackedRows (see packed_rows), got {type(rows).__name__}")
    config = lm.model.config
    if config._attn_implementation not in PACKED_IMPLEMENTATIONS.values():
        raise ValueError("lm: call use_packed_attention(lm) before a packed forward")
    types = set(getattr(config, "layer_types", None) or ["full_attention"])
    if types != {"full_attention"}:
        raise ValueError(f"lm: layer types {sorted(types)}; the packed layout supports full attention only")
    return {"full_attention": rows}


def packed_forward(lm, tokens: torch.Tensor, cache, position_ids: torch.Tensor, rows: PackedRows):
    """One packed forward: logits float32 [1, Q, V]; the cache grows by Q slots (packed order).

    Args:
        lm: a `CausalLM` after `use_packed_attention`. tokens: int64 [1, Q], the packed new tokens
            (row by row, as `rows`). cache: the packed DynamicCache holding `rows.cache_length`
            slots. position_ids: int64 [1, Q], each token's position in its own row (the row's
            length + depth). rows: `PackedRows`.

    Raises:
        ValueError: tokens / position_ids not [1, Q], a cache of another length than `rows` says,
            `lm` not switched.
    """
    Q = rows.query_length
    for name, value in (("tokens", tokens), ("position_ids", position_ids)):
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != (1, Q):
            raise ValueError(f"{name}: expected shape [1, {Q}] (the packed tokens of rows)")
    if cache_length(cache) != rows.cache_length:
        raise ValueError(f"cache: holds {cache_length(cache)} slots, rows were built for {rows.cache_length}")
    logits, _ = lm.forward(tokens, cache, position_ids=position_ids, attention_mask=packed_attention_mask(lm, rows))
    return logits


# ----------------------------------------------------------------------------------------------
# Counting the KV-cache slots actually written
# ----------------------------------------------------------------------------------------------

def new_counting_cache(lm):
    """An empty `CountingCache` (`verispec.empirical.speedups.counting_cache`) for a `CausalLM`
    (use it where `lm.new_cache()` would be).

    With it a storage measures ``padded_kv_slots = cache.slots_written - real tokens fed`` (pad
    inputs actually written) and ``cache.slots_held() - sum of the rows' true lengths`` (masked
    slots still held after a commit).
    """
    return CountingCache(config=lm.model.config)
