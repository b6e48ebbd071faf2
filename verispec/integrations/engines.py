"""Real engines' speculative decoding behind `verispec.testing.assert_engine_lossless`'s ``generate``.

Each adapter serves verispec's tiny pair (`verispec.testing.tiny_pair`) with the engine's own
speculative generation and only translates arguments: prompt ids in, the first N generated tokens
of independent requests out, plus the engine's acceptance counters where it keeps them.

- `TransformersEngine`: ``target.generate(prompt, assistant_model=draft, do_sample=True,
  max_new_tokens=N, temperature=T)``, one request per call (assisted generation takes batch size 1),
  the assistant set to draft `draft_length` tokens per iteration (``num_assistant_tokens``,
  schedule "constant", ``assistant_confidence_threshold`` 0: no early stop). transformers keeps no
  acceptance counter: the adapter reads the tokens its streamer receives per iteration (accepted + 1)
  and counts the assistant's forward calls (one per drafted token) with a forward hook. With
  ``do_sample=True`` the assistant samples from q (transformers has no greedy-draft mode then).
  ``speculative=False`` is the control: plain batched ``generate(do_sample=True)``.
- `VllmEngine`: ``vllm.LLM(target, speculative_config={"method": "draft_model", "model": draft,
  "num_speculative_tokens": L, "draft_sample_method": "probabilistic" | "greedy"})`` with the settings
  vLLM's CPU build needs (module `VLLM_SETTINGS`), every request a `TokensPrompt` with
  ``SamplingParams(temperature=T, max_tokens=N, ignore_eos=True, detokenize=False)``; every other
  request carries its own seed (vLLM's per-request generator), the rest share the engine's RNG. The
  counters are vLLM's own ``vllm:spec_decode_*`` metrics (``LLM.get_metrics()``), differenced around
  the call. ``speculative=False`` is the control.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass, field

import numpy as np

from ..testing.engine import EngineCounters, EngineSample, SpeculationClaim
from . import vllm_api

__all__ = ["TransformersEngine", "VllmEngine", "VLLM_SETTINGS", "VLLM_ENTRY_POINTS", "VLLM_METRICS"]

#: Environment vLLM's CPU build needs here (set with setdefault: a caller's value wins): a 1 GiB KV
#: cache, and the engine core in this process (so a test can plant a kernel in it).
VLLM_SETTINGS = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
#: What `VllmEngine` looks up in vLLM (see `vllm_api.load`).
VLLM_ENTRY_POINTS = {"LLM": "vllm.LLM", "SamplingParams": "vllm.SamplingParams",
                     "TokensPrompt": "vllm.inputs.TokensPrompt"}
#: vLLM's speculative-decoding metrics -> the `EngineCounters` field they fill.
VLLM_METRICS = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
                "vllm:spec_decode_num_accepted_tokens": "accepted_tokens",
                "vllm:spec_decode_num_accepted_tokens_per_pos": "accepted_per_position"}


class _IterationRecorder:
    """A transformers streamer: the first put is the prompt, each later one an iteration's tokens."""

    def __init__(self, drafted):
        self.drafted, self.iterations, self.started = drafted, [], False

    def put(self, value):
        if self.started:
            self.iterations.append((int(value.numel()), self.drafted[0]))
            self.drafted[0] = 0
        self.started = True

    def end(self):
        pass


def _hf_counters(iterations, draft_length: int) -> EngineCounters:
    """Counters from (tokens emitted, tokens drafted) per iteration."""
    drafting = [(emitted, drafted) for emitted, drafted in iterations if drafted]
    per_position = tuple(sum(emitted - 1 >= j for emitted, _ in drafting) for j in range(1, draft_length + 1))
    return EngineCounters(drafts=len(drafting), draft_tokens=sum(d for _, d in drafting),
                          accepted_tokens=sum(emitted - 1 for emitted, _ in drafting),
                          accepted_per_position=per_position)


