"""Batched speculative decoding where every row accepts its own number of tokens per step.

`batched_speculative(target, draft, prompts, ...)` decodes B prompts of different lengths
together with a chain rule (``token``: Leviathan et al. 2023, arXiv 2211.17192; ``block``: Sun et
al. 2024, arXiv 2403.10444), drafted by the draft model (q = its softmax at the target temperature)
or by prompt lookup (q = one-hot on the n-gram continuation found in the row's own context,
`verispec.empirical.lookup`). Every row is an independent run and yields exactly max_new_tokens
tokens (no EOS stop). `batched_target_only(...)` is the plain batched baseline at the same B.

Both run on the engine (`verispec.empirical.engine.decode`); the implementation picks its KV
storage (`verispec.empirical.kv`). Two ways to hold a batch whose rows have different lengths
(EMS-SD, Ni et al. 2024, arXiv 2405.07542):

- ``"vanilla"`` (`PaddedKV(compact=False)`): a [B, S] cache shared by all rows. Inputs are padded to the longest
  row of the step (longest draft, or 2 pending draft tokens), and after verification the cache is
  cropped to the *longest* kept length; every other row's tail (pad inputs, rejected drafts) stays
  in the cache, masked out forever. Prompts are right-padded (the padding stays masked).
- ``"ems"`` (`PackedKV`), EMS-SD's "unpad KV cache" + "unpad input tokens": batch dimension 1.
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

from dataclasses import dataclass

import torch

from .validation import check_pair, check_positive, check_temperature
from .drafters import PromptLookupDrafter, RootOnly
from .engine import DecodeResult, DecodeStats, TorchMethod, decode
from .methods import paths_method
from .model import CausalLM
from .rules import CHAIN_RULES
from .rules.nodes import PathRule, SampleAndFollow

__all__ = ["IMPLEMENTATIONS", "DRAFTERS", "BatchedDecodeStats", "batched_target_only", "batched_speculative"]

IMPLEMENTATIONS = ("vanilla", "ems")
DRAFTERS = ("model", "prompt_lookup")
#: Implementation -> KV storage of the engine.
_STORAGE = {"vanilla": "vanilla", "ems": "packed"}


@dataclass
class BatchedDecodeStats(DecodeStats):
    """`DecodeStats` (KV accounting included) plus the batch's description.

    Attributes (besides `DecodeStats`'):
        implementation: "vanilla", "ems" ("padded" for `batched_target_only`).
        drafter: "model", "prompt_lookup" ("" for `batched_target_only`).
        batch_size: B, the number of prompts.
    """

    implementation: str = ""
    drafter: str = ""
    batch_size: int = 0


def _check_model(model, name: str) -> CausalLM:
    if not isinstance(model, CausalLM):
        raise TypeError(f"{name}: expected a CausalLM, got {type(model).__name__}")
    return model


def _check_choice(value, name: str, choices) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name}: expected one of {', '.join(choices)}, got {value!r}")
    return value


def _check_list(prompts) -> None:
    if not isinstance(prompts, (list, tuple)):
        raise TypeError(f"prompts: expected a list of 1-D token-id tensors, got {type(prompts).__name__}")


def _batched(result: DecodeResult, name: str, implementation: str, drafter: str, B: int) -> DecodeResult:
    fields = {k: v for k, v in vars(result.stats).items() if k != "method"}
    stats = BatchedDecodeStats(name, **fields, implementation=implementation, drafter=drafter, batch_size=B)
    return DecodeResult(result.tokens, stats)


def batched_target_only(target: CausalLM, prompts: list[torch.Tensor], max_new_tokens: int,
                        temperature: float = 0.0, uniforms=None) -> DecodeResult:
    """Plain batched autoregressive decoding of prompts of different lengths (the baseline at B):
    the engine with no draft (`drafters.RootOnly`) on a vanilla padded KV (the prompts' padding
    is counted in `padded_kv_slots`); one target forward per token for the whole batch.

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
    _check_list(prompts)
    method = TorchMethod("target_only", RootOnly, SampleAndFollow())
    result = decode(target, None, prompts, method, max_new_tokens, temperature, uniforms, "vanilla")
    return _batched(result, "target_only", "padded", "", len(prompts))


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
    _check_model(target, "target")
    _check_list(prompts)
    _check_choice(drafter, "drafter", DRAFTERS)
    if drafter == "model":
        check_pair(target, draft)
    _check_choice(method, "method", tuple(CHAIN_RULES))
    _check_choice(implementation, "implementation", IMPLEMENTATIONS)
    L, n = check_positive(draft_length, "draft_length"), check_positive(max_ngram, "max_ngram")
    check_temperature(temperature, "temperature")
    if drafter == "model":
        torch_method = paths_method(method, L, 1)
    else:
        torch_method = TorchMethod(method, lambda: PromptLookupDrafter(L, n), PathRule(method))
        draft = None
    result = decode(target, draft, prompts, torch_method, max_new_tokens, temperature, uniforms,
                    _STORAGE[implementation])
    return _batched(result, method, implementation, drafter, len(prompts))
