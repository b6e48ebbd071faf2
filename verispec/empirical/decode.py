"""Speculative decoding on real causal LMs with the torch twins of the reference rules.

`target_only(...)` is plain decoding (greedy at temperature 0, inverse-CDF sampling otherwise).
`speculative(...)` runs the draft-verify loop of one method of `verispec.reference.methods`:

- chain methods ``token``, ``block``: one draft path of L tokens;
- multi-path methods ``gbv``, ``nss``, ``rrs``, ``spectr``, ``traversal`` (K i.i.d. paths) and
  ``rrsw`` (K paths with distinct first tokens, drawn without replacement): the K paths are drafted
  as K batch rows of the draft model and verified by ONE target forward over their token tree
  (4D float mask, position ids = prefix length + depth; `verispec.empirical.model`).

Both functions decode a batch of B prompts of equal length; every row is an independent run
(rows accept different numbers of tokens: each cache keeps a per-row validity mask and is
compacted after every iteration by a gather of the kept positions, which is a plain crop when a
row keeps a contiguous prefix). At temperature 0 every lossless rule reproduces target-only greedy
decoding token for token; at T > 0 the output law is the target's (tests/empirical).

Probabilities: p = softmax(logits / T) in float64 (T = 0: a point mass on the argmax, ties to the
lowest id, as `verispec.reference.models.temperature`). Randomness: a `UniformSource`; drafting
reads K uniforms per depth (path k's token by inverse CDF), verification reads uniforms in the
reference rule's order. With a stream source (`NumpyUniforms`, B = 1) unused uniforms are kept.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from . import rules
from .model import CausalLM, gather_cache, repeat_cache_rows, select_cache_rows
from .uniforms import UniformSource, as_uniform_source, categorical

__all__ = ["METHODS", "DecodeStats", "DecodeResult", "probabilities", "target_only", "speculative"]

#: method name -> how its drafts are sampled ("chain", "iid" paths, "without_replacement").
METHODS = {"token": "chain", "block": "chain", "gbv": "iid", "nss": "iid", "rrs": "iid",
           "rrsw": "without_replacement", "spectr": "iid", "traversal": "iid"}


@dataclass
class DecodeStats:
    """Counters of one decoding run.

    Attributes:
        method: method name ("target_only" for plain decoding).
        iterations: batched verification steps (target forwards after the prefill).
        target_forwards, draft_forwards: forward passes (prefill included).
        accepted_lengths: int64 [num_row_iterations]: tau of every (row, iteration).
        wall_time_s: seconds spent.
        top2_margins: float32 [B, N] (target-only only): top-1 minus top-2 logit at every step,
            to tell near-ties apart when another decoder's greedy output diverges.
        runner_up_tokens: int64 [B, N] (target-only only): the second-ranked token per step.
    """

    method: str
    iterations: int = 0
    target_forwards: int = 0
    draft_forwards: int = 0
    accepted_lengths: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    wall_time_s: float = 0.0
    top2_margins: torch.Tensor | None = None
    runner_up_tokens: torch.Tensor | None = None

    @property
    def mean_accepted(self) -> float:
        """Mean accepted draft tokens per iteration, E[tau]."""
        n = self.accepted_lengths.numel()
        return float(self.accepted_lengths.double().mean()) if n else 0.0

    @property
    def block_efficiency(self) -> float:
        """Tokens emitted per target call, E[tau] + 1 (1 for target-only decoding)."""
        return self.mean_accepted + 1.0


@dataclass
class DecodeResult:
    """tokens: int64 [B, max_new_tokens], the generated tokens (prompt excluded); stats."""

    tokens: torch.Tensor
    stats: DecodeStats


def probabilities(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """float64 next-token distributions [..., V] from logits [..., V].

    T = 0: one-hot on the argmax (ties to the lowest id); T > 0: softmax(logits / T).
    """
    if temperature == 0:
        index = logits.argmax(-1, keepdim=True)
        return torch.zeros(logits.shape, dtype=torch.float64, device=logits.device).scatter_(-1, index, 1.0)
    return torch.softmax(logits.double() / temperature, dim=-1)


def _check_temperature(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
    if not (value >= 0 and value != float("inf")):
        raise ValueError(f"{name}: must be finite and >= 0, got {value!r}")
    return float(value)


def _check_positive(value, name):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name}: must be >= 1, got {value}")
    return value


def _check_pair(target, draft) -> None:
    """TypeError / ValueError unless target and draft are `CausalLM`s on one vocabulary and device."""
    for name, model in (("target", target), ("draft", draft)):
        if not isinstance(model, CausalLM):
            raise TypeError(f"{name}: expected a CausalLM, got {type(model).__name__}")
    if draft.vocab_size != target.vocab_size:
        raise ValueError(f"draft: vocab_size {draft.vocab_size} differs from target's {target.vocab_size}")
    if draft.device != target.device:
        raise ValueError(f"draft: on {draft.device}, target on {target.device}")


def _check_prompt(prompt_ids, model: CausalLM):
    if not isinstance(prompt_ids, torch.Tensor):
        prompt_ids = torch.as_tensor(prompt_ids, dtype=torch.long)
    if prompt_ids.dim() == 1:
        prompt_ids = prompt_ids.unsqueeze(0)
    if prompt_ids.dim() != 2 or prompt_ids.shape[1] == 0 or prompt_ids.shape[0] == 0:
        raise ValueError(f"prompt_ids: expected shape [batch, length >= 1], got {tuple(prompt_ids.shape)}")
    if prompt_ids.is_floating_point():
        raise TypeError("prompt_ids: expected integer token ids")
    if bool(((prompt_ids < 0) | (prompt_ids >= model.vocab_size)).any()):
        raise ValueError(f"prompt_ids: token ids must lie in [0, {model.vocab_size})")
    return prompt_ids.to(model.device, torch.long)


def _uniforms(source: UniformSource, rows: int, n: int, device) -> torch.Tensor:
    """n uniforms per row, all consumed -> float64 [rows, n] on `device`."""
    return source.take(rows, n, device)


def target_only(target: CausalLM, prompt_ids, max_new_tokens: int, temperature: float = 0.0,
                uniforms=None) -> DecodeResult:
    """Plain autoregressive decoding with the KV cache (the baseline every method must match).

    Args:
        target: `CausalLM`. prompt_ids: int [B, n] or [n]. max_new_tokens: >= 1.
        temperature: 0 (greedy) or > 0 (sampling, one uniform per token).
        uniforms: `UniformSource`, an int seed, or None.

    Returns:
        `DecodeResult` with tokens [B, max_new_tokens].

    Raises:
        TypeError / ValueError: bad prompt, max_new_tokens < 1, negative temperature.
    """
    if not isinstance(target, CausalLM):
        raise TypeError(f"target: expected a CausalLM, got {type(target).__name__}")
    prompt = _check_prompt(prompt_ids, target)
    N = _check_positive(max_new_tokens, "max_new_tokens")
    T = _check_temperature(temperature, "temperature")
    source = as_uniform_source(uniforms)
    start, forwards = time.perf_counter(), target.forward_count
    B = prompt.shape[0]
    # The prefix but the last token is prefilled, as in `speculative`, so both share one prefill.
    cache = target.prefill(prompt[:, :-1])[1] if prompt.shape[1] > 1 else target.new_cache()
    logits = target.chain(cache, prompt[:, -1:])[:, -1]  # [B, V]
    out, margins, runners_up = [], [], []
    for i in range(N):
        top2 = logits.topk(2, dim=-1)  # near-tie diagnostics for greedy comparisons
        margins.append(top2.values[:, 0] - top2.values[:, 1])
        runners_up.append(top2.indices[:, 1])
        if T == 0:
            y = logits.argmax(-1)
        else:
            y = categorical(probabilities(logits, T), _uniforms(source, B, 1, logits.device)[:, 0])
        out.append(y)
        if i + 1 < N:
            logits = target.chain(cache, y.unsqueeze(1))[:, -1]
    stats = DecodeStats("target_only", iterations=N, target_forwards=target.forward_count - forwards,
                        accepted_lengths=torch.zeros(B * N, dtype=torch.long),
                        wall_time_s=time.perf_counter() - start,
                        top2_margins=torch.stack(margins, dim=1).cpu(),
                        runner_up_tokens=torch.stack(runners_up, dim=1).cpu())
    return DecodeResult(torch.stack(out, dim=1).cpu(), stats)


class _Cache:
    """One model's KV cache for a batch of rows, with per-row validity and next position."""

    def __init__(self, model: CausalLM, prompt: torch.Tensor):
        self.model = model
        B, n = prompt.shape
        self.cache = model.new_cache()
        self.valid = torch.zeros(B, 0, dtype=torch.bool, device=model.device)  # [B, S]
        if n:
            _, self.cache = model.prefill(prompt)
            self.valid = torch.ones(B, n, dtype=torch.bool, device=model.device)
        self.pos = torch.full((B,), n, dtype=torch.long, device=model.device)  # next position id

    def append(self, tokens, parents, real, base=None):
        """Tree forward of tokens [R, N] (parents [R, N]); real [R, N] marks entries to keep valid.
        Depth 0 gets position `base` [R] (default: self.pos). Returns logits [R, N, V]."""
        logits = self.model.tree(self.cache, tokens, parents, past_valid=self.valid,
                                 past_lengths=self.pos if base is None else base)
        self.valid = torch.cat([self.valid, real], dim=1)
        return logits

    def keep(self, keep):
        """Keep, per row, the positions where keep [R, S] is True (in order) and compact."""
        counts = keep.sum(-1)  # [R]
        width = int(counts.max())
        order = torch.sort((~keep).long(), dim=1, stable=True).indices[:, :width]  # kept first
        gather_cache(self.cache, order)
        self.valid = torch.arange(width, device=keep.device) < counts.unsqueeze(1)
        self.pos = counts

    def select(self, rows):
        select_cache_rows(self.cache, rows)
        self.valid, self.pos = self.valid[rows], self.pos[rows]

    def repeat(self, K):
        repeat_cache_rows(self.cache, K)
        self.valid = self.valid.repeat_interleave(K, dim=0)
        self.pos = self.pos.repeat_interleave(K, dim=0)


