"""The installed vLLM's own rejection sampler, checked by the chain harness at two depths.

vLLM's v1 engine verifies drafts with ``vllm.v1.sample.rejection_sampler`` (Leviathan et al. 2023,
arXiv:2211.17192, Algorithm 1): a draft token x is accepted while p(x) / q(x) >= u (float64 u), the
recovered token at the first rejection is argmax_v max(p - q, 0)(v) / E(v) with E ~ Exp(1) (one
race per request), and the bonus token is sampled beforehand by the engine's ordinary `Sampler`.
Without draft probabilities (n-gram drafts, ``draft_probs=None``) q is taken as the point mass on
the drafted token: accept with probability p(x), else draw from p with x removed. That rule emits
exactly p for ANY drafted token (P(y) = q(y) p(y) + sum_{x != y} q(x) (1 - p(x)) p(y) / (1 - p(x))
= p(y)), so the harness's drafts from q need no change to check it.

Three modes (`MODES`), each an adapter to `verispec.testing.assert_sampler_lossless`'s signature:

- ``function``: ``rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len,
  cu_num_draft_tokens, draft_probs, target_logits, bonus_token_ids, sampling_metadata)`` with the
  draft probabilities; all requests random, the global torch RNG seeded once per batch from the
  harness's generator (inside ``torch.random.fork_rng``); the bonus token drawn from the last
  target position, as the engine's sampler draws it.
- ``ngram``: the same function with ``draft_probs=None``.
- ``module``: ``RejectionSampler.forward(SpecDecodeMetadata, draft_probs, logits, SamplingMetadata)``
  with the batch laid out as the engine lays it out (each request's L draft positions then its bonus
  position in one logits tensor; the bonus token sampled by vLLM's own `Sampler`). Every batch
  mixes greedy and random requests: after every `DECOY_EVERY`-th row the adapter inserts a copy of
  it in the other mode (temperature 0 next to a random row, a random one next to a greedy row).
  Random requests carry temperatures other than 1 (`TEMPERATURES`; the logits are T log p, so the
  law after vLLM divides by T is still p), and every `GENERATOR_EVERY`-th request its own
  ``torch.Generator`` (vLLM's per-request seed) while the others share the global RNG. A greedy
  copy's output is known exactly (the draft while it equals the target's argmax, then the argmax):
  any difference is counted in `ModuleSampler.greedy_mismatches` and fails the mode.

The kernels: `verispec.integrations.vllm_api.prepare_cpu_kernels` installs the platform's kernel
overrides as vLLM's CPU worker does at start-up (C++ ops on a CPU build).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..testing import gtest
from . import vllm_api
from .verdict import SamplingVerdict, run_sampler_check

__all__ = ["MODES", "TEMPERATURES", "GENERATOR_EVERY", "DECOY_EVERY", "function_sampler", "ModuleSampler",
           "check_rejection_sampler"]

#: The modes of ``verispec check-sampler vllm``, with what each drives.
MODES = {
    "function": "rejection_sample(...) with the draft probabilities",
    "ngram": "rejection_sample(...) with draft_probs=None (n-gram drafts)",
    "module": "RejectionSampler.forward(SpecDecodeMetadata, draft_probs, logits, SamplingMetadata), "
              "greedy and random requests mixed, per-request temperatures and generators",
}
#: Temperatures given to random requests in the module mode, in turn by batch position.
TEMPERATURES = (0.5, 0.8, 1.5, 2.0)
#: In the module mode, every GENERATOR_EVERY-th request (from the second) has its own generator.
GENERATOR_EVERY = 3
#: In the module mode, a request of the other kind (greedy / random) follows every DECOY_EVERY-th row.
DECOY_EVERY = 4


def _metadata(api, temperature, generators, all_random: bool):
    """vLLM's SamplingMetadata for a batch without penalties, top-k/top-p or logprobs."""
    import torch  # optional dependency

    batch = temperature.shape[0]
    zeros = torch.zeros(batch, dtype=torch.float32)
    return api.get("SamplingMetadata")(
        temperature=temperature, all_greedy=False, all_random=all_random, top_p=None, top_k=None,
        generators=generators, max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
        frequency_penalties=zeros, presence_penalties=zeros, repetition_penalties=torch.ones(batch),
        output_token_ids=[[] for _ in range(batch)], allowed_token_ids_mask=None, bad_words_token_ids={},
        logitsprocs=api.get("LogitsProcessors")())


