"""Measure the host's cost model for the drafting policy (``pol=auto``) of the given bench methods:
draft and target forward seconds against token rows and cache length, per lever set (``dq=8``,
``dv=k``, ``lin=``), as `verispec bench` measures them before its first timed span
(`verispec.bench.costs`). Each model is cached where the bench looks for it, so a bench run right
after this one reuses it, and all of them are written, with their raw samples, to --output.
Only meaningful on a quiet machine (nothing else running).

    python3 benchmarks/measure_costs.py --methods adaptive:dq=8,dv=32768 --methods opt_tree:dq=8 \
        [--threads 2] [--dtype auto] [--repeats 3] [--refresh] [--output benchmarks/results/costs_cpu.json]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from verispec import bench  # noqa: E402
from verispec.atomic import write_json_atomic  # noqa: E402
from verispec.bench.config import BenchSettings  # noqa: E402
from verispec.bench.costs import CostGrid, CostModels  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", action="append", required=True,
                        help="bench method specs (comma-separated keys as in verispec bench); pol=auto is "
                             "added where the method takes it")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", default=BenchSettings.dtype)
    parser.add_argument("--repeats", type=int, default=CostGrid.repeats)
    parser.add_argument("--refresh", action="store_true", help="measure again even where the disk cache has a model")
    parser.add_argument("--output", default=os.path.join(os.path.dirname(__file__), "results", "costs_cpu.json"))
    args = parser.parse_args(argv)
    config, reason = bench.BenchConfig(prompts=1, dtype=args.dtype, threads=args.threads).resolve()
    pair, _ = bench.prepare(config)
    drafts, costs = bench.QuantizedDrafts(), CostModels(repeats=args.repeats, refresh=args.refresh)
    out = {"environment": bench.environment(config, args.threads, reason), "load_before": os.getloadavg(),
           "methods": {}, "cost_models": {}}
    for text in args.methods:
        spec = bench.parse_method(text, config.draft_length, config.num_paths)
        start = time.perf_counter()
        ident, model = costs.for_method(spec, drafts.pair_for(spec, pair), config)
        out["methods"][spec.label] = {"cost_model": ident, "seconds_to_measure_or_load": time.perf_counter() - start}
        out["cost_models"][ident] = model.to_dict()
        check = costs.checks[ident]
        drift = "" if check["spot_check"] is None else f" (cached; spot check drift {check['spot_check']['drift']:.2f})"
        print(f"{spec.label}: cost model {ident} {check['source']}{drift}; target 1 / 8 / 16 rows at n = 256: "
              + " / ".join(f"{model.target.seconds(r, 256):.4f}" for r in (1, 8, 16))
              + f" s; draft 1 row {model.draft.seconds(1, 256):.4f} s", flush=True)
    out["cost_checks"] = costs.checks
    out["load_after"] = os.getloadavg()
    write_json_atomic(args.output, out)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
