"""`verispec prove` on every built-in method: method x size -> verdict, time, branch points, leaves.

For each built-in method and each size (V, L, K) of the matrix (V=2 L=1, V=2 L=2, V=3 L=1; K=2 for
multi-path methods, K=1 otherwise) it runs `verispec.formal.prove` with a time limit (default 60 s)
and records the verdict (proved / counterexample / unknown with its reason), the wall time, the
exploration time, the slowest query, the number of solver calls (a query that z3 does not answer
within 0.05 s is split on a comparison, so one output can take several calls), the branch points
and leaves of the merged branch tree, and the free variables, and the queries without and with the symmetry reduction
(`queries_before_symmetry` = V^(L+1); `queries_after_symmetry`: what a watched proof asks, derived
from a watched exploration: one per orbit of outputs for an equivariant K = 1 rule). `--extra` adds larger sizes
(V=2 L=3, V=3 L=2, V=4 L=1) to find the largest size each method reaches within the limit.
`--all-vocab` adds one record per (method, L, K) of `ALL_VOCAB_SIZES` with the verdict for every V
(`verispec.formal.cutoff.prove_all_vocab`): "proved for every V" with V*, or "no cutoff" with the
operation that breaks the criterion; the queries asked (one per orbit of outputs where the run is
equivariant) and the outputs they cover (the queries without symmetry), and the solver that
answered each; `--summary` then shows it beside the fixed sizes.

Results go to benchmarks/results/bench_prove.json (atomic write after every record; a rerun resumes,
skipping recorded (method, size, timeout) records unless --fresh). The 1-minute load average before
and after each record is stored, and the file says ``"contended": true`` when any of them exceeds
`QUIET_LOAD` (this benchmark keeps up to two cores busy, `prove`'s parallel queries; more means other
processes competed): such times
are indicative only. Re-run on a quiet machine to publish times:

    python3 benchmarks/bench_prove.py --fresh            # the base sizes, every built-in method
    python3 benchmarks/bench_prove.py --extra            # then the larger sizes (resumes)
    python3 benchmarks/bench_prove.py --all-vocab        # then the every-V verdicts (resumes)
    python3 benchmarks/bench_prove.py [--methods token,block,...] [--timeout 60] [--out PATH]
    python3 benchmarks/bench_prove.py --table            # every record as a Markdown table
    python3 benchmarks/bench_prove.py --summary          # the method x size table of README / docs/prove.md
    python3 benchmarks/bench_prove.py --update-docs      # write that table (and the load note) into both
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

from verispec import __version__
from verispec.atomic import write_json_atomic
from verispec.formal import prove
from verispec.formal.cutoff import prove_all_vocab, watched_run
from verispec.formal.replay import ExplorationTimeout
from verispec.formal.symbolic import SymbolicError, SymbolicZeroDivision
from verispec.formal.symmetry import representatives
from verispec.formal.prove import SOLVER
from verispec.reference import methods

SINGLE_PATH = {"token", "block", "point_mass", "prompt_lookup"}
#: The methods measured by default: every built-in verifier, once. Left out: target_only (no draft),
#: the static trees kary / eagle / chain_tree (opt_tree's sample-and-follow verifier on a fixed
#: shape) and the adaptive chains (token or block verification behind a confidence stop).
PROVE_METHODS = tuple(name for name in methods.names()
                      if name not in {"target_only", "kary", "eagle", "chain_tree", "adaptive", "hybrid"})
BASE_SIZES = ((2, 1), (2, 2), (3, 1))
EXTRA_SIZES = ((2, 3), (3, 2), (4, 1))
#: The draft lengths of the every-V records (--all-vocab): L = 1 and 2 for single-path methods, L = 1 otherwise.
ALL_VOCAB_LENGTHS = {"single": (1, 2), "multi": (1,)}
DEFAULT_OUT = os.path.join(os.path.dirname(__file__), "results", "bench_prove.json")
#: A 1-minute load average above this during a record marks the file contended. The run itself is
#: up to 4: `prove` decides the outputs' queries in two processes by default, and each may race a
#: cvc5 child process (the solver portfolio) on a query z3 does not answer at once.
QUIET_LOAD = 4.5


def _key(name, V, L, K, timeout):
    return f"{name}|V={V}|L={L}|K={K}|timeout={timeout:g}"  # V = "all" for an every-V record


def _record(name, V, L, K, timeout):
    load_before = os.getloadavg()[0]
    result = prove(name, V, L, K, timeout=timeout)
    return {"method": name, "vocab_size": V, "draft_length": L, "num_paths": K, "timeout_s": timeout,
            "verdict": result.verdict, "reason": result.reason, "seconds": round(result.seconds, 3),
            "exploration_seconds": round(result.exploration_seconds, 3),
            "slowest_query_seconds": round(result.max_query_seconds, 3),
            "queries": len(result.queries), "solver_calls": sum(q.solver_calls for q in result.queries),
            "branch_points": result.branch_points, "decisions": result.decisions, "leaves": result.leaves,
            "dead_paths": result.dead_paths, "variables": result.variables,
            "counterexample_found_by": result.counterexample.found_by if result.counterexample else None,
            "solvers": result.solver, "answered_by": result.answered_by,
            "queries_before_symmetry": V ** (L + 1), "queries_after_symmetry": _orbit_queries(name, V, L, K, timeout),
            "load_average_before": load_before, "load_average_after": os.getloadavg()[0]}


def _orbit_queries(name, V, L, K, timeout):
    """The queries a watched proof asks at this size (derived from a watched exploration: one per
    orbit of outputs when the run is equivariant and K = 1, else one per output); None when the
    watched exploration does not finish or the rule cannot run symbolically."""
    if K != 1:
        return V ** (L + 1)
    try:
        equivariant = watched_run(name, V, L, K, timeout).equivariant
    except (ExplorationTimeout, SymbolicError, SymbolicZeroDivision):  # no watched run to derive it from
        return None
    return len(representatives(V, L + 1)) if equivariant else V ** (L + 1)


def _all_vocab_record(name, L, K, timeout):
    """The every-V verdict of one (method, L, K): V*, queries before / after symmetry, the solvers."""
    load_before = os.getloadavg()[0]
    result = prove_all_vocab(name, L, K, timeout=timeout)
    answered = {}
    for proof in result.proofs:
        for solver, count in proof.answered_by.items():
            answered[solver] = answered.get(solver, 0) + count
    return {"method": name, "draft_length": L, "num_paths": K, "timeout_s": timeout, "verdict": result.verdict,
            "line": result.line(), "reason": result.reason, "cutoff_size": result.cutoff_size,
            "equivariant": result.equivariant, "queries_before_symmetry": result.outputs,
            "queries_after_symmetry": result.queries, "answered_by": answered, "seconds": round(result.seconds, 3),
            "sizes": [{"vocab_size": p.vocab_size, "verdict": p.verdict, "seconds": round(p.seconds, 3),
                       "queries": len(p.queries), "outputs_by_symmetry": p.outputs_by_symmetry}
                      for p in result.proofs],
            "load_average_before": load_before, "load_average_after": os.getloadavg()[0]}


def all_vocab_table(data) -> str:
    """The every-V records as a Markdown table."""
    lines = ["| method | L, K | for every V | V* | queries (before -> after symmetry) | answered by | time s |",
             "| --- | --- | --- | ---: | --- | --- | ---: |"]
    for r in data.get("all_vocab", {}).values():
        verdict = r["verdict"] if r["verdict"] != "no cutoff" else f"no cutoff: {r['reason'][:70]}"
        solvers = ", ".join(f"{k} {v}" for k, v in r["answered_by"].items()) or "-"
        lines.append(f"| {r['method']} | {r['draft_length']}, {r['num_paths']} | {verdict} | {r['cutoff_size'] or '-'} | "
                     f"{r['queries_before_symmetry']} -> {r['queries_after_symmetry']} | {solvers} | {r['seconds']:.1f} |")
    return "\n".join(lines)


def _run_all_vocab(data, names, timeout, out) -> None:
    """Add the every-V record of each (method, L, K) not recorded yet (resumes)."""
    data.setdefault("all_vocab", {})
    for name in names:
        single = name in SINGLE_PATH
        K = 1 if single else 2
        for L in ALL_VOCAB_LENGTHS["single" if single else "multi"]:
            key = _key(name, "all", L, K, timeout)
            if key in data["all_vocab"]:
                continue
            record = data["all_vocab"][key] = _all_vocab_record(name, L, K, timeout)
            write_json_atomic(out, data)
            print(f"{name:14s} every V L={L} K={K}  {record['verdict']:20s} V*={record['cutoff_size']} "
                  f"{record['queries_before_symmetry']}->{record['queries_after_symmetry']} queries "
                  f"{record['seconds']:7.2f} s  {record['reason'][:80]}", flush=True)


def markdown_table(data) -> str:
    """The records as a Markdown table: method x size -> verdict, time, branch points, leaves."""
    lines = ["| method | V, L, K | verdict | time s | branch points | leaves | solver calls |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for r in data["records"].values():
        verdict = r["verdict"] if r["verdict"] != "unknown" else (
            "unknown (float code)" if "symbolically" in r["reason"] else "unknown (time limit)")
        lines.append(f"| {r['method']} | {r['vocab_size']}, {r['draft_length']}, {r['num_paths']} | {verdict} | "
                     f"{r['seconds']:.1f} | {r['branch_points']} | {r['leaves']} | {r['solver_calls']} |")
    return "\n".join(lines)


def _cell(r) -> str:
    if r["verdict"] == "proved":
        return f"proved, {r['seconds']:.1f} s, {r['branch_points']} / {r['leaves']}"
    if r["verdict"] == "counterexample":
        return f"counterexample, {r['seconds']:.1f} s"
    if "not deterministic" in r["reason"]:
        return "unknown: replay diverged"
    if "symbolically" in r["reason"]:
        return "unknown: float code"
    return f"unknown: {r['timeout_s']:g} s limit" if "time" in r["reason"] else f"unknown: {r['reason'][:40]}"


def summary_table(data) -> str:
    """The README / docs/prove.md table: method (K) x base size -> verdict, time, branch points /
    leaves; and the larger sizes proved within the limit (from the records only)."""
    records = list(data["records"].values())
    every = {(r["method"], r["draft_length"]): r for r in data.get("all_vocab", {}).values()}
    head = ["| method (K) | " + " | ".join(f"V={V}, L={L}" for V, L in BASE_SIZES)
            + " | larger sizes (" + ", ".join(f"V={V} L={L}" for V, L in EXTRA_SIZES) + ") proved within the limit |"
            + (" every V, L=1 (V*; queries before -> after symmetry) |" if every else ""),
            "| --- " * (len(BASE_SIZES) + 2 + bool(every)) + "|"]
    lines = []
    order = {name: i for i, name in enumerate(methods.names())}
    for name in sorted(dict.fromkeys(r["method"] for r in records), key=lambda n: (order.get(n, len(order)), n)):
        mine = {(r["vocab_size"], r["draft_length"]): r for r in records if r["method"] == name}
        K = next(iter(mine.values()))["num_paths"]
        cells = [_cell(mine[size]) if size in mine else "not run" for size in BASE_SIZES]
        tried = [size for size in EXTRA_SIZES if size in mine]
        proved = [f"V={V} L={L} ({mine[(V, L)]['seconds']:.1f} s)" for V, L in tried
                  if mine[(V, L)]["verdict"] == "proved"]
        larger = ", ".join(proved) if proved else ("none" if tried else "not tried")
        lines.append(f"| {name} ({K}) | " + " | ".join(cells) + f" | {larger} |"
                     + (f" {_every_cell(every.get((name, 1)))} |" if every else ""))
    return "\n".join(head + lines)


def _every_cell(r) -> str:
    if r is None:
        return "not run"
    if r["verdict"] == "proved for every V":
        return (f"proved for every V (V*={r['cutoff_size']}; {r['queries_before_symmetry']} -> "
                f"{r['queries_after_symmetry']}, {r['seconds']:.1f} s)")
    return f"{r['verdict']}: {r['reason'][:60]}" if r["verdict"] == "no cutoff" else r["verdict"]


DOC_PATHS = ("docs/prove.md",)


def _where(records) -> str:
    """Whether `records` ran alone (their 1-minute load averages, kept in the JSON, decide it)."""
    loads = [r[k] for r in records for k in ("load_average_before", "load_average_after")]
    if max(loads) > QUIET_LOAD:
        return "while other jobs ran (indicative only)"
    return "with no other job running"


def update_docs(data, root) -> None:
    """Replace the measurement paragraph and the summary table in README.md and docs/prove.md
    (from "Measured with `python3 benchmarks/bench_prove.py" to the end of the table)."""
    timeouts = sorted({r["timeout_s"] for r in data["records"].values()})
    base = [r for r in data["records"].values() if (r["vocab_size"], r["draft_length"]) in BASE_SIZES]
    extra = [r for r in data["records"].values() if (r["vocab_size"], r["draft_length"]) not in BASE_SIZES]
    larger = (f" (then `--extra` for the larger sizes of {len({r['method'] for r in extra})} methods)" if extra
              else " (the larger sizes not run: `not tried`)")
    paragraph = ("Measured with `python3 benchmarks/bench_prove.py --fresh --all-vocab`" + larger
                 + f",\n{', '.join(f'{t:g}' for t in timeouts)} s limit per proof, on a "
                 f"{os.cpu_count()}-core machine: the base sizes {_where(base)}"
                 + (f";\nthe larger sizes {_where(extra)}" if extra else "") + ".\n"
                 "A cell gives verdict, wall time, branch points / leaves of the "
                 'merged branch tree; "float code": the rule computes in float64 and cannot run symbolically.')
    for name in DOC_PATHS:
        path = os.path.join(root, name)
        with open(path) as handle:
            text = handle.read()
        start = text.index("Measured with `python3 benchmarks/bench_prove.py")
        end = text.index("\n\n", text.index("| method (K) |", start))
        with open(path, "w") as handle:
            handle.write(text[:start] + paragraph + "\n\n" + summary_table(data) + text[end:])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--methods", default=",".join(PROVE_METHODS))
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--extra", action="store_true", help="also the larger sizes V=2 L=3, V=3 L=2, V=4 L=1")
    parser.add_argument("--all-vocab", action="store_true",
                        help="also the every-V verdict of each method (L = 1, 2 single-path; L = 1, K = 2 multi-path)")
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--table", action="store_true", help="print the recorded results as Markdown and exit")
    parser.add_argument("--summary", action="store_true",
                        help="print the method x size summary table (README, docs/prove.md) and exit")
    parser.add_argument("--update-docs", action="store_true",
                        help="rewrite the measurement paragraph and table of README.md and docs/prove.md from the JSON")
    return parser


def _load_data(args) -> dict:
    """The earlier run's records (unless --fresh), with this run's header fields."""
    data = {"records": {}}
    if os.path.exists(args.out) and not args.fresh:
        with open(args.out) as handle:
            data = json.load(handle)
    data.update({"version": __version__, "python": platform.python_version(), "solver": SOLVER,
                 "cpu_count": os.cpu_count(), "quiet_load": QUIET_LOAD,
                 "derived": {"queries_before_symmetry (fixed sizes)": "V ** (L + 1), the outputs of N = L + 1 tokens",
                             "queries_after_symmetry (fixed sizes)":
                                 "from a watched exploration: the number of output orbits (representatives(V, L + 1)) "
                                 "when the run is equivariant and K = 1, else V ** (L + 1); not a timed proof"}})
    return data


def _mark_contention(data: dict) -> None:
    """Say which sizes were timed while other processes competed for the CPU (load above QUIET_LOAD)."""
    loads = [r[k] for r in data["records"].values() for k in ("load_average_before", "load_average_after")]
    data["load_average_max"] = max(loads)
    data["contended"] = max(loads) > QUIET_LOAD
    data["contended_sizes"] = sorted({f"V={r['vocab_size']} L={r['draft_length']}"
                                      for r in data["records"].values()
                                      if max(r["load_average_before"], r["load_average_after"]) > QUIET_LOAD})
    data["note"] = ("times of the records at contended_sizes measured while other processes competed for "
                    "the CPU (see their load averages): indicative only" if data["contended"]
                    else "times measured on a quiet machine")


def _run_fixed_sizes(data: dict, names: list[str], args) -> None:
    """Prove each method at each fixed size not yet recorded, writing after each."""
    sizes = BASE_SIZES + (EXTRA_SIZES if args.extra else ())
    for name in names:
        K = 1 if name in SINGLE_PATH else 2
        for V, L in sizes:
            key = _key(name, V, L, K, args.timeout)
            if key in data["records"]:
                continue
            record = _record(name, V, L, K, args.timeout)
            data["records"][key] = record
            _mark_contention(data)
            write_json_atomic(args.out, data)
            print(f"{name:14s} V={V} L={L} K={K}  {record['verdict']:14s} {record['seconds']:7.2f} s  "
                  f"bp={record['branch_points']:5d} leaves={record['leaves']:5d} calls={record['solver_calls']:4d} "
                  f"load={record['load_average_before']:.1f}  {record['reason'][:90]}", flush=True)


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.update_docs:
        with open(args.out) as handle:
            update_docs(json.load(handle), os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        return 0
    if args.table or args.summary:
        with open(args.out) as handle:
            data = json.load(handle)
        print(markdown_table(data) + "\n\n" + all_vocab_table(data) if args.table else summary_table(data))
        return 0
    names = [n.strip() for n in args.methods.split(",") if n.strip()]
    unknown = set(names) - set(methods.names())
    if unknown:
        parser.error(f"--methods: unknown {sorted(unknown)}")
    data = _load_data(args)
    if args.all_vocab:
        _run_all_vocab(data, names, args.timeout, args.out)
    _run_fixed_sizes(data, names, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