def function_sampler(api, with_draft_probs: bool = True):
    """``rejection_sample`` in the harness's signature (backend "torch", float32 probabilities).

    Args:
        api: a `vllm_api.VllmApi`. with_draft_probs: False passes ``draft_probs=None`` (n-gram drafts).

    Returns:
        ``fn(draft_ids [B, L], draft_probs [B, L, V], target_probs [B, L + 1, V], generator) -> [B, L + 1]``.
    """
    import torch  # optional dependency

    rejection_sample = api.get("rejection_sample")

    def sampler(draft_ids, draft_probs, target_probs, generator):
        B, L = draft_ids.shape
        bonus = torch.multinomial(target_probs[:, L].float(), 1, generator=generator)  # [batch, 1]
        seed = int(torch.randint(0, 2 ** 62, (1,), generator=generator))
        cu = torch.arange(1, B + 1, dtype=torch.int32) * L  # [batch]
        q = draft_probs.reshape(B * L, -1).float().contiguous() if with_draft_probs else None  # [B L, V]
        logits = torch.log(target_probs[:, :L].float()).reshape(B * L, -1)  # [B L, V]: softmax gives p back
        metadata = _metadata(api, torch.ones(B), {}, all_random=True)
        with torch.random.fork_rng(devices=[]), torch.inference_mode():
            torch.manual_seed(seed)
            out = rejection_sample(draft_ids.reshape(-1).to(torch.int32).contiguous(), [L] * B, L, cu, q, logits,
                                   bonus, metadata)
        return out.long()

    suffix = "" if with_draft_probs else "(draft_probs=None)"
    sampler.__qualname__ = vllm_api.ENTRY_POINTS["rejection_sample"] + suffix
    return sampler


def _interleave(B: int):
    """Batch positions of the B harness rows and of their copies (one after every DECOY_EVERY-th
    row) -> (harness positions [B], copy positions [D], copied rows [D]) as int64 numpy arrays."""
    rows = np.arange(B)
    harness = rows + (rows + DECOY_EVERY - 1) // DECOY_EVERY  # copies inserted before row i
    copied = rows[::DECOY_EVERY]
    return harness, harness[copied] + 1, copied


def _greedy_reference(draft_ids, target_probs):
    """The greedy rule's exact output: the draft while it equals the argmax, then the argmax -> [R, L + 1]."""
    L = draft_ids.shape[1]
    best = target_probs.argmax(-1)  # [R, L + 1]
    match = (draft_ids == best[:, :L]).cumprod(1)  # [R, L]
    tau = match.sum(1)  # [R]
    positions = np.arange(L + 1)[None, :]
    out = np.where(positions < tau[:, None], np.pad(draft_ids, ((0, 0), (0, 1))), -1)  # [R, L + 1]
    out[np.arange(len(tau)), tau] = best[np.arange(len(tau)), tau]
    return out


