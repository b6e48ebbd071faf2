"""The peer a user would pick instead of verispec: transformers' assisted generation.

`hf_assisted(...)` runs ``model.generate(assistant_model=draft)`` (Leviathan-style token-level
speculative decoding, batch size 1; arXiv 2211.17192) with the assistant's own defaults for the
number of draft tokens (transformers 5.x: up to 20 per call under a constant schedule, the chain
stopped after a token of draft confidence below 0.4), so the comparison is against what a user
gets out of the box. Everything that would change the output
law is switched off: no top-k / top-p / repetition penalty; no EOS stop (exactly
`max_new_tokens` tokens) unless an `eos_token_id` is given, as for `engine.decode`.

The assistant's own settings (transformers' `num_assistant_tokens`, `num_assistant_tokens_schedule`,
`assistant_confidence_threshold`, read from the assistant's generation_config) are given to one
call by `assistant_settings`, and FR-Spec's draft vocabulary by `assistant_head_subset`: the
peer at its own best is a sweep over them (docs/real_models.md).

Forward passes are counted with forward hooks on both models (generate calls the modules
directly). A pre-hook on the target also reads where each target call starts (its first position
id): call i emits the tokens between its start and the next call's, so the peer's accepted length
tau of every call is counted, not estimated. Its first target call reads the prompt together with
the first candidates (transformers' assisted generation has no separate prefill).
"""

from __future__ import annotations

import contextlib
import logging
import time
import types

import torch

from ..empirical.engine import DecodeResult, DecodeStats
from ..empirical.validation import check_eos, check_positive, check_prompt, check_temperature
from ..empirical.model import CausalLM

__all__ = ["hf_assisted", "hf_generation_config", "call_tokens", "ForwardCounter", "assistant_settings",
           "assistant_head_subset", "ASSISTANT_FIELDS"]

#: The assistant's generation_config fields `assistant_settings` sets: keyword -> field (read-only).
ASSISTANT_FIELDS = types.MappingProxyType({"num_assistant_tokens": "num_assistant_tokens",
                                           "schedule": "num_assistant_tokens_schedule",
                                           "confidence": "assistant_confidence_threshold"})


def hf_generation_config(max_new_tokens: int, temperature: float, eos_token_id=None):
    """A `GenerationConfig` for plain sampling at `temperature` (greedy at 0), no stopping but
    at `eos_token_id` (an id or a list of ids; None: none). None is passed as an empty list:
    generate fills a None field from the model's own generation config, so a model shipped with
    an EOS id would stop there while `engine.decode` goes on."""
    from transformers import GenerationConfig

    sampling = temperature > 0
    return GenerationConfig(max_new_tokens=max_new_tokens,
                            do_sample=sampling, temperature=temperature if sampling else None,
                            top_k=0 if sampling else None, top_p=1.0 if sampling else None,
                            repetition_penalty=1.0, eos_token_id=[] if eos_token_id is None else eos_token_id,
                            pad_token_id=0 if eos_token_id is None else ([eos_token_id] if isinstance(
                                eos_token_id, int) else eos_token_id)[0])


# transformers' own assistant call (`AssistedCandidateGenerator` passes a generation config AND
# min/max_new_tokens to the assistant's generate) logs a deprecation notice a caller cannot act on;
# matched by message, so every other notice still shows.
_ASSISTANT_NOTICE = "together with generation-related arguments"


class _DropAssistantNotice(logging.Filter):
    def filter(self, record) -> bool:
        return _ASSISTANT_NOTICE not in record.getMessage()


@contextlib.contextmanager
def _quiet_assistant_notice():
    """Inside: transformers' notice about its own assistant call dropped, every other one as before."""
    logger, drop = logging.getLogger("transformers.generation.utils"), _DropAssistantNotice()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


@contextlib.contextmanager
def assistant_settings(draft: CausalLM, **settings):
    """Inside: `draft`'s generation_config carries the given assistant settings (keywords of
    `ASSISTANT_FIELDS`; None keeps transformers' value). On exit every field is restored, so one
    method's settings (and what the heuristic schedule writes back into num_assistant_tokens
    after a call) never reach another method that shares the draft. Yields that generation_config
    (inside, after a call, its num_assistant_tokens is the heuristic schedule's carried length).

    Raises:
        TypeError: a keyword that is not an assistant setting.
    """
    unknown = set(settings) - set(ASSISTANT_FIELDS)
    if unknown:
        raise TypeError(f"{', '.join(sorted(unknown))}: not an assistant setting ({', '.join(ASSISTANT_FIELDS)})")
    config = draft.model.generation_config
    saved = {field: getattr(config, field, None) for field in ASSISTANT_FIELDS.values()}
    try:
        for key, value in settings.items():
            if value is not None:
                setattr(config, ASSISTANT_FIELDS[key], value)
        yield config
    finally:
        for field, value in saved.items():
            setattr(config, field, value)


