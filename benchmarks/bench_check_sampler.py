"""Time `verispec check-sampler transformers`: the installed transformers' own `_speculative_sampling`
through the chain harness, standard mode (must pass) and DIVERSE ensemble mode (lossy by design).

Each mode runs `verispec.integrations.transformers.check_speculative_sampling` with the command's
defaults (tv 0.05, alpha 1e-6, power 0.9) and records the verdict, n, the number of instances, the
measured TV of a rejection beside the exact TV of the reference rule (the static ensemble on the
same instance) and the wall time, with the host's CPU capability and the 1-minute load
average before and after (a run is marked contended when it exceeds `QUIET_LOAD`; run it alone).

    python3 benchmarks/bench_check_sampler.py [--repeats 3] [--out PATH]

Writes benchmarks/results/check_sampler_transformers.json atomically.
"""

from __future__ import annotations

import argparse
import os
import platform

import torch
import transformers

from verispec import __version__
from verispec.atomic import write_json_atomic
from verispec.empirical.speedups.hardware import host_info
from verispec.integrations import transformers as hf

DEFAULT_OUT = os.path.join(os.path.dirname(__file__), "results", "check_sampler_transformers.json")
#: The run uses one core; a 1-minute load average above this means other processes competed.
QUIET_LOAD = 1.5


def _record(mode: str, repeat: int) -> dict:
    load_before = os.getloadavg()[0]
    verdict = hf.check_speculative_sampling(mode)
    load_after = os.getloadavg()[0]
    return {"mode": mode, "repeat": repeat, "lossless": verdict.lossless, "measured_tv": verdict.tv,
            "exact_tv_of_the_reference_rule": verdict.exact_tv,
            "tv_target": verdict.tv_target, "alpha": verdict.alpha, "power": verdict.power, "n": verdict.n,
            "instances": len(verdict.report.results), "seconds": round(verdict.seconds, 2),
            "load_before": load_before, "load_after": load_after}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each mode (default 3)")
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    records = []
    for repeat in range(args.repeats):
        for mode in ("standard", "diverse"):
            records.append(_record(mode, repeat))
            r = records[-1]
            print(f"{mode} #{repeat}: {'PASS' if r['lossless'] else 'LOSSY'} n = {r['n']:,} "
                  f"({r['instances']} instance(s)), {r['seconds']:.1f} s, load {r['load_before']:.2f}")
    contended = any(max(r["load_before"], r["load_after"]) > QUIET_LOAD for r in records)
    write_json_atomic(args.out, {
        "command": "python3 benchmarks/bench_check_sampler.py --repeats %d" % args.repeats,
        "verispec": __version__, "transformers": transformers.__version__, "torch": torch.__version__,
        "function": hf.FUNCTION, "platform": platform.platform(), "cpu_count": os.cpu_count(),
        "host": host_info("cpu"), "contended": contended, "records": records})


if __name__ == "__main__":
    main()
