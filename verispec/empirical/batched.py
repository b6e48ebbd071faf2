"""Batched speculative decoding where every row accepts its own number of tokens per step.

`batched_speculative(target, draft, prompts, ...)` decodes B prompts of different lengths
together with a chain rule (``token``: Leviathan et al. 2023, arXiv 2211.17192; ``block``: Sun et
al. 2024, arXiv 2403.10444), drafted by the draft model (q = its softmax at the target temperature)
or by prompt lookup (q = one-hot on the n-gram continuation found in the row's own context,
`verispec.empirical.lookup`). Every row is an independent run and yields exactly max_new_tokens
tokens (no EOS stop). `batched_target_only(...)` is the plain batched baseline at the same B.

Two ways to hold a batch whose rows have different lengths (EMS-SD, Ni et al. 2024,
arXiv 2405.07542):

- ``"vanilla"`` (`_PaddedKV`): a [B, S] cache shared by all rows. Inputs are padded to the longest
  row of the step (longest draft, or 2 pending draft tokens), and after verification the cache is
  cropped to the *longest* kept length; every other row's tail (pad inputs, rejected drafts) stays
  in the cache, masked out forever. Prompts are left-padded.
- ``"ems"`` (`_PackedKV`), EMS-SD's "unpad KV cache" + "unpad input tokens": batch dimension 1.
  The cache is one sequence holding every row's tokens; `owner[slot]` says which row a slot
  belongs to. A step packs all rows' new tokens into ONE sequence of Q = sum of counts tokens;
  a 4D additive float mask [1, 1, Q, K + Q] lets a token see its own row's cached slots and its
  own row's earlier new tokens only, and position ids are that row's length + offset (RoPE is
  applied before caching, so slot order within the sequence is irrelevant). After verification
  `gather_cache` keeps exactly the accepted slots: the cache then holds the rows' true tokens and
  nothing else (length = sum of the rows' lengths), and no pad token is ever fed.

Why this realisation: HF caches (`DynamicCache`) are rectangular [batch, heads, S, d]; per-row
lengths without padding need either a varlen attention kernel (FlashAttention-2 with cu_seqlens:
GPU only, 2D masks only, and refused by `CausalLM` for trees) or batch dimension 1 with a
block-diagonal mask, which every attention backend ("sdpa", "eager") accepts on CPU and GPU.

Costs. Linear layers see exactly sum(counts) token rows (vanilla: B * the longest count, pads
included); on CPU the linear layers dominate a forward (measured in development: 1.5B bf16, 179 ms for 1
token, 276 ms for 16), so packing saves exactly the padded rows and their KV writes. The price is
attention over the whole packed cache: Q x K scores with K = sum of lengths, about B times the
useful attention FLOPs (the mask zeroes the cross-row part), plus an O(Q K) mask per forward.
Measured on this 2-core CPU (random Qwen2, hidden 896, 4 layers, bf16, 200 cached tokens and 5 new
per row, no padding to save): the packed forward costs within ~4% of the padded one at B = 16 and
building its mask < 1 ms. So for B <= ~32 and contexts of a few hundred tokens (the paper's range)
it is small next to the linear layers; for very large B (10^4 rows, as in law tests) it is
quadratic: use vanilla there. The compaction gather copies the cache once per step, but
`DynamicCache.update` already concatenates (copies) every layer's K/V on every forward, so this is
one copy more per step of L + 1 forwards (a tail-only in-place compaction in `model.py` would
remove it).

Randomness: as `verispec.empirical.decode.speculative` (one uniform per drafted token, then the
rule's uniforms, `peek`/`advance`); both implementations read uniforms identically, so with one
seed they emit the same tokens (up to float round-off in the logits).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from . import rules
from .decode import DecodeResult, DecodeStats, _check_pair, _check_positive, _check_temperature, probabilities
from .lookup import prompt_lookup_batch
from .model import CausalLM, cache_length, crop_cache, gather_cache, select_cache_rows
from .uniforms import as_uniform_source, categorical

__all__ = ["IMPLEMENTATIONS", "DRAFTERS", "BatchedDecodeStats", "batched_target_only", "batched_speculative"]

IMPLEMENTATIONS = ("vanilla", "ems")
DRAFTERS = ("model", "prompt_lookup")


@dataclass
class BatchedDecodeStats(DecodeStats):
    """`DecodeStats` plus KV-cache accounting of a batched run.

    Attributes (besides `DecodeStats`'):
        implementation: "vanilla", "ems" ("padded" for `batched_target_only`).
        drafter: "model", "prompt_lookup" ("" for `batched_target_only`).
        batch_size: B, the number of prompts.
        padded_kv_slots: sequence slots (per row, per model; count once for all layers) written
            to a KV cache that hold no token of the row (pad inputs) or that stay in the cache
            masked out (rejected drafts kept because another row accepted more); target + draft.
        peak_kv_slots, peak_draft_kv_slots: the most slots (summed over rows) a target / draft
            cache held right after a forward.
        kv_trace: per iteration, (slots in the target cache after the commit, sum over the
            active rows of their true cached lengths); equal when nothing padded is kept.
        prefill_time_s: seconds of the prompt prefills (target + draft), part of `wall_time_s`;
            wall_time_s - prefill_time_s is the decode phase.
    """

    implementation: str = ""
    drafter: str = ""
    batch_size: int = 0
    padded_kv_slots: int = 0
    peak_kv_slots: int = 0
    peak_draft_kv_slots: int = 0
    kv_trace: list = field(default_factory=list)
    prefill_time_s: float = 0.0


# ----------------------------------------------------------------------------------------------
# Masks and positions (module-level so tests can plant broken variants)
# ----------------------------------------------------------------------------------------------

def _additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """0 where allowed, finfo(dtype).min elsewhere (a bool mask under eager is silently wrong)."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(
        ~allowed, torch.finfo(dtype).min)


