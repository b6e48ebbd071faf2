"""Measure the false-alarm rate of `assert_engine_lossless` over seeds (a calibration, not a timing).

The check is run many times, each with a different seed, on an engine that is lossless by
construction: `verispec.testing.exact_generate`, which draws the first N tokens straight from the
exact law of verispec's tiny pair (default `TinyPairConfig`, the default prompt, T = 1). Its p-values
should be uniform on [0, 1]. The script records, for the joint G-test and for each position's
conditional G-test, the fraction of p-values below 0.05, 0.01 and 0.001 (with a binomial 99%
interval) and a KS test of uniformity, and how often the check raised at its level 0.05 (the
measured false-alarm rate of `assert_engine_lossless(..., EngineCheckSettings(alpha=0.05))`).

    python3 benchmarks/engine_false_alarm.py                      # 300 runs at tv 0.05, alpha 0.05
    python3 benchmarks/engine_false_alarm.py --runs 5 --tv 0.3 --output /tmp/x.json   # a smoke run

Resumes: the output JSON is rewritten atomically every `SAVE_EVERY` runs and a later call with the
same settings continues from the runs it holds (``--fresh`` starts over).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import asdict, replace

import numpy as np
from scipy import stats

from verispec import __version__
from verispec.atomic import resume_json, write_json_atomic
from verispec.testing import (EngineCheckSettings, EngineLosslessnessError, PairLaw, assert_engine_lossless,
                              exact_generate)
from verispec.testing.tiny_pair import TinyPairConfig, build_tiny_pair

DEFAULT_OUT = os.path.join(os.path.dirname(__file__), "results", "engine_false_alarm.json")
LEVELS = (0.05, 0.01, 0.001)
SAVE_EVERY = 10


def _rates(pvalues) -> dict:
    pvalues = np.asarray(pvalues)
    out = {}
    for level in LEVELS:
        count = int(np.count_nonzero(pvalues < level))
        low, high = stats.binomtest(count, len(pvalues), level).proportion_ci(0.99)
        out[str(level)] = {"count": count, "rate": count / len(pvalues), "ci99": [low, high]}
    return out


def _one(law, settings, seed: int) -> dict:
    settings = replace(settings, seed=seed)
    try:
        report = assert_engine_lossless(exact_generate(law), law.pair, settings, law=law, label="exact")
        raised = False
    except EngineLosslessnessError as err:
        report, raised = err.report, True
    return {"seed": seed, "p_value": report.p_value, "raised": raised, "n": report.n, "df": report.df,
            "position_p_values": [r.p_value for r in report.positions]}


def _summary(records, settings) -> dict:
    positions = len(records[0]["position_p_values"]) if records else 0
    raised = sum(r["raised"] for r in records)
    return {"runs": len(records), "n_per_run": records[0]["n"] if records else None,
            "check_raised": {"count": raised, "rate": raised / max(len(records), 1), "level": settings.alpha},
            "joint_rates": _rates([r["p_value"] for r in records]),
            "joint_ks_uniform_pvalue": float(stats.kstest([r["p_value"] for r in records], "uniform").pvalue),
            "position_rates": [_rates([r["position_p_values"][i] for r in records]) for i in range(positions)]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--tv", type=float, default=0.05)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--num-tokens", type=int, default=4)
    parser.add_argument("--output", default=DEFAULT_OUT)
    parser.add_argument("--fresh", action="store_true", help="ignore the runs the output already holds")
    args = parser.parse_args(argv)
    settings = EngineCheckSettings(tv=args.tv, alpha=args.alpha, num_tokens=args.num_tokens)
    config = {"settings": asdict(settings), "pair": asdict(TinyPairConfig())}
    previous = resume_json(args.output, {"config": json.loads(json.dumps(config))}, args.fresh)
    records = previous["records"] if previous else []  # a file of another configuration is refused, not replaced
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="verispec-pair-") as folder:
        law = PairLaw(build_tiny_pair(folder), settings)
        for seed in range(len(records), args.runs):
            records.append(_one(law, settings, seed))
            if len(records) % SAVE_EVERY == 0 or len(records) == args.runs:
                write_json_atomic(args.output, {
                    "command": f"python3 benchmarks/engine_false_alarm.py --runs {args.runs} --tv {args.tv:g} "
                               f"--alpha {args.alpha:g} --num-tokens {args.num_tokens}",
                    "verispec": __version__, "config": config,
                    "engine": "verispec.testing.exact_generate (draws from the exact law)",
                    "summary": _summary(records, settings), "records": records,
                    "seconds_this_call": round(time.perf_counter() - start, 1)})
    summary = _summary(records, settings)
    print(f"{summary['runs']} runs, n = {summary['n_per_run']:,}: the check raised in "
          f"{summary['check_raised']['count']} ({summary['check_raised']['rate']:.3f}) at level {args.alpha:g}; "
          f"joint KS p = {summary['joint_ks_uniform_pvalue']:.3f}")


if __name__ == "__main__":
    main()