class _SubsetHead(torch.nn.Module):
    """An output layer over the token ids S only: logits [..., V] with -inf outside S (FR-Spec,
    arXiv 2502.14856), as `CausalLM.with_head_subset` computes them for our drafters."""

    def __init__(self, ids: torch.Tensor, head: torch.nn.Module, vocab_size: int):
        super().__init__()
        self.ids, self.head, self.vocab_size = ids, head, vocab_size

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        part = self.head(hidden)  # [..., |S|]
        out = part.new_full((*part.shape[:-1], self.vocab_size), float("-inf"))  # [..., V]
        return out.index_copy_(-1, self.ids.to(part.device), part)


@contextlib.contextmanager
def assistant_head_subset(draft: CausalLM, subset: torch.Tensor | None):
    """Inside: `draft`'s module computes its logits over the ids `subset` [|S|] only (the rest
    -inf), so transformers' assistant drafts from q over S and its speculative sampling reads that
    q (lossless, as for our drafters); None changes nothing. The output layer is restored on exit."""
    if subset is None:
        yield
        return
    view = draft.with_head_subset(subset)
    ids, head = view.head_subset, view.head_subset_layer
    full = draft.model.get_output_embeddings()
    draft.model.set_output_embeddings(_SubsetHead(ids, head, draft.vocab_size))
    try:
        yield
    finally:
        draft.model.set_output_embeddings(full)


