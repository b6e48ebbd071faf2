"""Measure the false-alarm rate of `assert_sampler_lossless` over seeds (a calibration, not a timing).

The harness is run many times on a CORRECT sampler (`verispec.testing.reference_sampler`), one
instance per run, each with a different seed; its p-values should be uniform on [0, 1]. The script
reports the fraction of p-values below 0.05, 0.01 and 0.001 (the measured false-alarm rates at
those levels, with a binomial 99% interval), the largest such fraction's deviation, and a KS test
of uniformity. The nominal rate of the harness is its alpha; alpha = 1e-6 itself cannot be measured
with a feasible number of runs, so the calibration is read at these larger levels.

    python3 benchmarks/sampler_false_alarm.py                     # 1,000 seeds at tv 0.1, 400 at tv 0.05
    python3 benchmarks/sampler_false_alarm.py --runs 200:0.1

Writes benchmarks/results/sampler_false_alarm.json atomically (one record per (tv, runs) setting).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats

from verispec.atomic import write_json_atomic
from verispec.reference import models
from verispec.testing import assert_sampler_lossless, reference_sampler

LEVELS = (0.05, 0.01, 0.001)


def _setting(text: str) -> tuple[int, float]:
    try:
        runs, tv = text.split(":")
        runs, tv = int(runs), float(tv)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected RUNS:TV such as 1000:0.1, got {text!r}") from None
    if runs < 10 or not 0 < tv < 1:
        raise argparse.ArgumentTypeError(f"need RUNS >= 10 and 0 < TV < 1, got {text!r}")
    return runs, tv


def measure(runs: int, tv: float, num_tokens: int = 3) -> dict:
    """p-values of the harness on `runs` seeds of one Markov V = 3 instance (N tokens, L = 2)."""
    target, draft = models.random_markov(3, 11), models.random_markov(3, 12)
    start = time.perf_counter()
    results = [assert_sampler_lossless(reference_sampler, target=target, draft=draft, num_tokens=num_tokens,
                                       tv=tv, seed=seed).results[0] for seed in range(runs)]
    pvalues = np.array([r.p_value for r in results])
    rates = {}
    for level in LEVELS:
        count = int(np.count_nonzero(pvalues < level))
        low, high = stats.binomtest(count, runs, level).proportion_ci(0.99)
        rates[str(level)] = {"count": count, "rate": count / runs, "ci99": [low, high]}
    return {"instance": "markov V=3 (random_markov seeds 11, 12), N = %d, L = 2" % num_tokens, "tv": tv,
            "runs": runs, "n_per_run": results[0].n, "cells": results[0].cells, "rates": rates,
            "ks_uniform_pvalue": float(stats.kstest(pvalues, "uniform").pvalue),
            "seconds": time.perf_counter() - start}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=_setting, nargs="+", default=[(1000, 0.1), (400, 0.05)],
                        metavar="RUNS:TV", help="settings to measure (default 1000:0.1 400:0.05)")
    parser.add_argument("--output", default="benchmarks/results/sampler_false_alarm.json")
    args = parser.parse_args(argv)
    records = []
    for runs, tv in args.runs:
        record = measure(runs, tv)
        records.append(record)
        rates = ", ".join(f"{k}: {v['rate']:.4f}" for k, v in record["rates"].items())
        print(f"tv {tv:g}: n = {record['n_per_run']:,} per run, {runs} runs -> rate below {rates}; "
              f"KS p = {record['ks_uniform_pvalue']:.3g} ({record['seconds']:.0f} s)")
        write_json_atomic(args.output, {"records": records})


if __name__ == "__main__":
    main()
