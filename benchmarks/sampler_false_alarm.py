"""Measure the false-alarm rate of the sampler harnesses over seeds (a calibration, not a timing).

A harness is run many times on a CORRECT sampler, one instance per run, each with a different seed;
its p-values should be uniform on [0, 1]. The chain harness (`assert_sampler_lossless`) runs
`verispec.testing.reference_sampler`; the tree harness (`assert_tree_sampler_lossless`) runs the
SGLang-style `reference_tree_sampler` (next-sibling layout) on trees from each reference drafter
(i.i.d. paths, paths without replacement, a static EAGLE-shaped top-k tree, OPT-Tree). The script
reports the fraction of p-values below 0.05, 0.01 and 0.001 (the measured false-alarm rates at
those levels, with a binomial 99% interval), the largest such fraction's deviation, and a KS test
of uniformity. The nominal rate of the harness is its alpha; alpha = 1e-6 itself cannot be measured
with a feasible number of runs, so the calibration is read at these larger levels.

    python3 benchmarks/sampler_false_alarm.py                     # 1,000 seeds at tv 0.1, 400 at tv 0.05
    python3 benchmarks/sampler_false_alarm.py --runs 200:0.1
    python3 benchmarks/sampler_false_alarm.py --harness tree --runs 1000:0.1 400:0.05 \
        --output benchmarks/results/tree_sampler_false_alarm.json

Writes the output JSON atomically (one record per (drafter, tv, runs) setting).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats

from verispec.atomic import write_json_atomic
from verispec.reference import drafters, models
from verispec.reference.static_trees import static_shape
from verispec.testing import (assert_sampler_lossless, assert_tree_sampler_lossless, reference_sampler,
                              reference_tree_sampler)

LEVELS = (0.05, 0.01, 0.001)
TREE_DRAFTERS = {"iid_paths(L=2, K=2)": drafters.iid_paths(2, 2),
                 "paths_without_replacement(L=2, K=2)": drafters.paths_without_replacement(2, 2),
                 "ranked_tree(eagle, 4 nodes, depth 2)": drafters.ranked_tree(static_shape("eagle", 4, 2)),
                 "opt_tree(4 nodes, depth 2)": drafters.opt_tree(4, max_depth=2)}


def _setting(text: str) -> tuple[int, float]:
    try:
        runs, tv = text.split(":")
        runs, tv = int(runs), float(tv)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected RUNS:TV such as 1000:0.1, got {text!r}") from None
    if runs < 10 or not 0 < tv < 1:
        raise argparse.ArgumentTypeError(f"need RUNS >= 10 and 0 < TV < 1, got {text!r}")
    return runs, tv


def _run(drafter, target, draft, num_tokens: int, tv: float, seed: int):
    """One harness run on one instance: the chain harness (drafter None) or the tree harness."""
    if drafter is None:
        return assert_sampler_lossless(reference_sampler, target=target, draft=draft, num_tokens=num_tokens,
                                       tv=tv, seed=seed).results[0]
    return assert_tree_sampler_lossless(reference_tree_sampler, drafter=drafter, layout="next_sibling",
                                        target=target, draft=draft, num_tokens=num_tokens, tv=tv,
                                        seed=seed).results[0]


def measure(runs: int, tv: float, num_tokens: int = 3, drafter=None, drafter_name: str = "chain(L=2)") -> dict:
    """p-values of a harness on `runs` seeds of one Markov V = 3 instance (N tokens)."""
    target, draft = models.random_markov(3, 11), models.random_markov(3, 12)
    start = time.perf_counter()
    results = [_run(drafter, target, draft, num_tokens, tv, seed) for seed in range(runs)]
    pvalues = np.array([r.p_value for r in results])
    rates = {}
    for level in LEVELS:
        count = int(np.count_nonzero(pvalues < level))
        low, high = stats.binomtest(count, runs, level).proportion_ci(0.99)
        rates[str(level)] = {"count": count, "rate": count / runs, "ci99": [low, high]}
    return {"instance": "markov V=3 (random_markov seeds 11, 12), N = %d" % num_tokens, "drafter": drafter_name,
            "tv": tv,
            "runs": runs, "n_per_run": results[0].n, "cells": results[0].cells, "rates": rates,
            "ks_uniform_pvalue": float(stats.kstest(pvalues, "uniform").pvalue),
            "seconds": time.perf_counter() - start}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=_setting, nargs="+", default=[(1000, 0.1), (400, 0.05)],
                        metavar="RUNS:TV", help="settings to measure (default 1000:0.1 400:0.05)")
    parser.add_argument("--harness", choices=("chain", "tree"), default="chain",
                        help="chain: assert_sampler_lossless; tree: assert_tree_sampler_lossless per drafter")
    parser.add_argument("--output", default="benchmarks/results/sampler_false_alarm.json")
    args = parser.parse_args(argv)
    settings = TREE_DRAFTERS.items() if args.harness == "tree" else [("chain(L=2)", None)]
    records = []
    for (name, drafter), (runs, tv) in ((d, r) for d in settings for r in args.runs):
        record = measure(runs, tv, drafter=drafter, drafter_name=name)
        records.append(record)
        rates = ", ".join(f"{k}: {v['rate']:.4f}" for k, v in record["rates"].items())
        print(f"{name} tv {tv:g}: n = {record['n_per_run']:,} per run, {runs} runs -> rate below {rates}; "
              f"KS p = {record['ks_uniform_pvalue']:.3g} ({record['seconds']:.0f} s)")
        write_json_atomic(args.output, {"harness": args.harness, "records": records})


if __name__ == "__main__":
    main()
