"""Does torch.compile make the engine's decode faster on a CPU? The bench's setting (static KV,
eager) against the same decode with both models' forwards compiled by inductor
(`torch.compile(model.forward, dynamic=False)`: one compile per forward shape), on the real pair.

Every prompt is decoded once untimed with the compiled forwards first (each of its shapes compiled,
the prefill's included), then eager and compiled decodes alternate, `--repeats` times each; the
JSON keeps every run and the ratio of the median decode tokens/s (compiled / eager) per method,
with the host's CPU and load average. Run it on a quiet machine only (the load average is recorded).
The file is written after each method; a second run of the same settings resumes it (its methods
kept), `--fresh` replaces it.

    python3 benchmarks/compile_cpu.py [--methods target_only,block] [--prompts 3] [--tokens 64]
        [--repeats 3] [--threads 2] [--tiny] [--output benchmarks/results/compile_cpu.json] [--fresh]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from verispec.atomic import resume_json, write_json_atomic  # noqa: E402
from verispec.empirical import engine, methods  # noqa: E402
from verispec.empirical.speedups.hardware import host_info  # noqa: E402
from verispec.reference import registry  # noqa: E402


class Compiled:
    """Inside: both models' forwards compiled (`torch.compile(..., dynamic=False)`); eager after."""

    def __init__(self, models, compiled: dict):
        self.models, self.compiled = models, compiled

    def __enter__(self):
        for lm in self.models:
            if id(lm) not in self.compiled:
                self.compiled[id(lm)] = torch.compile(lm.model.forward, dynamic=False)
            lm.model.forward = self.compiled[id(lm)]
        return self

    def __exit__(self, *exc):
        for lm in self.models:
            del lm.model.forward
        return False


def decode_rate(target, draft, prompt, name: str, tokens: int) -> float:
    """Decode tokens/s (after the iteration that reads the prompt) of one T = 0 decode."""
    entry = registry.spec(name)
    method = methods.get(name, **({"draft_length": 4} if entry.needs_draft else {}))
    result = engine.decode(target, draft if entry.needs_draft else None, prompt, method, tokens, 0.0,
                           uniforms=0, storage="static")
    first = int(result.stats.prompt_call_tokens[0])
    return (tokens - first) / (result.stats.wall_time_s - result.stats.prefill_time_s)


def _pair(args):
    if args.tiny:
        from profile_iteration import _tiny_pair

        target, draft = _tiny_pair(64)
        return target, draft, [torch.arange(1, 40).unsqueeze(0) % 64]
    from verispec.bench.prompts import humaneval_prompts
    from verispec.bench.weights import load_pair

    pair = load_pair(dtype=torch.bfloat16, progress=False)
    return pair.target, pair.draft, [pair.tokenizer(p["prompt"], return_tensors="pt").input_ids
                                     for p in humaneval_prompts(args.prompts)]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="target_only,block")
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tiny", action="store_true", help="tiny random models (a smoke run, no timing claim)")
    parser.add_argument("--output", default=os.path.join(ROOT, "benchmarks", "results", "compile_cpu.json"))
    parser.add_argument("--fresh", action="store_true", help="replace --output instead of resuming it")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    target, draft, prompts = _pair(args)
    settings = {"prompts": len(prompts), "tokens": args.tokens, "repeats": args.repeats,
                "threads": torch.get_num_threads(), "tiny": args.tiny}
    old = resume_json(args.output, settings, args.fresh)
    out = old or {**settings, "methods": {}, "torch": torch.__version__, "load_average_before": list(os.getloadavg()),
                  "ratio_is": "derived: median compiled decode tokens/s / median eager decode tokens/s, alternated runs",
                  **host_info("cpu")}
    compiled = {}
    for name in args.methods.split(","):
        if name in out["methods"]:
            print(f"{name}: kept from {args.output}")
            continue
        out["methods"][name] = measure_method(target, draft, prompts, name, args, compiled)
        out["load_average_after"] = list(os.getloadavg())
        write_json_atomic(args.output, out)
    return out


def measure_method(target, draft, prompts, name: str, args, compiled: dict) -> dict:
    """One method's eager and compiled decode rates, alternated, and their median ratio."""
    runs = {"eager": [], "compiled": [], "compile_s": 0.0}
    for prompt in prompts:
        start = time.perf_counter()
        with Compiled([target, draft], compiled):  # compiles every shape of this prompt's decode
            decode_rate(target, draft, prompt, name, args.tokens)
        runs["compile_s"] += time.perf_counter() - start
        for _ in range(args.repeats):
            runs["eager"].append(decode_rate(target, draft, prompt, name, args.tokens))
            with Compiled([target, draft], compiled):
                runs["compiled"].append(decode_rate(target, draft, prompt, name, args.tokens))
    runs["ratio_compiled_over_eager"] = statistics.median(runs["compiled"]) / statistics.median(runs["eager"])
    print(f"{name}: compiled / eager decode tokens/s {runs['ratio_compiled_over_eager']:.3f} "
          f"(medians of {len(runs['eager'])} runs; compiling took {runs['compile_s']:.0f} s)")
    return runs


if __name__ == "__main__":
    main()