def _padded_mask(valid: torch.Tensor, real: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """valid [B, S] cached slots, real [B, n] new tokens -> [B, 1, n, S + n]: a new token sees the
    valid cache, the real new tokens up to itself, and itself (a pad sees itself: no empty row)."""
    B, n = real.shape
    idx = torch.arange(n, device=real.device)
    causal = idx.view(1, n) <= idx.view(n, 1)  # [n (query), n (key)]
    new = (causal & real.unsqueeze(1)) | torch.eye(n, dtype=torch.bool, device=real.device)  # [B, n, n]
    past = valid.unsqueeze(1).expand(B, n, valid.shape[1])  # [B, n, S]
    return _additive(torch.cat([past, new], dim=2), dtype).unsqueeze(1)


def _packed_mask(owner: torch.Tensor, rows: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """owner [K] (row of each cached slot), rows [Q] (row of each packed new token, each row's
    tokens contiguous and in order) -> [1, 1, Q, K + Q]: own row's cache and own causal prefix."""
    Q = rows.shape[0]
    idx = torch.arange(Q, device=rows.device)
    past = rows.view(Q, 1) == owner.view(1, -1)  # [Q, K]
    new = (rows.view(Q, 1) == rows.view(1, Q)) & (idx.view(1, Q) <= idx.view(Q, 1))  # [Q, Q]
    return _additive(torch.cat([past, new], dim=1), dtype)[None, None]


def _packed_positions(pos: torch.Tensor, rows: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """Position id of each packed token: its row's length + its offset among the row's new tokens."""
    return pos[rows] + offset


# ----------------------------------------------------------------------------------------------
# The two KV layouts. Shared protocol:
#   append(tokens [B, n], real [B, n]) -> logits [B, n, V]  (row b feeds tokens[b, real[b]])
#   commit(keep [B]): of the real tokens appended since the last commit, row b keeps its first keep[b]
#   select(rows [b]): keep only these batch rows (after a commit)
# ----------------------------------------------------------------------------------------------

class _PaddedKV:
    """Vanilla: a [B, S] cache with a validity mask; padded slots are written and masked forever."""

    def __init__(self, model: CausalLM, batch: int):
        self.model, self.cache = model, model.new_cache()
        device = model.device
        self.valid = torch.zeros(batch, 0, dtype=torch.bool, device=device)  # [B, S]
        self.pos = torch.zeros(batch, dtype=torch.long, device=device)  # [B], each row's true length
        self.base = 0  # cache length at the last commit
        self.padded = self.peak = 0

    def prefill(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor | None:
        """Row b's first lengths[b] tokens of tokens [B, n], left-padded (HF's batching); returns
        logits [B, n', V] whose last column is every row's last token (None if all are empty)."""
        n = int(lengths.max())
        if n == 0:
            return None
        shift = torch.arange(n, device=tokens.device) - (n - lengths).unsqueeze(1)  # [B, n]
        real = shift >= 0
        left = torch.where(real, tokens.gather(1, shift.clamp(min=0)), 0)  # [B, n]
        logits = self.append(left, real)
        self.commit(lengths)
        return logits

    def append(self, tokens: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        mask = _padded_mask(self.valid, real, self.model.dtype)  # [B, 1, n, S + n]
        position = self.pos.unsqueeze(1) + (real.long().cumsum(1) - 1).clamp(min=0)  # [B, n]
        logits, self.cache = self.model.forward(tokens, self.cache, position_ids=position, attention_mask=mask)
        self.valid = torch.cat([self.valid, real], dim=1)
        self.pos = self.pos + real.sum(1)
        self.padded += int((~real).sum())
        self.peak = max(self.peak, self.valid.numel())
        return logits

    def commit(self, keep: torch.Tensor) -> None:
        new = self.valid[:, self.base:]  # [B, m], real slots since the last commit
        kept = new & (new.long().cumsum(1) <= keep.unsqueeze(1))  # [B, m]
        cols = kept.any(0).nonzero()
        end = int(cols[-1, 0]) + 1 if cols.numel() else 0  # the longest kept length
        crop_cache(self.cache, self.base + end)
        self.padded += int((new[:, :end] & ~kept[:, :end]).sum())  # rejected, kept masked
        self.valid = torch.cat([self.valid[:, :self.base], kept[:, :end]], dim=1)
        self.pos = self.pos - (new.sum(1) - kept.sum(1))
        self.base = self.valid.shape[1]

    def select(self, rows: torch.Tensor) -> None:
        select_cache_rows(self.cache, rows)
        self.valid, self.pos = self.valid[rows], self.pos[rows]

    def slots(self) -> int:
        return cache_length(self.cache) * self.valid.shape[0]


class _PackedKV:
    """EMS-SD: batch dimension 1, every row's slots in one sequence, owner[slot] = row."""

    def __init__(self, model: CausalLM, batch: int):
        self.model, self.cache = model, model.new_cache()
        device = model.device
        self.owner = torch.zeros(0, dtype=torch.long, device=device)  # [K]
        self.pos = torch.zeros(batch, dtype=torch.long, device=device)  # [B]
        self.base = 0
        self.padded = self.peak = 0

    def prefill(self, tokens: torch.Tensor, lengths: torch.Tensor) -> None:
        """Row b's first lengths[b] tokens of tokens [B, n], packed into one sequence."""
        self.append(tokens, torch.arange(tokens.shape[1], device=tokens.device) < lengths.unsqueeze(1))
        self.commit(lengths)

    def append(self, tokens: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        B, n = tokens.shape
        logits = torch.zeros(B, n, self.model.vocab_size, device=self.model.device)  # [B, n, V]
        rows, cols = real.nonzero(as_tuple=True)  # row-major: each row's tokens contiguous, in order
        if rows.numel() == 0:
            return logits
        offset = real.long().cumsum(1)[rows, cols] - 1  # [Q]
        position = _packed_positions(self.pos, rows, offset).unsqueeze(0)  # [1, Q]
        mask = _packed_mask(self.owner, rows, self.model.dtype)  # [1, 1, Q, K + Q]
        packed, self.cache = self.model.forward(tokens[rows, cols].unsqueeze(0), self.cache,
                                                position_ids=position, attention_mask=mask)
        logits[rows, cols] = packed[0]
        self.owner = torch.cat([self.owner, rows])
        self.pos = self.pos + real.sum(1)
        self.padded += rows.numel() - int(real.sum())  # fed minus real tokens: 0, nothing padded is fed
        self.peak = max(self.peak, self.owner.numel())
        return logits

    def commit(self, keep: torch.Tensor) -> None:
        new = self.owner[self.base:]  # [m]
        if new.numel() == 0:
            return
        B = self.pos.shape[0]
        rank = torch.nn.functional.one_hot(new, B).cumsum(0).gather(1, new.unsqueeze(1)).squeeze(1)  # [m]
        kept = rank <= keep[new]  # [m]
        positions = torch.cat([torch.arange(self.base, device=new.device), self.base + kept.nonzero().squeeze(1)])
        gather_cache(self.cache, positions)  # drops the rejected slots: nothing masked stays
        self.padded += int(positions.numel() - self.base - kept.sum())  # retained but not kept: 0
        self.pos = self.pos - torch.bincount(new[~kept], minlength=B)
        self.owner = self.owner[positions]
        self.base = self.owner.numel()

    def select(self, rows: torch.Tensor) -> None:
        remap = torch.full_like(self.pos, -1)
        remap[rows] = torch.arange(rows.numel(), device=rows.device)
        positions = (remap[self.owner] >= 0).nonzero().squeeze(1)
        if cache_length(self.cache):
            gather_cache(self.cache, positions)
        self.owner, self.pos = remap[self.owner[positions]], self.pos[rows]
        self.base = self.owner.numel()

    def slots(self) -> int:
        return cache_length(self.cache)


_LAYOUTS = {"vanilla": _PaddedKV, "ems": _PackedKV}


# ----------------------------------------------------------------------------------------------
# Input checks
# ----------------------------------------------------------------------------------------------

def _check_model(model, name: str) -> CausalLM:
    if not isinstance(model, CausalLM):
        raise TypeError(f"{name}: expected a CausalLM, got {type(model).__name__}")
    return model


def _check_choice(value, name: str, choices) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name}: expected one of {', '.join(choices)}, got {value!r}")
    return value


def _check_prompts(prompts, model: CausalLM) -> tuple[torch.Tensor, torch.Tensor]:
    """A non-empty list of 1-D integer tensors with ids in [0, V) -> (tokens int64 [B, n], right-
    padded with 0, lengths int64 [B]) on the model's device. Vectorised: law tests pass ~10^5."""
    if not isinstance(prompts, (list, tuple)):
        raise TypeError(f"prompts: expected a list of 1-D token-id tensors, got {type(prompts).__name__}")
    if not prompts:
        raise ValueError("prompts: expected at least one prompt")
    for i, p in enumerate(prompts):
        if not isinstance(p, torch.Tensor) or p.is_floating_point() or p.is_complex() or p.dtype == torch.bool:
            raise TypeError(f"prompts[{i}]: expected an integer torch.Tensor of token ids")
        if p.dim() != 1 or p.numel() == 0:
            raise ValueError(f"prompts[{i}]: expected shape [length >= 1], got {tuple(p.shape)}")
    lengths = torch.tensor([p.numel() for p in prompts])  # [B]
    flat = torch.cat(prompts).long().cpu()  # [total]
    bad = ((flat < 0) | (flat >= model.vocab_size)).nonzero()
    if bad.numel():
        row = int(torch.searchsorted(lengths.cumsum(0), bad[0, 0], right=True))
        raise ValueError(f"prompts[{row}]: token ids must lie in [0, {model.vocab_size})")
    B, n = len(prompts), int(lengths.max())
    rows = torch.repeat_interleave(torch.arange(B), lengths)  # [total]
    cols = torch.arange(flat.numel()) - torch.repeat_interleave(lengths.cumsum(0) - lengths, lengths)
    tokens = torch.zeros(B, n, dtype=torch.long)
    tokens[rows, cols] = flat
    return tokens.to(model.device), lengths.to(model.device)


def _check_source(uniforms, batch: int, device):
    source = as_uniform_source(uniforms, device)
    if source.is_stream and batch != 1:
        raise ValueError("uniforms: a stream source serves one row; use TorchUniforms for a batch")
    return source


# ----------------------------------------------------------------------------------------------
# Target-only baseline
# ----------------------------------------------------------------------------------------------

def batched_target_only(target: CausalLM, prompts: list[torch.Tensor], max_new_tokens: int,
                        temperature: float = 0.0, uniforms=None) -> DecodeResult:
    """Plain batched autoregressive decoding of prompts of different lengths (the baseline at B).

    Prompts are left-padded into a [B, S] KV cache with a 4D float mask and per-row position ids
    (the padding is counted in `padded_kv_slots`); one forward per token for the whole batch.

    Args:
        target: `CausalLM`. prompts: list of B int tensors [n_b], n_b >= 1, ids in [0, V).
        max_new_tokens: N >= 1. temperature: 0 (greedy) or > 0 (one uniform per token and row).
        uniforms: `UniformSource`, an int seed, or None.

    Returns:
        `DecodeResult`: tokens int64 [B, N] on CPU; `BatchedDecodeStats`.

    Raises:
        TypeError / ValueError naming the argument: not a CausalLM, bad prompts, N < 1, negative
        temperature, a stream source with B > 1.
    """
    _check_model(target, "target")
    tokens, lengths = _check_prompts(prompts, target)  # [B, n], [B]
    N = _check_positive(max_new_tokens, "max_new_tokens")
    T = _check_temperature(temperature, "temperature")
    B, device = len(prompts), target.device
    source = _check_source(uniforms, B, device)
    start, forwards = time.perf_counter(), target.forward_count
    kv = _PaddedKV(target, B)
    logits = kv.prefill(tokens, lengths)[:, -1]  # [B, V]: left padding puts every row's last token last
    prefill_s = time.perf_counter() - start
    ones = torch.ones(B, 1, dtype=torch.bool, device=device)
    out = []
    for i in range(N):
        if T == 0:
            y = logits.argmax(-1)  # [B]
        else:
            y = categorical(probabilities(logits, T), source.take(B, 1, device)[:, 0])
        out.append(y)
        if i + 1 < N:
            logits = kv.append(y.unsqueeze(1), ones)[:, 0]
            kv.commit(ones.sum(1))
    stats = BatchedDecodeStats("target_only", iterations=N, target_forwards=target.forward_count - forwards,
                               accepted_lengths=torch.zeros(B * N, dtype=torch.long),
                               wall_time_s=time.perf_counter() - start, implementation="padded",
                               batch_size=B, padded_kv_slots=kv.padded, peak_kv_slots=kv.peak,
                               prefill_time_s=prefill_s)
    return DecodeResult(torch.stack(out, dim=1).cpu(), stats)


# ----------------------------------------------------------------------------------------------
# Speculative decoding
# ----------------------------------------------------------------------------------------------

def _draft_with_model(kv, pending, pending_count, L: int, T: float, source):
    """Feed each row's 1-2 pending tokens, then draft L tokens (q = softmax at T; T = 0: one-hot).
    pending [B, 2], pending_count [B] -> (draft [B, L], q float64 [B, L, V]); L draft forwards."""
    B, device = pending.shape[0], pending.device
    P = int(pending_count.max())
    real = torch.arange(P, device=device) < pending_count.unsqueeze(1)  # [B, P]
    logits = kv.append(pending[:, :P], real)  # [B, P, V]
    q_next = probabilities(logits[torch.arange(B, device=device), pending_count - 1], T)  # [B, V]
    draft = torch.zeros(B, L, dtype=torch.long, device=device)  # [B, L]
    q = torch.empty(B, L, q_next.shape[-1], dtype=torch.float64, device=device)  # [B, L, V]
    ones = torch.ones(B, 1, dtype=torch.bool, device=device)
    for d in range(L):
        if d:
            q_next = probabilities(kv.append(draft[:, d - 1:d], ones)[:, 0], T)
        q[:, d] = q_next
        draft[:, d] = categorical(q_next, source.take(B, 1, device)[:, 0])
    return draft, q


def _verify_chains(method: str, p, q, draft, lengths, u):
    """Chain rule per row with its own draft length: rows are grouped by length (each group is an
    ordinary chain of that length; length 0 draws straight from p, one uniform).

    p [B, l+1, V], q [B, l, V], draft [B, l], lengths [B] in [0, l], u [B, >= l+1] ->
    (tau [B], emitted [B, l+1] (-1 after the last token), consumed [B])."""
    B, width = p.shape[:2]
    tau = torch.zeros(B, dtype=torch.long, device=p.device)
    emitted = torch.full((B, width), -1, dtype=torch.long, device=p.device)
    consumed = torch.ones(B, dtype=torch.long, device=p.device)
    rule = rules.CHAIN_RULES[method]
    for n in lengths.unique().tolist():
        rows = (lengths == n).nonzero().squeeze(1)
        if n == 0:
            emitted[rows, 0] = categorical(p[rows, 0], u[rows, 0])
            continue
        out = rule(p[rows, :n + 1], q[rows, :n], draft[rows, :n], u[rows, :n + 1], validate=False)
        tau[rows], emitted[rows, :n + 1], consumed[rows] = out.num_accepted, out.tokens, out.consumed
    return tau, emitted, consumed


def _check_speculative(target, draft, method, draft_length, max_new_tokens, temperature, implementation,
                       drafter, max_ngram):
    _check_model(target, "target")
    _check_choice(drafter, "drafter", DRAFTERS)
    if drafter == "model":
        _check_pair(target, draft)
    _check_choice(method, "method", tuple(rules.CHAIN_RULES))
    _check_choice(implementation, "implementation", IMPLEMENTATIONS)
    return (_check_positive(draft_length, "draft_length"), _check_positive(max_new_tokens, "max_new_tokens"),
            _check_temperature(temperature, "temperature"), _check_positive(max_ngram, "max_ngram"))


class _Rows:
    """Bookkeeping of the active rows: context (prompt + emitted tokens, right-padded), the last
    token (emitted, not yet in the target cache) and the 1-2 tokens the draft cache lacks."""

    def __init__(self, tokens: torch.Tensor, lengths: torch.Tensor, N: int, L: int):
        B, device = tokens.shape[0], tokens.device  # tokens [B, n] right-padded, lengths [B]
        self.prompt_len = lengths
        self.ctx = torch.cat([tokens, tokens.new_zeros(B, N + L + 1)], dim=1)  # [B, W]
        self.ctx_len = self.prompt_len.clone()  # [B]
        self.row_id = torch.arange(B, device=device)  # original index of each active row
        self.last = self.ctx[self.row_id, self.ctx_len - 1]  # [B]
        self.pending = torch.stack([self.last, self.last], dim=1)  # [B, 2]
        self.pending_count = torch.ones(B, dtype=torch.long, device=device)  # [B]

    def emit(self, emitted: torch.Tensor, tau: torch.Tensor, draft: torch.Tensor | None = None) -> None:
        """Append each row's tau + 1 emitted tokens (emitted [B, l+1], -1 padded) to its context;
        with model drafts draft [B, L], also update what the draft cache lacks."""
        j = torch.arange(emitted.shape[1], device=emitted.device)
        index = (self.ctx_len.unsqueeze(1) + j).clamp(max=self.ctx.shape[1] - 1)  # [B, l+1]
        write = j <= tau.unsqueeze(1)
        self.ctx.scatter_(1, index, torch.where(write, emitted, self.ctx.gather(1, index)))
        self.ctx_len = self.ctx_len + tau + 1
        self.last = emitted.gather(1, tau.unsqueeze(1)).squeeze(1)
        if draft is not None:  # after a full accept the draft cache lacks X_L too
            L = draft.shape[1]
            full = tau == L
            self.pending = torch.stack([torch.where(full, draft[:, L - 1], self.last), self.last], dim=1)
            self.pending_count = torch.where(full, 2, 1)

    def finish(self, done: torch.Tensor, out: torch.Tensor, N: int) -> None:
        """Copy the first N generated tokens of the rows in `done` [B] into out [B0, N] (CPU)."""
        index = self.prompt_len[done].unsqueeze(1) + torch.arange(N, device=done.device)  # [b, N]
        out[self.row_id[done].cpu()] = self.ctx[done].gather(1, index).cpu()

    def select(self, keep: torch.Tensor) -> None:
        for name in ("prompt_len", "ctx", "ctx_len", "row_id", "last", "pending", "pending_count"):
            setattr(self, name, getattr(self, name)[keep])


def batched_speculative(target: CausalLM, draft: CausalLM | None, prompts: list[torch.Tensor],
                        max_new_tokens: int, method: str = "block", draft_length: int = 4,
                        temperature: float = 0.0, implementation: str = "ems", drafter: str = "model",
                        max_ngram: int = 3, uniforms=None) -> DecodeResult:
    """Speculative decoding of B prompts together, each row accepting its own number of tokens.

    Implementations (module docstring): "vanilla" pads inputs to the longest draft and the KV
    cache to the longest kept length (masked slots stay written); "ems" is EMS-SD (Ni et al. 2024,
    arXiv 2405.07542): unpadded KV cache and unpadded, packed input tokens.

    Args:
        target: `CausalLM`. draft: `CausalLM` on the same vocabulary and device (drafter="model";
            ignored, may be None, for drafter="prompt_lookup").
        prompts: list of B int tensors [n_b], n_b >= 1 (lengths may differ), ids in [0, V).
        max_new_tokens: N >= 1 tokens per row (exactly N; no EOS stop).
        method: "token" (arXiv 2211.17192) or "block" (arXiv 2403.10444).
        draft_length: L >= 1 (the most tokens a prompt-lookup draft has).
        temperature: T >= 0 of target and draft (T = 0: output = target-only greedy).
        implementation: "ems" or "vanilla". drafter: "model" or "prompt_lookup".
        max_ngram: the longest suffix n-gram prompt lookup matches (>= 1).
        uniforms: `UniformSource`, an int seed, or None (stream sources only for B = 1).

    Returns:
        `DecodeResult`: tokens int64 [B, N] on CPU; `BatchedDecodeStats` (forwards, tau per row and
        iteration, KV accounting).

    Raises:
        TypeError / ValueError naming the argument: non-CausalLM models, vocabulary or device
        mismatch, unknown method / implementation / drafter, L, N or max_ngram < 1, negative
        temperature, bad prompts, a stream source with B > 1.
    """
    L, N, T, max_ngram = _check_speculative(target, draft, method, draft_length, max_new_tokens, temperature,
                                            implementation, drafter, max_ngram)
    prompt_tokens, prompt_len = _check_prompts(prompts, target)  # [B, n], [B]
    B0, device, V = len(prompts), target.device, target.vocab_size
    source = _check_source(uniforms, B0, device)
    start, t_count = time.perf_counter(), target.forward_count
    d_count = draft.forward_count if drafter == "model" else 0
    tkv = _LAYOUTS[implementation](target, B0)
    tkv.prefill(prompt_tokens, prompt_len - 1)  # the caches hold every prompt token but the last
    dkv = _LAYOUTS[implementation](draft, B0) if drafter == "model" else None
    if dkv is not None:
        dkv.prefill(prompt_tokens, prompt_len - 1)
    prefill_s = time.perf_counter() - start
    rows = _Rows(prompt_tokens, prompt_len, N, L)
    out, accepted, trace = torch.zeros(B0, N, dtype=torch.long), [], []
    while True:
        B = rows.row_id.numel()
        if dkv is not None:
            tokens, q = _draft_with_model(dkv, rows.pending, rows.pending_count, L, T, source)  # [B, L], [B, L, V]
            lengths = torch.full((B,), L, dtype=torch.long, device=device)
        else:
            tokens, lengths = prompt_lookup_batch(rows.ctx, rows.ctx_len, max_ngram, L)
            tokens = tokens[:, :int(lengths.max())]  # inputs padded to the longest draft only
            q = torch.nn.functional.one_hot(tokens, V).double()  # [B, l, V] point masses
        width = tokens.shape[1]
        real = torch.arange(width + 1, device=device) <= lengths.unsqueeze(1)  # [B, l+1]
        logits = tkv.append(torch.cat([rows.last.unsqueeze(1), tokens], dim=1), real)  # [B, l+1, V]
        u = source.peek(B, width + 1, device)
        tau, emitted, consumed = _verify_chains(method, probabilities(logits, T), q, tokens, lengths, u)
        source.advance(consumed)
        tkv.commit(tau + 1)  # the old last token and the accepted drafts; the new last is not cached
        if dkv is not None:
            dkv.commit(rows.pending_count + tau.clamp(max=L - 1))  # X_L was never fed to the draft
        rows.emit(emitted, tau, tokens if dkv is not None else None)
        accepted.append(tau.cpu())
        trace.append((tkv.slots(), int((rows.ctx_len - 1).sum())))
        done = rows.ctx_len - rows.prompt_len >= N  # [B]
        rows.finish(done, out, N)
        if bool(done.all()):
            break
        if bool(done.any()):
            keep = (~done).nonzero().squeeze(1)
            for kv in (rows, tkv, dkv):
                if kv is not None:
                    kv.select(keep)
    stats = BatchedDecodeStats(
        method, iterations=len(accepted), target_forwards=target.forward_count - t_count,
        draft_forwards=(draft.forward_count - d_count) if dkv is not None else 0,
        accepted_lengths=torch.cat(accepted), wall_time_s=time.perf_counter() - start,
        implementation=implementation, drafter=drafter, batch_size=B0,
        padded_kv_slots=tkv.padded + (dkv.padded if dkv is not None else 0), peak_kv_slots=tkv.peak,
        peak_draft_kv_slots=dkv.peak if dkv is not None else 0, kv_trace=trace, prefill_time_s=prefill_s)
    return DecodeResult(out, stats)
