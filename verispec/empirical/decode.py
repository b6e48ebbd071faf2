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

import torch

from .validation import check_pair, check_positive, check_prompt, check_temperature  # noqa: F401 (re-exported)
from .drafters import probabilities
from .drafters import RootOnly
from .engine import DecodeResult, DecodeStats, TorchMethod, decode
from .methods import PATH_METHODS, paths_method
from .model import CausalLM
from .rules.nodes import SampleAndFollow

__all__ = ["METHODS", "DecodeStats", "DecodeResult", "probabilities", "target_only", "speculative"]

#: method name -> how its drafts are sampled ("chain", "iid" paths, "without_replacement").
METHODS = {name: "chain" if name in ("token", "block") else "iid" if iid else "without_replacement"
           for name, iid in PATH_METHODS.items()}


class _TopTwo:
    """Records, per step and row, target-only's top-1 minus top-2 logit and runner-up token."""

    def __init__(self, B: int, N: int):
        self.margins = torch.zeros(B, N, dtype=torch.float32)
        self.runners_up = torch.zeros(B, N, dtype=torch.long)
        self.step = 0

    def __call__(self, logits, tree, rows) -> None:
        top2 = logits[:, 0].topk(2, dim=-1)  # [b, 2] at the root: the next token's logits
        ids = rows.row_id.cpu()
        self.margins[ids, self.step] = (top2.values[:, 0] - top2.values[:, 1]).float().cpu()
        self.runners_up[ids, self.step] = top2.indices[:, 1].cpu()
        self.step += 1


def target_only(target: CausalLM, prompt_ids, max_new_tokens: int, temperature: float = 0.0,
                uniforms=None, storage: str = "padded") -> DecodeResult:
    """Plain autoregressive decoding with the KV cache (the baseline every method must match): the
    engine with no draft (`drafters.RootOnly`), one target forward and one draw per token.

    Args:
        target: `CausalLM`. prompt_ids: int [B, n] or [n], or a list of 1-D prompts.
        max_new_tokens: >= 1. temperature: 0 (greedy) or > 0 (sampling, one uniform per token).
        uniforms: `UniformSource`, an int seed, or None. storage: `verispec.empirical.kv.STORAGES`.

    Returns:
        `DecodeResult` with tokens [B, max_new_tokens]; stats.top2_margins / runner_up_tokens
        [B, max_new_tokens] (near-tie diagnostics for greedy comparisons).

    Raises:
        TypeError / ValueError: bad prompt, max_new_tokens < 1, negative temperature.
    """
    if not isinstance(target, CausalLM):
        raise TypeError(f"target: expected a CausalLM, got {type(target).__name__}")
    N = check_positive(max_new_tokens, "max_new_tokens")
    B = len(prompt_ids) if isinstance(prompt_ids, (list, tuple)) else check_prompt(prompt_ids, target).shape[0]
    top2 = _TopTwo(B, N)
    method = TorchMethod("target_only", RootOnly, SampleAndFollow(), observe=top2)
    result = decode(target, None, prompt_ids, method, N, temperature, uniforms, storage)
    result.stats.top2_margins, result.stats.runner_up_tokens = top2.margins, top2.runners_up
    return result


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
    check_pair(target, draft)
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method: unknown method {method!r}; known: {', '.join(METHODS)}")
    Td = None if draft_temperature is None else check_temperature(draft_temperature, "draft_temperature")
    torch_method = paths_method(method, draft_length, num_paths, Td)
    return decode(target, draft, prompt_ids, torch_method, max_new_tokens, temperature, uniforms, storage)