@dataclass
class ModuleSampler:
    """``RejectionSampler.forward`` driven as the engine batches it (see the module docstring), in the
    harness's signature. greedy_mismatches: greedy copies whose output differed from the argmax chain;
    greedy_checked: greedy copies checked."""

    api: object
    greedy_mismatches: int = 0
    greedy_checked: int = 0
    module: object = field(default=None, repr=False)

    def __post_init__(self):
        self.module = self.api.get("RejectionSampler")(self.api.get("Sampler")())
        self.__qualname__ = vllm_api.ENTRY_POINTS["RejectionSampler"] + ".forward"

    def _layout(self, R: int, L: int):
        """The engine's SpecDecodeMetadata pieces for R requests of L drafts each."""
        import torch  # optional dependency

        starts = torch.arange(R, dtype=torch.int32) * (L + 1)  # [R]
        target = (starts[:, None] + torch.arange(L, dtype=torch.int32)).reshape(-1)  # [R L]
        return dict(num_draft_tokens=[L] * R, cu_num_draft_tokens=torch.arange(1, R + 1, dtype=torch.int32) * L,
                    cu_num_sampled_tokens=torch.arange(1, R + 1, dtype=torch.int32) * (L + 1),
                    target_logits_indices=target, bonus_logits_indices=starts + L,
                    logits_indices=torch.arange(R * (L + 1), dtype=torch.int32))

    def _requests(self, draft_ids, target_probs, generator):
        """(source row [R], greedy [R] bool, temperature [R], generators, harness positions, copy positions)."""
        import torch  # optional dependency

        B = draft_ids.shape[0]
        harness, copies, copied = _interleave(B)
        R = B + len(copies)  # requests: the harness's rows and their copies
        source = np.empty(R, dtype=np.int64)
        source[harness], source[copies] = np.arange(B), copied
        greedy_law = bool((target_probs.max(-1).values == 1).all())  # a point-mass target: greedy requests
        greedy = np.full(R, greedy_law)
        greedy[copies] = not greedy_law
        temperature = np.where(greedy, 0.0, np.take(TEMPERATURES, np.arange(R) % len(TEMPERATURES)))
        own = np.flatnonzero(~greedy & (np.arange(R) % GENERATOR_EVERY == 1))
        seeds = torch.randint(0, 2 ** 62, (len(own),), generator=generator).tolist()
        generators = {int(r): torch.Generator().manual_seed(s) for r, s in zip(own, seeds)}
        return source, greedy, torch.tensor(temperature, dtype=torch.float32), generators, harness, copies

    def __call__(self, draft_ids, draft_probs, target_probs, generator):
        import torch  # optional dependency

        B, L = draft_ids.shape
        source, greedy, temperature, generators, harness, copies = self._requests(draft_ids, target_probs, generator)
        p = target_probs[torch.from_numpy(source)].float()  # [R, L + 1, V]
        scale = torch.where(torch.from_numpy(greedy), torch.ones(()), temperature)  # [R]
        logits = (torch.log(p) * scale[:, None, None]).reshape(-1, p.shape[-1])  # [R (L + 1), V]
        drafts = draft_ids[torch.from_numpy(source)]  # [R, L]
        metadata = self.api.get("SpecDecodeMetadata")(draft_token_ids=drafts.reshape(-1).to(torch.int32),
                                                      **self._layout(len(source), L))
        sampling = _metadata(self.api, temperature, generators, all_random=False)
        q = draft_probs[torch.from_numpy(source)].float().reshape(-1, p.shape[-1]).contiguous()  # [R L, V]
        seed = int(torch.randint(0, 2 ** 62, (1,), generator=generator))
        with torch.random.fork_rng(devices=[]), torch.inference_mode():
            torch.manual_seed(seed)
            out = self.module(metadata, q, logits, sampling).sampled_token_ids.long().numpy()  # [R, L + 1]
        checked = copies[greedy[copies]]
        if checked.size:
            expected = _greedy_reference(drafts.numpy()[checked], p.numpy()[checked])
            self.greedy_mismatches += int((out[checked] != expected).any(axis=1).sum())
            self.greedy_checked += int(checked.size)
        return out[harness]


def check_rejection_sampler(mode: str, *, tv: float = 0.05, alpha: float = gtest.ALPHA, power: float = gtest.POWER,
                            api=None, **harness) -> SamplingVerdict:
    """Run `assert_sampler_lossless` on the installed vLLM's rejection sampler in one of `MODES`.

    Args:
        mode: "function", "ngram" or "module" (`MODES`).
        tv, alpha, power: as in `assert_sampler_lossless` (power >= `power` at TV >= tv).
        api: a `vllm_api.VllmApi` (default `vllm_api.load()`).
        harness: further keyword arguments of `assert_sampler_lossless` (vocab_sizes, families, ...).

    Returns:
        a `SamplingVerdict` (float32 probabilities, as vLLM computes them). In the module mode a
        greedy copy that differs from the argmax chain fails the verdict (message says how many).

    Raises:
        ValueError: unknown mode. IntegrationError: vLLM or an entry point is missing.
    """
    import torch  # optional dependency

    if mode not in MODES:
        raise ValueError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")
    api = vllm_api.load() if api is None else api
    vllm_api.ensure_cpu_kernels(api)
    fn = ModuleSampler(api) if mode == "module" else function_sampler(api, with_draft_probs=mode == "function")
    harness.setdefault("dtype", torch.float32)
    verdict = run_sampler_check(fn, mode, tv=tv, alpha=alpha, power=power, **harness)
    if isinstance(fn, ModuleSampler) and fn.greedy_mismatches:
        note = (f"greedy requests in mixed batches: {fn.greedy_mismatches:,} of {fn.greedy_checked:,} differ from "
                "the target's argmax chain")
        verdict = replace(verdict, lossless=False, message=(verdict.message + "\n" + note).strip(), note=note)
    return verdict