class ForwardCounter:
    """Counts calls of a module's forward (a forward hook) and records where each call starts
    (its first position id, or the cache length when none is passed), how many tokens it feeds
    (a forward pre-hook) and its wall seconds (perf_counter between the two hooks; on CUDA
    without a synchronise, so host-side time only); removable.

    Attributes (one entry per forward, in call order): count: int, the number of forwards;
    starts: list[int], the position of each forward's first token; fed: list[int], tokens fed;
    seconds: list[float], wall seconds of each forward.
    """

    def __init__(self, module: torch.nn.Module):
        self.count = 0
        self.starts, self.fed, self.seconds = [], [], []
        self._began = 0.0
        self._handles = [module.register_forward_hook(self._hook),
                         module.register_forward_pre_hook(self._pre_hook, with_kwargs=True)]

    def _hook(self, module, args, output):
        self.count += 1
        self.seconds.append(time.perf_counter() - self._began)

    def _pre_hook(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        positions, cache = kwargs.get("position_ids"), kwargs.get("cache")
        if positions is not None:
            start = int(positions.reshape(-1)[0])
        else:
            start = int(cache.get_seq_length()) if cache is not None else 0
        self.starts.append(start)
        self.fed.append(int(ids.shape[-1]) if ids is not None else 0)
        self._began = time.perf_counter()

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


def call_tokens(starts: list[int], prompt_length: int, final_length: int) -> list[int]:
    """Tokens emitted by each target call of assisted generation, from where each call starts.

    Call i feeds the last emitted token (not yet cached) at position starts[i] and its candidates
    after it; the cache is cropped to the accepted prefix, so call i + 1 starts where call i's
    emitted tokens end: call i emits starts[i + 1] - starts[i] tokens (call 0, which also reads the
    prompt, emits starts[1] + 1 - prompt_length), the last call up to `final_length`.

    Args:
        starts: the first position id of every target call, in order (>= 1 call).
        prompt_length: n, the prompt's tokens. final_length: n + generated tokens.

    Returns:
        list of ints >= 1, one per call, summing to final_length - prompt_length.

    Raises:
        ValueError: starts that are not those of assisted generation (a call emitting nothing).
    """
    ends = [prompt_length - 1] + list(starts[1:]) + [final_length - 1]
    out = [b - a for a, b in zip(ends, ends[1:])]
    if not starts or any(count < 1 for count in out):
        raise ValueError(f"starts: {starts} are not the call starts of one assisted generation "
                         f"(prompt {prompt_length}, final length {final_length})")
    return out


def _padded(tokens: torch.Tensor, N: int, eos):
    """(tokens [1, N], lengths [1]) from generate's new tokens [1, n], n = N unless it stopped at
    EOS: padded with the EOS id, as `engine.decode` pads a row after EOS."""
    lengths = torch.tensor([tokens.shape[1]], dtype=torch.long)
    if tokens.shape[1] < N:
        tokens = torch.cat([tokens, tokens.new_full((1, N - tokens.shape[1]), int(eos[0]))], 1)
    return tokens, lengths


def _check_models(target, draft, prompt_lookup_num_tokens) -> None:
    """TypeError / ValueError naming the argument: models that `hf_assisted` cannot run or count."""
    if not isinstance(target, CausalLM):
        raise TypeError(f"target: expected a CausalLM, got {type(target).__name__}")
    if draft is None and prompt_lookup_num_tokens is None:
        raise ValueError("draft: None needs prompt_lookup_num_tokens")
    if draft is not None and not isinstance(draft, CausalLM):
        raise TypeError(f"draft: expected a CausalLM, got {type(draft).__name__}")
    if draft is not None and draft.model is target.model:
        raise ValueError("draft: the same module as the target; its calls could not be told apart "
                         "(pass a copy, e.g. copy.deepcopy(target))")


def hf_assisted(target: CausalLM, draft: CausalLM | None, prompt_ids, max_new_tokens: int,
                temperature: float = 0.0, *, seed: int = 0, prompt_lookup_num_tokens: int | None = None,
                eos_token_id=None) -> DecodeResult:
    """``target.model.generate(prompt, assistant_model=draft.model)`` timed and counted.

    Args:
        target, draft: `CausalLM`s (draft None with `prompt_lookup_num_tokens`: transformers'
            prompt-lookup decoding instead of a draft model).
        prompt_ids: int [n] or [1, n] (batch size 1: transformers' assisted generation refuses more).
        max_new_tokens: N >= 1. temperature: >= 0 (0: greedy). seed: torch.manual_seed before
            sampling. eos_token_id: None, or the id(s) generate stops at (as `engine.decode`'s).

    Returns:
        `DecodeResult`: tokens int64 [1, N] (after an EOS stop, padded with the EOS id), lengths
        int64 [1] (the tokens generated); stats with forward counts, iterations = target calls
        (the first also reads the prompt), `accepted_lengths` int64 [calls]: the taus per
        iteration (the accepted candidates tau of every call), counted from the hooks (`call_tokens` - 1), wall time
        (prompt processing included); stats.logs["call_tokens"] (tokens emitted per call) and
        ["call_fed"] (tokens fed per call: prompt + candidates for call 0, 1 + candidates after).

    Raises:
        TypeError / ValueError: bad models, prompt with batch > 1, bad N or temperature.
    """
    _check_models(target, draft, prompt_lookup_num_tokens)
    prompt = check_prompt(prompt_ids, target)
    if prompt.shape[0] != 1:
        raise ValueError(f"prompt_ids: assisted generation takes batch size 1, got {prompt.shape[0]}")
    N = check_positive(max_new_tokens, "max_new_tokens")
    T = check_temperature(temperature, "temperature")
    eos = check_eos(eos_token_id, target.vocab_size, "cpu")  # int64 [k] or None
    kwargs = {"assistant_model": draft.model} if draft is not None else {
        "prompt_lookup_num_tokens": prompt_lookup_num_tokens}
    counters = [ForwardCounter(target.model)] + ([ForwardCounter(draft.model)] if draft is not None else [])
    try:
        torch.manual_seed(seed)
        start = time.perf_counter()
        with torch.inference_mode(), _quiet_assistant_notice():
            out = target.model.generate(prompt, attention_mask=torch.ones_like(prompt),
                                        generation_config=hf_generation_config(
                                            N, T, None if eos is None else eos.tolist()), **kwargs)
        wall = time.perf_counter() - start
    finally:
        for counter in counters:
            counter.remove()
    tokens, lengths = _padded(out[:, prompt.shape[1]:].cpu(), N, eos)  # [1, N], [1]
    target_calls = counters[0].count
    draft_calls = counters[1].count if draft is not None else 0
    target.forward_count += target_calls
    if draft is not None:
        draft.forward_count += draft_calls
    emitted = call_tokens(counters[0].starts, prompt.shape[1], out.shape[1])  # one per target call
    stats = DecodeStats("hf_assisted" if draft is not None else "hf_prompt_lookup", iterations=target_calls,
                        target_forwards=target_calls, draft_forwards=draft_calls,
                        accepted_lengths=torch.tensor(emitted, dtype=torch.long) - 1, wall_time_s=wall,
                        logs={"call_tokens": emitted, "call_fed": list(counters[0].fed)})
    return DecodeResult(tokens, stats, lengths)