def _sample_root_without_replacement(q, K, u):
    """K distinct tokens per row by successive draws from q renormalised over unused tokens.
    q [B, V], u [B, K] -> (tokens [B, K], lengths [B, K]: 1 where drawn, 0 where q ran out)."""
    B, V = q.shape
    remaining = q.clone()
    tokens = torch.zeros(B, K, dtype=torch.long, device=q.device)
    drawn = torch.zeros(B, K, dtype=torch.bool, device=q.device)
    for k in range(K):
        mass = remaining.sum(-1)  # [B]
        ok = mass > 0
        t = categorical(remaining / torch.where(ok, mass, 1).unsqueeze(1), u[:, k])
        tokens[:, k] = torch.where(ok, t, 0)
        drawn[:, k] = ok
        remaining = torch.where(ok.unsqueeze(1), remaining.scatter(1, t.unsqueeze(1), 0.0), remaining)
    return tokens, drawn


def _compaction(real):
    """Drop the tree block's empty slots: order [B, W] lists each row's real slots first (W = the
    most real slots of any row) and where [B, slots] maps a slot to its compact position.
    Paths that share a prefix are one node, so the target computes each node once (with K
    identical greedy drafts the tree is a chain of L + 1 nodes, not 1 + K L)."""
    B, slots = real.shape
    width = int(real.sum(-1).max())
    order = torch.sort((~real).long(), dim=1, stable=True).indices[:, :width]  # [B, W]
    where = torch.zeros(B, slots, dtype=torch.long, device=real.device)
    where.scatter_(1, order, torch.arange(width, device=real.device).expand(B, width))
    return order, where


