"""Which KV storage should the bench decode on, on this host? The static KV against the growing
per-layer caches ("sequence"), alternated, on the bench's models and methods.

For every prompt, every method decodes once per storage, the two storages in alternating order
(prompt i: static first when i is even), after one untimed warm-up decode of each. A run is one
`verispec.bench.dispatch.run_method` call timed end to end (prefill included, as the bench's
end-to-end rate); the JSON keeps every run, whether the two storages emitted the same tokens, and
per method the ratio sequence / static of the summed tokens over the summed seconds, with the
host's CPU and its load average before and after. Run it on a quiet machine only. The file is
written after each prompt; a second run of the same configuration resumes it, `--fresh` replaces it.

    python3 benchmarks/storage_cpu.py [--methods target_only,adaptive:dq=8,dv=32768] [--first-prompt 50]
        [--prompts 3] [--tokens 64] [--temperature 0] [--threads 2]
        [--output benchmarks/results/storage_cpu.json] [--fresh]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from verispec.atomic import resume_json, write_json_atomic  # noqa: E402
from verispec.bench.arguments import method_list  # noqa: E402
from verispec.bench.costs import CostModels  # noqa: E402
from verispec.bench.dispatch import run_method  # noqa: E402
from verispec.bench.drafts import QuantizedDrafts  # noqa: E402
from verispec.bench.run import BenchConfig, environment, prepare  # noqa: E402
from verispec.bench.spec import parse_method  # noqa: E402

STORAGES = ("static", "sequence")


def _one(spec, pair, ids, config, T, storage, pools):
    start = time.perf_counter()
    result = run_method(spec, pair, ids, config, T, 0, pools, storage=storage)
    return time.perf_counter() - start, result.tokens[0].tolist()


def measure(args, pair=None, prompts=None) -> dict:
    """The runs and summary (module docstring) of `args` (`main`'s options) on the bench's models
    and HumanEval prompts, or on the given `pair` (a `ModelPair`-like) and prompts ([{"task_id",
    "prompt"}]; tests use tiny random models: a run that measures nothing of the real pair).
    Written to args.output after each prompt; a file of the same configuration is resumed (its
    prompts kept) unless args.fresh (`verispec.atomic.resume_json`, which raises ValueError for a
    file of another configuration)."""
    config, _ = BenchConfig(threads=args.threads, max_new_tokens=args.tokens, prompts=args.prompts,
                            first_prompt=args.first_prompt).resolve(pair)
    pair, prompts = prepare(config, pair, prompts, args.first_prompt)
    drafts, costs = QuantizedDrafts(), CostModels()
    specs = [parse_method(m, config.draft_length, config.num_paths) for m in method_list(args.methods)]
    setup = {"methods": [s.label for s in specs], "prompts": [p["task_id"] for p in prompts],
             "max_new_tokens": args.tokens, "temperature": args.temperature, "threads": args.threads}
    old = resume_json(args.output, {"config": setup}, args.fresh)
    runs = old["runs"] if old else []
    env = old["environment"] if old else {**environment(config, args.threads), "load_before": os.getloadavg()}
    specs = [costs.attach(spec, drafts.pair_for(spec, pair), config) for spec in specs]
    done, warmed = {r["task_id"] for r in runs}, False
    for i, item in enumerate(prompts):
        if item["task_id"] in done:
            continue
        ids = pair.tokenizer(item["prompt"], return_tensors="pt").input_ids.to(pair.target.device)
        order = STORAGES if i % 2 == 0 else STORAGES[::-1]
        for spec in specs:
            decoding = drafts.pair_for(spec, pair)
            if not warmed:  # untimed: kernels, allocator, the int8 draft's head subset
                for storage in STORAGES:
                    _one(spec, decoding, ids, config, args.temperature, storage, {})
            out = {}
            for storage in order:
                seconds, tokens = _one(spec, decoding, ids, config, args.temperature, storage, {})
                out[storage] = tokens
                runs.append({"task_id": item["task_id"], "method": spec.label, "storage": storage,
                             "seconds": seconds, "tokens": len(tokens)})
            runs[-1]["same_tokens"] = runs[-2]["same_tokens"] = out["static"] == out["sequence"]
        warmed = True
        env["load_after"] = os.getloadavg()
        write_json_atomic(args.output, {"config": setup, "environment": env, "runs": runs,
                                        "summary": summarize(runs)})
    return {"config": setup, "environment": env, "runs": runs, "summary": summarize(runs)}


def summarize(runs: list) -> list:
    """Per method: end-to-end tokens/s per storage (summed tokens / summed seconds), the ratio
    sequence / static, and whether every prompt's tokens were the same on both."""
    out = []
    for method in dict.fromkeys(r["method"] for r in runs):
        mine = [r for r in runs if r["method"] == method]
        rate = {s: sum(r["tokens"] for r in mine if r["storage"] == s) / sum(r["seconds"] for r in mine
                                                                              if r["storage"] == s)
                for s in STORAGES}
        out.append({"method": method, "tokens_per_s_end_to_end": rate, "ratio_sequence_over_static":
                    rate["sequence"] / rate["static"], "same_tokens": all(r["same_tokens"] for r in mine)})
    return out


def main(argv=None, pair=None, prompts=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", default="target_only,adaptive:dq=8,dv=32768")
    p.add_argument("--first-prompt", type=int, default=50)
    p.add_argument("--prompts", type=int, default=3)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--output", default=os.path.join(ROOT, "benchmarks", "results", "storage_cpu.json"))
    p.add_argument("--fresh", action="store_true", help="replace --output instead of resuming it")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = measure(args, pair, prompts)
    for row in results["summary"]:
        print(f"{row['method']:40s} sequence/static {row['ratio_sequence_over_static']:.3f} "
              f"same tokens: {row['same_tokens']}")
    return results


if __name__ == "__main__":
    main()
