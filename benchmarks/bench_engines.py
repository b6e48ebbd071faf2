"""Time and record `verispec check-sampler vllm` and `verispec check-engine vllm|transformers` at tv 0.05.

Runs the commands in this interpreter (vLLM needs the venv of the vllm extra, transformers the torch
extra: docs/engines.md), each with ``--json``, then adds to each JSON the wall time of the whole
command, the 1-minute load average before and after (a run is marked contended above `QUIET_LOAD`:
run it alone) and the host's CPU capability. The JSONs carry every mode's verdict, n, time,
per-position TVs and acceptance comparison.

    /path/to/vllm-venv/bin/python benchmarks/bench_engines.py --engine vllm
        -> benchmarks/results/check_sampler_vllm.json, benchmarks/results/check_engine_vllm.json
    python3 benchmarks/bench_engines.py --engine transformers
        -> benchmarks/results/check_engine_transformers.json
    python3 benchmarks/bench_engines.py --engine transformers --tv 0.3 --out-dir /tmp/x   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import time

from verispec import cli
from verispec.atomic import write_json_atomic

RESULTS = os.path.join(os.path.dirname(__file__), "results")
#: Each command uses about one core; a 1-minute load average above this means others competed.
QUIET_LOAD = 1.5


def _commands(engine: str, tv: float, extra: list) -> list:
    """[(output file name, argv)] for `engine`."""
    runs = [(f"check_engine_{engine}.json", ["check-engine", engine, "--tv", str(tv), *extra])]
    if engine == "vllm":
        runs.insert(0, ("check_sampler_vllm.json", ["check-sampler", "vllm", "--tv", str(tv)]))
    return runs


def _host() -> dict:
    try:
        from verispec.empirical.speedups.hardware import host_info  # optional: needs the torch extra

        return host_info("cpu")
    except ImportError as err:  # the vllm venv has no torch extra
        import torch

        return {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "note": f"host_info unavailable: {err}"}


def run(name: str, argv: list, out_dir: str) -> dict:
    path = os.path.join(out_dir, name)
    load_before, start = os.getloadavg()[0], time.perf_counter()
    status = cli.main([*argv, "--json", path])
    wall, load_after = time.perf_counter() - start, os.getloadavg()[0]
    record = json.load(open(path))
    record.update(exit_status=status, wall_seconds=round(wall, 1), load_before=load_before, load_after=load_after,
                  contended=max(load_before, load_after) > QUIET_LOAD, host=_host(),
                  bench_command="python benchmarks/bench_engines.py " + " ".join(argv))
    write_json_atomic(path, record)
    print(f"{name}: exit {status}, {wall:.1f} s, load {load_before:.2f} -> {load_after:.2f}")
    return record


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("vllm", "transformers"), required=True)
    parser.add_argument("--tv", type=float, default=0.05)
    parser.add_argument("--modes", default=None, help="check-engine --modes (default: all)")
    parser.add_argument("--num-tokens", type=int, default=4, help="check-engine --num-tokens (default 4)")
    parser.add_argument("--out-dir", default=RESULTS)
    args = parser.parse_args(argv)
    extra = ["--num-tokens", str(args.num_tokens)] + ([] if args.modes is None else ["--modes", args.modes])
    for name, command in _commands(args.engine, args.tv, extra):
        run(name, command, args.out_dir)


if __name__ == "__main__":
    main()