@dataclass
class TransformersEngine:
    """transformers' assisted generation on a tiny pair (module docstring); ``generate`` is the callable."""

    pair: object
    draft_length: int = 2
    temperature: float = 1.0
    speculative: bool = True
    models: tuple = field(default=None, repr=False)

    def __post_init__(self):
        import torch  # optional dependency
        from transformers import AutoModelForCausalLM  # optional dependency

        target = AutoModelForCausalLM.from_pretrained(self.pair.target_path, dtype=torch.float32).eval()
        draft = AutoModelForCausalLM.from_pretrained(self.pair.draft_path, dtype=torch.float32).eval()
        draft.generation_config.num_assistant_tokens = self.draft_length
        draft.generation_config.num_assistant_tokens_schedule = "constant"
        draft.generation_config.assistant_confidence_threshold = 0.0
        self.models = (target, draft)

    @property
    def claim(self) -> SpeculationClaim | None:
        return SpeculationClaim(self.draft_length, draft_capped=True) if self.speculative else None

    def _options(self, num_tokens: int) -> dict:
        return dict(do_sample=True, temperature=self.temperature, max_new_tokens=num_tokens, min_new_tokens=None)

    def generate(self, prompt_ids, num_samples: int, num_tokens: int, seed: int) -> EngineSample:
        import torch  # optional dependency

        target, draft = self.models
        prompt = torch.tensor([list(prompt_ids)], dtype=torch.long)  # [1, P]
        threads = torch.get_num_threads()
        with torch.random.fork_rng(devices=[]), torch.inference_mode():
            torch.manual_seed(seed)
            torch.set_num_threads(1)  # tiny models: thread hand-offs would dominate
            try:
                if not self.speculative:
                    return EngineSample(self._plain(prompt, num_samples, num_tokens))
                return self._assisted(prompt, num_samples, num_tokens)
            finally:
                torch.set_num_threads(threads)

    def _plain(self, prompt, num_samples: int, num_tokens: int) -> np.ndarray:
        target = self.models[0]
        rows = []
        for start in range(0, num_samples, 4096):
            batch = prompt.repeat(min(4096, num_samples - start), 1)
            rows.append(target.generate(batch, **self._options(num_tokens))[:, prompt.shape[1]:].numpy())
        return np.concatenate(rows)

    def _assisted(self, prompt, num_samples: int, num_tokens: int) -> EngineSample:
        target, draft = self.models
        drafted = [0]
        hook = draft.register_forward_hook(lambda module, args, output: drafted.__setitem__(0, drafted[0] + 1))
        out, iterations = np.empty((num_samples, num_tokens), dtype=np.int64), []
        try:
            for i in range(num_samples):
                recorder = _IterationRecorder(drafted)
                tokens = target.generate(prompt, assistant_model=draft, streamer=recorder, **self._options(num_tokens))
                out[i] = tokens[0, prompt.shape[1]:].numpy()
                iterations += recorder.iterations
        finally:
            hook.remove()
        return EngineSample(out, _hf_counters(iterations, self.draft_length))


def _vllm_counters(metrics, draft_length: int) -> dict:
    """{EngineCounters field: value} from ``LLM.get_metrics()`` (fields absent from it are left out)."""
    found = {}
    for metric in metrics:
        name = VLLM_METRICS.get(getattr(metric, "name", None))
        if name == "accepted_per_position":
            found[name] = tuple(int(v) for v in metric.values[:draft_length])
        elif name is not None:
            found[name] = int(metric.value)
    return found


@dataclass
class VllmEngine:
    """vLLM's engine on a tiny pair (module docstring); ``generate`` is the callable. ``close()``
    releases the engine. entry_points: what is looked up in vLLM (default `VLLM_ENTRY_POINTS`)."""

    pair: object
    draft_length: int = 2
    temperature: float = 1.0
    speculative: bool = True
    greedy_draft: bool = False
    seed: int = 0
    entry_points: dict = field(default=None, repr=False)
    llm: object = field(default=None, repr=False)

    def __post_init__(self):
        for key, value in VLLM_SETTINGS.items():
            os.environ.setdefault(key, value)
        self.api = vllm_api.load(VLLM_ENTRY_POINTS if self.entry_points is None else self.entry_points)
        spec = None
        if self.speculative:
            spec = {"method": "draft_model", "model": self.pair.draft_path, "num_speculative_tokens": self.draft_length,
                    "draft_sample_method": "greedy" if self.greedy_draft else "probabilistic"}
        self.llm = self.api.get("LLM")(model=self.pair.target_path, skip_tokenizer_init=True, dtype="float32",
                                       distributed_executor_backend="uni", speculative_config=spec,
                                       disable_log_stats=False, seed=self.seed, max_model_len=64, enforce_eager=True)

    @property
    def claim(self) -> SpeculationClaim | None:
        if not self.speculative:
            return None
        return SpeculationClaim(self.draft_length, greedy_draft=self.greedy_draft, first_token_from_target=True)

    def _counters(self) -> dict:
        return _vllm_counters(self.llm.get_metrics(), self.draft_length)

    def generate(self, prompt_ids, num_samples: int, num_tokens: int, seed: int) -> EngineSample:
        params, prompt = self.api.get("SamplingParams"), self.api.get("TokensPrompt")
        seeds = np.random.default_rng(seed).integers(0, 2 ** 31, num_samples)
        requests = [params(temperature=self.temperature, max_tokens=num_tokens, ignore_eos=True, detokenize=False,
                           seed=int(seeds[i]) if i % 2 == 0 else None) for i in range(num_samples)]
        before = self._counters()
        outputs = self.llm.generate([prompt(prompt_token_ids=list(prompt_ids))] * num_samples, requests,
                                    use_tqdm=False)
        after = self._counters()
        tokens = np.array([list(o.outputs[0].token_ids) for o in outputs], dtype=np.int64)
        counters = None
        if self.speculative and set(after) >= {"drafts", "draft_tokens", "accepted_tokens"}:
            delta = {k: (tuple(a - b for a, b in zip(v, before.get(k, (0,) * len(v)))) if isinstance(v, tuple)
                         else v - before.get(k, 0)) for k, v in after.items()}
            counters = EngineCounters(**delta)
        return EngineSample(tokens, counters)

    def close(self) -> None:
        """Shut the engine down and drop it (vLLM holds its KV cache until then)."""
        if self.llm is not None:
            engine = getattr(self.llm, "llm_engine", None)
            shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
            if callable(shutdown):
                shutdown()
            self.llm = None
            gc.collect()
