"""The peer a user would pick instead of verispec: transformers' assisted generation.

`hf_assisted(...)` runs ``model.generate(assistant_model=draft)`` (Leviathan-style token-level
speculative decoding, batch size 1; arXiv 2211.17192) with the assistant's own defaults for the
number of draft tokens (transformers' heuristic schedule and confidence threshold), so the
comparison is against what a user gets out of the box. Everything that would change the output
law is switched off: no top-k / top-p / repetition penalty, no EOS stop (exactly
`max_new_tokens` tokens, like every verispec method).

Forward passes are counted with forward hooks on both models (generate calls the modules
directly), so the peer's tokens per target call is measured, not estimated.
"""

from __future__ import annotations

import time

import torch

from .decode import DecodeResult, DecodeStats, _check_positive, _check_prompt, _check_temperature
from .model import CausalLM

__all__ = ["hf_assisted", "hf_generation_config"]


def hf_generation_config(max_new_tokens: int, temperature: float):
    """A `GenerationConfig` for plain sampling at `temperature` (greedy at 0), no stopping."""
    from transformers import GenerationConfig

    sampling = temperature > 0
    return GenerationConfig(max_new_tokens=max_new_tokens,
                            do_sample=sampling, temperature=temperature if sampling else None,
                            top_k=0 if sampling else None, top_p=1.0 if sampling else None,
                            repetition_penalty=1.0, eos_token_id=None, pad_token_id=0)


class _Counter:
    """Counts calls of a module's forward (a forward hook), removable."""

    def __init__(self, module: torch.nn.Module):
        self.count = 0
        self._handle = module.register_forward_hook(self._hook)

    def _hook(self, module, args, output):
        self.count += 1

    def remove(self) -> None:
        self._handle.remove()


def hf_assisted(target: CausalLM, draft: CausalLM | None, prompt_ids, max_new_tokens: int,
                temperature: float = 0.0, seed: int = 0, prompt_lookup_num_tokens: int | None = None) -> DecodeResult:
    """``target.model.generate(prompt, assistant_model=draft.model)`` timed and counted.

    Args:
        target, draft: `CausalLM`s (draft None with `prompt_lookup_num_tokens`: transformers'
            prompt-lookup decoding instead of a draft model).
        prompt_ids: int [n] or [1, n] (batch size 1: transformers' assisted generation refuses more).
        max_new_tokens: N >= 1. temperature: >= 0 (0: greedy). seed: torch.manual_seed before
            sampling.

    Returns:
        `DecodeResult`: tokens int64 [1, N]; stats with forward counts, iterations = target
        forwards (the first also prefills the prompt), block efficiency N / iterations stored as
        the mean of `accepted_lengths` + 1 (one entry per target call), wall time (prefill
        included).

    Raises:
        TypeError / ValueError: bad models, prompt with batch > 1, bad N or temperature.
    """
    if not isinstance(target, CausalLM):
        raise TypeError(f"target: expected a CausalLM, got {type(target).__name__}")
    if draft is None and prompt_lookup_num_tokens is None:
        raise ValueError("draft: None needs prompt_lookup_num_tokens")
    if draft is not None and not isinstance(draft, CausalLM):
        raise TypeError(f"draft: expected a CausalLM, got {type(draft).__name__}")
    prompt = _check_prompt(prompt_ids, target)
    if prompt.shape[0] != 1:
        raise ValueError(f"prompt_ids: assisted generation takes batch size 1, got {prompt.shape[0]}")
    N = _check_positive(max_new_tokens, "max_new_tokens")
    T = _check_temperature(temperature, "temperature")
    kwargs = {"assistant_model": draft.model} if draft is not None else {
        "prompt_lookup_num_tokens": prompt_lookup_num_tokens}
    counters = [_Counter(target.model)] + ([_Counter(draft.model)] if draft is not None else [])
    try:
        torch.manual_seed(seed)
        start = time.perf_counter()
        with torch.inference_mode():
            out = target.model.generate(prompt, attention_mask=torch.ones_like(prompt),
                                        generation_config=hf_generation_config(N, T), **kwargs)
        wall = time.perf_counter() - start
    finally:
        for counter in counters:
            counter.remove()
    tokens = out[:, prompt.shape[1]:].cpu()  # [1, N]
    target_calls = counters[0].count
    draft_calls = counters[1].count if draft is not None else 0
    target.forward_count += target_calls
    if draft is not None:
        draft.forward_count += draft_calls
    # Assisted generation has no separate prefill: its first target call verifies the first
    # candidates together with the prompt, so every target call is a verification step.
    iterations = max(target_calls, 1)
    # Per-call accepted lengths are not exposed by generate; spread N tokens evenly over the
    # verification calls so that mean(tau) + 1 = tokens per target call, as measured.
    per_call = torch.full((iterations,), N / iterations - 1.0, dtype=torch.float64)
    stats = DecodeStats("hf_assisted" if draft is not None else "hf_prompt_lookup", iterations=iterations,
                        target_forwards=target_calls, draft_forwards=draft_calls,
                        accepted_lengths=per_call, wall_time_s=wall)
    return DecodeResult(tokens, stats)
