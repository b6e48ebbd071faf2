"""Host synchronisations per iteration of every method on the engine, counted, not typed.

For each method of the registry, one prompt (B = 1) decoded on tiny random models with the bench's
setting (the static KV, `engine.decode(storage="static")`, fresh uniforms `TorchUniforms`), under
`verispec.empirical.speedups.syncs.SyncCounter`: every `.item()` / `int(t)` / `bool(t)`, `.tolist()`,
`.cpu()`, `nonzero`, boolean indexing, `unique`, and tensor made from host data, per iteration
(`decode(on_step=...)` closes each span). The first iteration also sets up the call and reads the
prompt; the table gives it apart. A CPU counts the ops a GPU would wait at: the same code runs.

    python3 benchmarks/sync_counts.py [--tokens 24] [--output benchmarks/results/sync_counts.json]

prints the markdown table of docs/engine.md ("Host synchronisations per iteration"), which a test
compares with a fresh count.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
#: Parameters beyond the registry's defaults: the IS selection LPs over s = 5 tokens (any vocabulary).
PARAMS = {"khisti": {"truncation": 5}, "optimal_is": {"truncation": 5}}
#: The prompt: a repeat, so that the lookups find matches.
PROMPT = torch.tensor([[3, 17, 5, 40, 3, 17, 5, 40, 9, 1, 3, 17]])


def tiny_pair():
    """Two 2-layer Qwen2 models, vocabulary 64, seeded random weights (the draft a perturbed copy)."""
    import transformers

    from verispec.empirical.model import CausalLM

    def model(seed, noise):
        config = transformers.Qwen2Config(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                          num_key_value_heads=2, intermediate_size=64, max_position_embeddings=256,
                                          tie_word_embeddings=False)
        lm = CausalLM.from_config(config, seed=0)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for parameter in lm.model.parameters():
                parameter.add_(noise * parameter.std() * torch.randn(parameter.shape, generator=generator))
        return lm

    return model(1, 0.0), model(2, 0.1)


def count(target, draft, prompt, name: str, tokens: int, temperature: float) -> list[int]:
    """Host syncs of each iteration of one decode (the first: setup and prompt included)."""
    from verispec.empirical import engine, methods
    from verispec.empirical.speedups.syncs import SyncCounter
    from verispec.reference import registry

    counter = SyncCounter()
    method = methods.get(name, **PARAMS.get(name, {}))
    with counter:
        engine.decode(target, draft if registry.spec(name).needs_draft else None, prompt, method, tokens, temperature,
                      uniforms=0, storage="static", on_step=lambda run: counter.mark())
    return counter.spans


def _span(values: list[int]) -> str:
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}-{high}"


def table(tokens: int = 24) -> dict:
    """{method: {"T=0": [per-iteration counts], "T=1": [...]}} for every torch method of the registry."""
    from verispec.empirical import methods

    target, draft = tiny_pair()
    return {name: {f"T={T:g}": count(target, draft, PROMPT, name, tokens, T) for T in (0.0, 1.0)}
            for name in methods.names()}


def markdown(counts: dict) -> str:
    """The docs' table: per method (in the registry's order), the first iteration's count and the
    range over the others."""
    from verispec.empirical import methods

    order = methods.names()
    lines = ["| method | T = 0: first iteration | T = 0: each later iteration | T = 1: first | T = 1: later |",
             "|---|---|---|---|---|"]
    for name in sorted(counts, key=lambda n: order.index(n) if n in order else len(order)):
        zero, one = counts[name]["T=0"], counts[name]["T=1"]
        lines.append(f"| `{name}` | {zero[0]} | {_span(zero[1:]) if len(zero) > 1 else '-'} | {one[0]} | "
                     f"{_span(one[1:]) if len(one) > 1 else '-'} |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--output", default=os.path.join(ROOT, "benchmarks", "results", "sync_counts.json"))
    args = parser.parse_args(argv)
    sys.path.insert(0, ROOT)
    from verispec.atomic import write_json_atomic

    torch.set_num_threads(1)
    counts = table(args.tokens)
    write_json_atomic(args.output, {"tokens": args.tokens, "batch": 1, "storage": "static", "counts": counts,
                                    "torch": torch.__version__,
                                    "what": "measured: host synchronisations per engine iteration (SyncCounter)"})
    print(markdown(counts))
    return counts


if __name__ == "__main__":
    main()
