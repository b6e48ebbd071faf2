"""Speculative decoding on real causal LMs: `target_only` (the baseline) and `speculative` (the
path methods of `verispec.reference.methods`), both on the one engine (`verispec.empirical.engine`).

`target_only(...)` is plain decoding (greedy at temperature 0, inverse-CDF sampling otherwise).
`speculative(...)` runs one method of `METHODS` through `engine.decode`:

- chain methods ``token``, ``block``: one draft path of L tokens;
- multi-path methods ``gbv``, ``nss``, ``rrs``, ``spectr``, ``traversal`` (K i.i.d. paths) and
  ``rrsw`` (K paths with distinct first tokens, drawn without replacement): the K paths' distinct
  nodes are drafted as one tree layer per depth and verified by ONE target forward over their
  token tree.

Rows of a batch are independent runs and accept different numbers of tokens. At temperature 0
every lossless rule reproduces target-only greedy decoding token for token; at T > 0 the output
law is the target's (tests/empirical).
"""

from __future__ import annotations

import time

import torch

from .checks import _check_pair, _check_positive, _check_prompt, _check_temperature  # noqa: F401 (re-exported)
from .drafters import probabilities
from .engine import DecodeResult, DecodeStats, decode
from .methods import PATH_METHODS, paths_method
from .model import CausalLM
from .uniforms import UniformSource, as_uniform_source, categorical

__all__ = ["METHODS", "DecodeStats", "DecodeResult", "probabilities", "target_only", "speculative"]

#: method name -> how its drafts are sampled ("chain", "iid" paths, "without_replacement").
METHODS = {name: "chain" if name in ("token", "block") else "iid" if iid else "without_replacement"
           for name, iid in PATH_METHODS.items()}


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


def speculative(target: CausalLM, draft: CausalLM, prompt_ids, max_new_tokens: int, method: str = "block",
                draft_length: int = 3, num_paths: int = 1, temperature: float = 0.0,
                draft_temperature: float | None = None, uniforms=None, storage: str = "padded") -> DecodeResult:
    """Speculative decoding with method `method` (names of `verispec.reference.methods`).

    Args:
        target, draft: `CausalLM`s over one vocabulary, on one device.
        prompt_ids: int [B, n] or [n], or a list of 1-D prompts of different lengths (each row an
            independent run).
        max_new_tokens: N >= 1 tokens per row.
        method: one of `METHODS`. draft_length: L >= 1. num_paths: K >= 1 (1 for token/block).
        temperature: target temperature T >= 0 (0: greedy; output = target-only greedy).
        draft_temperature: temperature the drafts are sampled at (default: T). Any value keeps the
            output law exact: q is the law the drafts were actually drawn from.
        uniforms: `UniformSource`, an int seed, or None.
        storage: the KV storage (`verispec.empirical.kv.STORAGES`; default "padded").

    Returns:
        `DecodeResult` with tokens [B, N] and `DecodeStats` (forwards, accepted lengths).

    Raises:
        TypeError / ValueError: unknown method, L or K < 1, K > 1 for a chain method, vocabulary
        mismatch, bad prompt or temperature, a stream source with B > 1.
    """
    _check_pair(target, draft)
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method: unknown method {method!r}; known: {', '.join(METHODS)}")
    Td = None if draft_temperature is None else _check_temperature(draft_temperature, "draft_temperature")
    torch_method = paths_method(method, draft_length, num_paths, Td)
    return decode(target, draft, prompt_ids, torch_method, max_new_tokens, temperature, uniforms, storage)