def _tree_forward(tcache, tokens, parents, real, order, where):
    """Target logits [B, slots, V] of the tree block (tokens, parents, real: [B, slots]) from ONE
    forward over its compacted real nodes (slot order kept, so parents still precede children);
    entries of empty slots are meaningless and never read."""
    c_parents = parents.gather(1, order)  # [B, W], slot ids
    c_parents = torch.where(c_parents >= 0, where.gather(1, c_parents.clamp(min=0)), -1)
    logits = tcache.append(tokens.gather(1, order), c_parents, real.gather(1, order))  # [B, W, V]
    return logits.gather(1, where.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))  # [B, slots, V]


def speculative(target: CausalLM, draft: CausalLM, prompt_ids, max_new_tokens: int, method: str = "block",
                draft_length: int = 3, num_paths: int = 1, temperature: float = 0.0,
                draft_temperature: float | None = None, uniforms=None) -> DecodeResult:
    """Speculative decoding with method `method` (names of `verispec.reference.methods`).

    Args:
        target, draft: `CausalLM`s over one vocabulary, on one device.
        prompt_ids: int [B, n] or [n] (rows of equal length; each row an independent run).
        max_new_tokens: N >= 1 tokens per row.
        method: one of `METHODS`. draft_length: L >= 1. num_paths: K >= 1 (1 for token/block).
        temperature: target temperature T >= 0 (0: greedy; output = target-only greedy).
        draft_temperature: temperature the drafts are sampled at (default: T). Any value keeps the
            output law exact: q is the law the drafts were actually drawn from.
        uniforms: `UniformSource`, an int seed, or None.

    Returns:
        `DecodeResult` with tokens [B, N] and `DecodeStats` (forwards, accepted lengths).

    Raises:
        TypeError / ValueError: unknown method, L or K < 1, K > 1 for a chain method, vocabulary
        mismatch, bad prompt or temperature, a stream source with B > 1.
    """
    _check_pair(target, draft)
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method: unknown method {method!r}; known: {', '.join(METHODS)}")
    L = _check_positive(draft_length, "draft_length")
    K = _check_positive(num_paths, "num_paths")
    if METHODS[method] == "chain" and K != 1:
        raise ValueError(f"num_paths: method {method!r} drafts one path, got num_paths={K}")
    N = _check_positive(max_new_tokens, "max_new_tokens")
    T = _check_temperature(temperature, "temperature")
    Td = T if draft_temperature is None else _check_temperature(draft_temperature, "draft_temperature")
    prompt = _check_prompt(prompt_ids, target)
    source = as_uniform_source(uniforms)
    device = target.device
    B0 = prompt.shape[0]
    if source.is_stream and B0 != 1:
        raise ValueError("uniforms: a stream source serves one row; use TorchUniforms for a batch")
    start = time.perf_counter()
    t_count, d_count = target.forward_count, draft.forward_count

    # State of the active rows. Both caches hold the prompt but its last token, `last`.
    tcache, dcache = _Cache(target, prompt[:, :-1]), _Cache(draft, prompt[:, :-1])
    row_id = torch.arange(B0, device=device)  # original row of each active row
    out = torch.zeros(B0, N + L + 1, dtype=torch.long, device=device)
    out_len = torch.zeros(B0, dtype=torch.long, device=device)
    pending = torch.stack([prompt[:, -1], prompt[:, -1]], dim=1)  # [B, 2] draft tokens not cached
    pending_count = torch.ones(B0, dtype=torch.long, device=device)
    last = prompt[:, -1].clone()  # [B], emitted but not in the target cache
    accepted_log, iterations, finished = [], 0, []
    slots = 1 + K * L  # tree block: root, then (d, k) -> 1 + (d - 1) K + k

    while row_id.numel():
        B = row_id.numel()
        rows = torch.arange(B, device=device)
        # ---- draft: pending tokens, then K paths of L tokens as K batch rows -----------------
        chain_parents = torch.tensor([[-1, 0]], device=device).expand(B, 2)
        real = torch.arange(2, device=device) < pending_count.unsqueeze(1)  # [B, 2]
        logits = dcache.append(pending, chain_parents, real)  # [B, 2, V]
        q_root = probabilities(logits[rows, pending_count - 1], Td)  # [B, V]
        dcache.pos = dcache.pos + pending_count
        paths = torch.zeros(B, K, L, dtype=torch.long, device=device)
        lengths = torch.full((B, K), L, dtype=torch.long, device=device)
        q_tab = torch.empty(B, K, L, q_root.shape[-1], dtype=torch.float64, device=device)
        u = _uniforms(source, B, K, device)
        if METHODS[method] == "without_replacement":
            paths[:, :, 0], drawn = _sample_root_without_replacement(q_root, K, u)
            lengths = torch.where(drawn, lengths, 0)
        else:
            paths[:, :, 0] = categorical(q_root.unsqueeze(1).expand(B, K, -1), u)
        q_tab[:, :, 0] = q_root.unsqueeze(1)
        if K > 1 and L > 1:
            dcache.repeat(K)
        for d in range(1, L):
            step_tokens = paths[:, :, d - 1].reshape(B * K, 1)
            logits = dcache.append(step_tokens, torch.full_like(step_tokens, -1),
                                   torch.ones_like(step_tokens, dtype=torch.bool))  # [B K, 1, V]
            dcache.pos = dcache.pos + 1
            q_rows = probabilities(logits[:, 0], Td).view(B, K, -1)  # [B, K, V]
            rep = rules._representatives(paths[:, :, :d], torch.full_like(lengths, d))[:, :, d]  # [B, K]
            q_rows = q_rows.gather(1, rep.unsqueeze(-1).expand_as(q_rows))  # one q per node
            q_tab[:, :, d] = q_rows
            paths[:, :, d] = categorical(q_rows, _uniforms(source, B, K, device))

        # ---- verify: the tree of the K paths in one target forward ---------------------------
        rep = rules._representatives(paths, lengths)  # [B, K, L+1]
        depth = torch.arange(1, L + 1, device=device)  # [L]
        is_node = (rep[:, :, 1:] == torch.arange(K, device=device).view(1, K, 1)) & (
            depth <= lengths.unsqueeze(-1))  # [B, K, L]
        slot_of = 1 + (depth - 1).view(1, 1, L) * K + rep[:, :, 1:]  # [B, K, L], slot of node (k, d)
        parent_slot = torch.cat([torch.zeros(B, K, 1, dtype=torch.long, device=device), slot_of[:, :, :-1]], -1)
        tokens = torch.zeros(B, slots, dtype=torch.long, device=device)
        parents = torch.zeros(B, slots, dtype=torch.long, device=device)
        real = torch.zeros(B, slots, dtype=torch.bool, device=device)
        tokens[:, 0], parents[:, 0], real[:, 0] = last, -1, True
        own = (1 + (depth - 1).view(1, 1, L) * K + torch.arange(K, device=device).view(1, K, 1)).expand(B, K, L)
        flat = own.reshape(B, K * L)
        tokens.scatter_(1, flat, torch.where(is_node, paths, 0).reshape(B, K * L))
        parents.scatter_(1, flat, torch.where(is_node, parent_slot, 0).reshape(B, K * L))
        real.scatter_(1, flat, is_node.reshape(B, K * L))
        S = tcache.valid.shape[1]
        order, where = _compaction(real)
        p_slots = probabilities(_tree_forward(tcache, tokens, parents, real, order, where), T)  # [B, slots, V]
        path_slots = torch.cat([torch.zeros(B, K, 1, dtype=torch.long, device=device), slot_of], -1)  # [B, K, L+1]
        p_tab = p_slots.gather(1, path_slots.reshape(B, K * (L + 1), 1).expand(-1, -1, p_slots.shape[-1]))
        p_tab = p_tab.view(B, K, L + 1, -1)
        need = rules.uniforms_needed(method, L, K)
        u = source.peek(B, need, device)
        result = rules.verify(method, p_tab, q_tab, paths, u, None if METHODS[method] != "without_replacement"
                              else lengths, validate=False)
        source.advance(result.consumed)
        iterations += 1
        tau, k_star = result.num_accepted, result.path_index  # [B]
        accepted_log.append(tau)

        # ---- commit: emitted tokens, target cache, draft cache --------------------------------
        emitted = result.tokens  # [B, L+1], -1 padded
        j = torch.arange(L + 1, device=device)
        write = j < (tau + 1).unsqueeze(1)
        idx = (out_len.unsqueeze(1) + j).clamp(max=out.shape[1] - 1)
        out.scatter_(1, idx, torch.where(write, emitted, out.gather(1, idx)))
        out_len = out_len + tau + 1
        y = emitted[rows, tau]
        accepted_slots = slot_of[rows, k_star]  # [B, L]
        keep_new = torch.zeros(B, slots, dtype=torch.bool, device=device)
        keep_new[:, 0] = True
        keep_new.scatter_(1, accepted_slots, (torch.arange(L, device=device) < tau.unsqueeze(1)))
        tcache.keep(torch.cat([tcache.valid[:, :S], keep_new.gather(1, order)], dim=1))
        if K > 1 and L > 1:
            dcache.select(rows * K + k_star)
        # draft rows: [valid past | 2 pending slots | L-1 path tokens]; keep min(tau, L-1) of them
        Sd = dcache.valid.shape[1]
        kept_path = torch.arange(L - 1, device=device) < tau.clamp(max=L - 1).unsqueeze(1)  # [B, L-1]
        dkeep = dcache.valid.clone()
        dkeep[:, Sd - (L - 1):] = kept_path
        dcache.keep(dkeep)
        full = tau == L
        pending = torch.stack([torch.where(full, emitted[rows, L - 1], y), y], dim=1)
        pending_count = torch.where(full, 2, 1)
        last = y

        # ---- drop finished rows -----------------------------------------------------------------
        alive = out_len < N
        if not bool(alive.all()):
            finished.append((row_id[~alive], out[~alive, :N]))
            keep_rows = alive.nonzero().squeeze(1)
            row_id = row_id[keep_rows]
            tcache.select(keep_rows)
            dcache.select(keep_rows)
            pending, pending_count, last = pending[keep_rows], pending_count[keep_rows], last[keep_rows]
            out, out_len = out[keep_rows], out_len[keep_rows]

    tokens = torch.zeros(B0, N, dtype=torch.long)
    for ids, toks in finished:
        tokens[ids.cpu()] = toks.cpu()
    stats = DecodeStats(method, iterations=iterations, target_forwards=target.forward_count - t_count,
                        draft_forwards=draft.forward_count - d_count,
                        accepted_lengths=torch.cat(accepted_log).cpu() if accepted_log else torch.zeros(0, dtype=torch.long),
                        wall_time_s=time.perf_counter() - start)
    return DecodeResult(tokens, stats)


