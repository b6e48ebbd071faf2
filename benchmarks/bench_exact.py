"""Exact-enumeration cost per method vs (V, L, K).

For every method and size it enumerates ONE draft-verify iteration from a seeded random context
(random-tree target/draft pair) and reports branches (program runs), time and branches per second;
the `token` method at the same (V, L) is the baseline measured in the same run (time ratio). A
second table times the whole-loop check that `verispec check` runs by default.

    python benchmarks/bench_exact.py [--vocab-sizes 2 3 4] [--draft-lengths 1 2 3]
        [--num-paths 1 2 3] [--repeats 3] [--out benchmarks/results/bench_exact.json] [--fresh]

Results are written atomically after every row, and a rerun resumes: rows already in the JSON file
(same key and same code version) are kept unless --fresh.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

from rich.console import Console
from rich.progress import track
from rich.table import Table

from verispec import __version__
from verispec.atomic import write_json_atomic
from verispec.check import run_check
from verispec.reference import exact, methods, models

#: Methods whose drafts do not depend on K (single chain or point mass): measured at K = 1 only.
SINGLE_PATH = {"token", "block", "point_mass", "prompt_lookup"}


def time_iteration(name, V, L, K, repeats, max_branches):
    """Median seconds and branch count of one iteration's exact law (fresh models each repeat,
    so model caches do not carry over; a run over 5 s is not repeated)."""
    method = methods.get_compatible(name, draft_length=L, num_paths=K)
    context = (0, 1, 0)
    times, branches = [], 0
    for _ in range(repeats):
        target, draft = models.random_tree(V, 0), models.random_tree(V, 1)
        start = time.perf_counter()
        result = exact.iteration_enumeration(target, draft, method, context, max_branches)
        times.append(time.perf_counter() - start)
        branches = result.num_branches
        if times[-1] > 5.0:  # long runs are stable enough; repeating them only costs minutes
            break
    return statistics.median(times), branches


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab-sizes", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--draft-lengths", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--num-paths", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--methods", nargs="+", default=methods.names())
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-branches", type=int, default=2_000_000)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "bench_exact.json"))
    parser.add_argument("--fresh", action="store_true", help="ignore rows of an earlier run")
    parser.add_argument("--skip-check", action="store_true", help="skip timing the default `verispec check`")
    return parser


def _load_payload(args) -> dict:
    """The earlier run's payload when it is of this version (so the grid resumes), else a new one."""
    payload = {"rows": {}, "check": None}
    if os.path.exists(args.out) and not args.fresh:
        with open(args.out) as f:
            previous = json.load(f)
        if previous.get("version") == __version__:
            payload = previous
    payload.update({"version": __version__, "python": platform.python_version(),
                    "machine": platform.machine(), "cpus": os.cpu_count(),
                    "note": "one iteration's exact law; ratio = time / token's time at the same (V, L)"})
    return payload


def _enumerate_grid(payload: dict, args) -> None:
    """Time every (method, V, L, K) of the grid not yet in the payload, writing after each."""
    grid = [(name, V, L, K) for V in args.vocab_sizes for L in args.draft_lengths for K in args.num_paths
            for name in args.methods if not (name in SINGLE_PATH and K != 1)]
    for name in args.methods:  # warm-up: imports, first-call costs and caches outside the timings
        try:
            time_iteration(name, 2, 1, 2, 1, args.max_branches)
        except RuntimeError:  # a --max-branches below the warm-up's size: the grid records it
            pass
    for name, V, L, K in track(grid, description="enumerating"):
        key = f"{name}/V{V}/L{L}/K{K}"
        if key in payload["rows"]:
            continue
        try:
            seconds, branches = time_iteration(name, V, L, K, args.repeats, args.max_branches)
        except RuntimeError:  # over --max-branches: record it, and go on with the grid
            payload["rows"][key] = {"method": name, "V": V, "L": L, "K": K, "seconds": None,
                                    "branches": None, "branches_per_s": None,
                                    "exceeded_max_branches": args.max_branches}
        else:
            payload["rows"][key] = {"method": name, "V": V, "L": L, "K": K, "seconds": seconds,
                                    "branches": branches, "branches_per_s": branches / seconds}
        write_json_atomic(args.out, payload)


def _time_check(payload: dict, args) -> None:
    """Time the default `verispec check` once (kept on resume)."""
    if args.skip_check or payload.get("check") is not None:
        return
    start = time.perf_counter()
    results = run_check(methods.names(), 3, 2, 2, 4, 0, num_tokens=4, rational=False)
    payload["check"] = {"vocab_size": 3, "draft_length": 2, "num_paths": 2, "instances": 4,
                        "num_tokens": 4, "seconds": time.perf_counter() - start,
                        "all_lossless": all(r.passed for r in results),
                        "per_method_seconds": {r.method: r.seconds for r in results}}
    write_json_atomic(args.out, payload)


def _print_table(payload: dict, args) -> None:
    console = Console(width=120)
    table = Table(title="exact enumeration of one iteration (random-tree pair, context of 3 tokens)")
    for column in ("method", "V", "L", "K", "branches", "time ms", "branches/s", "x token"):
        table.add_column(column, justify="left" if column == "method" else "right")
    rows = payload["rows"]
    for row in sorted(rows.values(), key=lambda r: (r["V"], r["L"], r["K"], args.methods.index(r["method"])
                                                      if r["method"] in args.methods else 99)):
        if row["seconds"] is None:
            table.add_row(row["method"], str(row["V"]), str(row["L"]), str(row["K"]),
                          f"> {row['exceeded_max_branches']}", "-", "-", "-")
            continue
        base = rows.get(f"token/V{row['V']}/L{row['L']}/K1")
        ratio = f"{row['seconds'] / base['seconds']:.1f}" if base else "-"
        table.add_row(row["method"], str(row["V"]), str(row["L"]), str(row["K"]), str(row["branches"]),
                      f"{1e3 * row['seconds']:.1f}", f"{row['branches_per_s']:.0f}", ratio)
    console.print(table)
    if payload.get("check"):
        c = payload["check"]
        console.print(f"default `verispec check` (all methods, V=3 L=2 K=2 N=4, 4 instances): "
                      f"{c['seconds']:.1f} s, all lossless: {c['all_lossless']}")
    console.print(f"JSON: {args.out}")


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    payload = _load_payload(args)
    _enumerate_grid(payload, args)
    _time_check(payload, args)
    _print_table(payload, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
