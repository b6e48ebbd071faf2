"""Where a decode's time goes, forward by forward: the peer and verispec runners side by side.

`verispec bench` reports forward counts and tokens/s per runner. When two runners make about the
same number of forwards but differ in speed, this tells whether one of them pays more per
forward (slower kernels, masks, cache copies) or simply made more forwards or wider ones: it runs
each runner on one HumanEval prompt, exactly as the bench does (`verispec.bench`'s
`_decode`, the same models, int8 draft for ``dq=8``), with forward hooks on the target and draft
modules that time every forward and record its rows (tokens fed). Per runner and repeat:

    wall_s, target forwards [(rows, s)], draft forwards (count, s, mean s of a 1-row forward,
    count by rows), other_s = wall - target - draft (drafting, verification, bookkeeping)

Timings mean something only on a quiet machine (run nothing else; the JSON records the load
average before and after).

    python3 benchmarks/forward_times.py [--prompt 0] [--temperature 0] [--repeats 2] [--threads 2]
        [--dtype auto] [--max-new-tokens 128] [--runner hf:dq=8 --runner adaptive:L=20,dq=8,sched=constant]
        [--output benchmarks/results/forward_times_cpu.json]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from verispec.atomic import write_json_atomic  # noqa: E402
from verispec import bench  # noqa: E402
from verispec.bench.costs import CostModels  # noqa: E402
from verispec.bench.peer import ForwardCounter  # noqa: E402

DEFAULT_RUNNERS = ("hf:dq=8", "adaptive:L=20,dq=8,sched=constant,pol=fixed")


def time_runner(spec, pair, prompt, config, temperature: float, drafts=None) -> dict:
    """One decode of `prompt` [1, n] by `spec` with both models' forwards timed (`drafts`: the
    run's `bench.QuantizedDrafts`, a fresh one when None)."""
    runner_pair = (drafts or bench.QuantizedDrafts()).pair_for(spec, pair)
    # the peer's own hooks
    counters = [ForwardCounter(runner_pair.target.model), ForwardCounter(runner_pair.draft.model)]
    try:
        start = time.perf_counter()
        result = bench.run_method(spec, runner_pair, prompt, config, temperature, config.seed, {})
        wall = time.perf_counter() - start
    finally:
        for counter in counters:
            counter.remove()
    target, draft = (list(zip(c.fed, c.seconds)) for c in counters)  # [(rows fed, seconds)] per forward
    one_row = [s for rows, s in draft if rows == 1]
    target_s, draft_s = sum(s for _, s in target), sum(s for _, s in draft)
    return {"wall_s": wall, "new_tokens": int(result.tokens.shape[1]),
            "target_forwards": [[rows, round(s, 4)] for rows, s in target], "target_s": target_s,
            "draft_forwards": len(draft), "draft_s": draft_s,
            "draft_one_row_mean_s": sum(one_row) / len(one_row) if one_row else None,
            "draft_rows": dict(sorted(collections.Counter(rows for rows, _ in draft).items())),
            "other_s": wall - target_s - draft_s}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=int, default=0, help="HumanEval index")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--runner", action="append", help=f"a bench runner (default: {', '.join(DEFAULT_RUNNERS)})")
    parser.add_argument("--output",
                        default=os.path.join(os.path.dirname(__file__), "results", "forward_times_cpu.json"))
    args = parser.parse_args(argv)
    config = bench.BenchConfig(prompts=args.prompt + 1, max_new_tokens=args.max_new_tokens, dtype=args.dtype,
                               threads=args.threads)
    config, reason = config.resolve()
    pair, prompts = bench.prepare(config)
    prompt = pair.tokenizer(prompts[args.prompt]["prompt"], return_tensors="pt").input_ids  # [1, n]
    specs = [bench.parse_method(text, config.draft_length, config.num_paths) for text in args.runner or DEFAULT_RUNNERS]
    drafts, costs = bench.QuantizedDrafts(), CostModels()
    specs = [costs.attach(spec, drafts.pair_for(spec, pair), config) for spec in specs]  # pol=auto: measured costs
    bench.warm_up(pair, specs, config, drafts)
    out = {"environment": bench.environment(config, args.threads, reason), "load_before": os.getloadavg(),
           "prompt": prompts[args.prompt]["task_id"], "temperature": args.temperature, "runs": []}
    for repeat in range(args.repeats):
        for spec in specs:  # interleaved, so drift on the host hits every runner alike
            timed = time_runner(spec, pair, prompt, config, args.temperature, drafts)
            run = {"runner": spec.label, "repeat": repeat, **timed}
            out["runs"].append(run)
            print(f"{spec.label:40s} wall {run['wall_s']:6.2f} s  target {len(run['target_forwards']):3d} fw "
                  f"{run['target_s']:6.2f} s  draft {run['draft_forwards']:3d} fw {run['draft_s']:6.2f} s "
                  f"(1 row: {1000 * (run['draft_one_row_mean_s'] or 0):.1f} ms)  other {run['other_s']:.2f} s")
    out["load_after"] = os.getloadavg()
    write_json_atomic(args.output, out)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
