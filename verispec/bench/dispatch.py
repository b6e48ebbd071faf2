"""Run one parsed bench method on one prompt: the only place that maps a `BenchMethod` to a decoder.

Every method decodes through the one engine entry point (`verispec.empirical.engine.decode`),
built by name from the registry (`verispec.empirical.methods.get`); only the transformers peers
(`verispec.bench.peer`) run elsewhere.
"""

from __future__ import annotations

import torch

from ..empirical import methods
from ..empirical.engine import decode
from ..empirical.drafters.phrases import PhrasePool
from ..empirical.speedups.policy import PolicyMemory
from ..empirical.speedups.linear_layout import model_layout
from ..reference import registry
from ..reference.methods import load
from .peer import assistant_head_subset, assistant_settings, hf_assisted
from .spec import PEER_PARAMS, USER_METHOD, BenchMethod, draft_vocabulary

__all__ = ["run_method", "build_method", "bench_storage", "eos_token_id"]


def run_method(spec: BenchMethod, pair, prompt, config, T: float, seed: int, pools: dict, *,
               storage: str | None = None):
    """Decode `config.max_new_tokens` tokens from prompt int64 [1, n] with method `spec`, its
    target's linear layers in the method's layout (``lin=``: `verispec.empirical.speedups.linear_layout`).

    Args:
        spec: a parsed `BenchMethod`. pair: the `ModelPair` it decodes with (``dq=8``: the int8
            draft already swapped in, `QuantizedDrafts.pair_for`). config: a `BenchConfig` (reads
            max_new_tokens, stop_at_eos, and draft_length / num_paths for a user's Method). T: temperature.
            seed: the uniforms' seed. pools: {(label, T): state kept across prompts}: a phrase
            method's PhrasePool; ``hf:sched=heuristic``'s carried num_assistant_tokens (an int); a
            policy-"auto" method's `PolicyMemory`. storage (keyword only): the engine's KV storage (default
            `bench_storage` of the target's device; the peers ignore it).

    Returns:
        the decoder's `DecodeResult` (tokens int64 [1, N], padded after EOS with stop_at_eos;
        lengths; its stats).
    """
    N, eos = config.max_new_tokens, eos_token_id(config, pair)
    with model_layout(pair.target, spec.linear_layout):  # "xw": changes nothing
        if spec.name == "hf":
            return _run_peer(spec, pair, prompt, config, T, seed, pools)
        if spec.name == "hf_prompt_lookup":
            return hf_assisted(pair.target, None, prompt, N, T, seed=seed, prompt_lookup_num_tokens=10,
                               eos_token_id=eos)
        method, needs_draft = build_method(spec, pair, config, T, pools)
        graphs = getattr(config, "graphs", True)
        return decode(pair.target, pair.draft if needs_draft else None, prompt, method, N, T, uniforms=seed,
                      storage=storage or bench_storage(pair.target.device, graphs), eos_token_id=eos,
                      graphs=graphs)


def bench_storage(device, graphs=True) -> str:
    """The KV storage every engine method (target-only included) decodes on in the bench: "static"
    where steps are captured (CUDA; or `graphs` "simulate", the CPU simulation of capture and
    replay, `verispec.empirical.speedups.graphs`): its fixed shapes let the draft and verify steps
    be captured and a step reads nothing back. "sequence" (one growing cache per layer, the bench's
    B = 1) on a CPU otherwise: nothing is captured there, and the static KV's slot-wide attention
    bought no decode speed (docs/engine.md gives the measured A/Bs)."""
    return "static" if torch.device(device).type == "cuda" or graphs == "simulate" else "sequence"


def _run_peer(spec: BenchMethod, pair, prompt, config, T: float, seed: int, pools: dict):
    """transformers' assisted generation with the spec's assistant settings and draft vocabulary.
    Under the heuristic schedule, the length it carries from one call to the next on one assistant
    (transformers writes it back into the assistant's generation_config) is kept per (label, T) in
    `pools`, as one user's process would carry it across prompts; another method sharing the draft
    never sees it (`assistant_settings` restores the config)."""
    settings = {p.name: spec.param(p.name) for p in PEER_PARAMS}
    carried = pools.get((spec.label, T))
    if settings["schedule"] == "heuristic" and isinstance(carried, int):
        settings["num_assistant_tokens"] = carried
    vocab = draft_vocabulary(spec, pair)
    subset = None if vocab is None else vocab.subset(pair.draft.vocab_size, prompt)
    with assistant_settings(pair.draft, **settings) as generation, assistant_head_subset(pair.draft, subset):
        result = hf_assisted(pair.target, pair.draft, prompt, config.max_new_tokens, T, seed=seed,
                             eos_token_id=eos_token_id(config, pair))
        if settings["schedule"] == "heuristic":
            pools[spec.label, T] = int(generation.num_assistant_tokens)
    return result


def eos_token_id(config, pair):
    """The EOS id every method of a run stops at: the pair's tokenizer's with
    `config.stop_at_eos`, else None (exactly max_new_tokens tokens).

    Raises:
        ValueError: stop_at_eos with a tokenizer that has no eos_token_id.
    """
    if not getattr(config, "stop_at_eos", False):
        return None
    eos = getattr(getattr(pair, "tokenizer", None), "eos_token_id", None)
    if eos is None:
        raise ValueError("stop_at_eos: the tokenizer has no eos_token_id")
    return eos


def build_method(spec: BenchMethod, pair, config, T: float, pools: dict):
    """(the method `spec` names, built with its parameters and options; whether it runs the draft).
    A phrase-pool method gets the pool kept for (label, T) in `pools`."""
    if spec.name == USER_METHOD:  # a user's reference Method through the adapter
        return load(spec.label, "methods", draft_length=config.draft_length, num_paths=config.num_paths), True
    entry = registry.spec(spec.name)
    params = dict(spec.params)
    if params.get("policy") == "auto":
        if params.get("costs") is None:
            raise ValueError(f"methods: {spec.label!r} runs the cost policy (pol=auto) but has no cost model: "
                             "attach the run's (verispec.bench.costs.CostModels.attach) or give pol=fixed")
        params["memory"] = pools.setdefault((spec.label, T), PolicyMemory())  # carried across prompts
    if entry.keeps_pool:
        params["pool"] = pools.setdefault((spec.label, T), _fresh_pool({**entry.defaults("torch"), **params}))
    return methods.get(spec.name, draft_vocab=draft_vocabulary(spec, pair), **params), entry.needs_draft


def _fresh_pool(params: dict) -> PhrasePool:
    """A pool for a phrase method's parameters: phrases of its phrase_length (the pool's default
    where it has none) and room for its guess set."""
    n = params.get("phrase_length") or PhrasePool().phrase_length
    return PhrasePool(n, max(20, params.get("guess_set") or 20))
