"""Run one parsed bench method on one prompt: the only place that maps a `BenchMethod` to a decoder.

Every method but the transformers peers decodes through the one engine
(`verispec.empirical.engine.decode`) or its wrappers (`verispec.empirical.decode`,
`verispec.empirical.trees`, `verispec.empirical.ouroboros`); `run_method` is kept as one entry
point so that it can be replaced as a whole.
"""

from __future__ import annotations

from ..empirical import decode, methods
from ..empirical.engine import decode as decode_engine
from .spec import (ADAPTIVE_METHODS, PHRASE_METHODS, TREE_METHODS, USER_METHOD, BenchMethod,
                   draft_vocabulary)

__all__ = ["run_method"]


def run_method(spec: BenchMethod, pair, prompt, config, T: float, seed: int, pools: dict):
    """Decode `config.max_new_tokens` tokens from prompt int64 [1, n] with method `spec`, its
    target's linear layers in the method's layout (``lin=``: `verispec.empirical.speedups.linear_layout`).

    Args:
        spec: a parsed `BenchMethod`. pair: the `ModelPair` it decodes with (``dq=8``: the int8
            draft already swapped in, `QuantizedDrafts.pair_for`). config: a `BenchConfig` (reads
            max_new_tokens, and draft_length / num_paths for a user's Method). T: temperature.
            seed: the uniforms' seed. pools: {(label, T): PhrasePool}, kept warm across prompts.

    Returns:
        the decoder's `DecodeResult` (tokens int64 [1, N] and its stats).
    """
    from ..empirical.speedups.linear_layout import linear_layout

    with linear_layout(pair.target.model, spec.linear_layout):  # "xw": changes nothing
        return _run_in_layout(spec, pair, prompt, config, T, seed, pools)


def _run_in_layout(spec: BenchMethod, pair, prompt, config, T: float, seed: int, pools: dict):
    """`run_method` in the layout already set."""
    N = config.max_new_tokens
    if spec.name == "target_only":
        return decode.target_only(pair.target, prompt, N, T, uniforms=seed)
    if spec.name in ("hf", "hf_prompt_lookup"):
        from .peer import hf_assisted

        if spec.name == "hf":
            return hf_assisted(pair.target, pair.draft, prompt, N, T, seed=seed)
        return hf_assisted(pair.target, None, prompt, N, T, seed=seed, prompt_lookup_num_tokens=10)
    if spec.name in TREE_METHODS:
        from ..empirical.trees import tree_speculative

        return tree_speculative(pair.target, pair.draft, prompt, N, tree=TREE_METHODS[spec.name],
                                node_budget=spec.node_budget, temperature=T, uniforms=seed, storage="sequence")
    if spec.name in PHRASE_METHODS:
        from ..empirical.ouroboros import (PhrasePool, lookahead_speculative, ouroboros_phrase_speculative,
                                           ouroboros_speculative)

        pool = pools.setdefault((spec.label, T), PhrasePool())
        if spec.name == "ouroboros_phrase":
            return ouroboros_phrase_speculative(pair.target, pair.draft, prompt, N, pool=pool,
                                                draft_length=spec.draft_length, num_candidates=spec.num_paths,
                                                guess_set=spec.guess_set, window=spec.window, temperature=T,
                                                uniforms=seed)
        if spec.name == "lookahead":
            return lookahead_speculative(pair.target, prompt, N, pool=pool, num_candidates=spec.num_paths,
                                         window=spec.window, temperature=T, uniforms=seed)
        return ouroboros_speculative(pair.target, pair.draft, prompt, N, pool=pool, draft_length=spec.draft_length,
                                     num_candidates=spec.num_paths, window=spec.window, temperature=T,
                                     uniforms=seed)
    if spec.name == USER_METHOD:  # a user's reference Method through the adapter
        from ..reference.methods import load

        method = load(spec.label, "methods", draft_length=config.draft_length, num_paths=config.num_paths)
        return decode_engine(pair.target, pair.draft, prompt, method, N, T, uniforms=seed, storage="sequence")
    if spec.name == "prompt_lookup":
        method = methods.get("prompt_lookup", draft_length=spec.draft_length, max_ngram=3)
        return decode_engine(pair.target, None, prompt, method, N, T, uniforms=seed, storage="sequence")
    vocab = draft_vocabulary(spec, pair)
    if spec.name in ADAPTIVE_METHODS:
        method = methods.get(spec.name, draft_length=spec.draft_length, draft_vocab=vocab,
                             max_draft_length=spec.max_draft_length or None,
                             threshold=spec.confidence_percent / 100, schedule=spec.schedule,
                             verifier=spec.verifier, guess_length=spec.guess_length)
        return decode_engine(pair.target, pair.draft, prompt, method, N, T, uniforms=seed, storage="sequence")
    if spec.name in methods.WALK_METHODS:
        method = methods.get(spec.name, draft_length=spec.draft_length, num_paths=spec.num_paths, draft_vocab=vocab,
                             **({"truncation": spec.truncation} if spec.truncation else {}))
        return decode_engine(pair.target, pair.draft, prompt, method, N, T, uniforms=seed, storage="sequence")
    if vocab is not None:
        method = methods.get(spec.name, draft_length=spec.draft_length, num_paths=spec.num_paths, draft_vocab=vocab)
        return decode_engine(pair.target, pair.draft, prompt, method, N, T, uniforms=seed, storage="sequence")
    return decode.speculative(pair.target, pair.draft, prompt, N, spec.name, draft_length=spec.draft_length,
                              num_paths=spec.num_paths, temperature=T, uniforms=seed, storage="sequence")
