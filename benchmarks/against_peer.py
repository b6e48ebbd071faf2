"""How far is one runner from the peer at its best? Ratios over one or more `verispec bench` files.

For each results file and temperature, the peer at its best is the fastest runner whose label
starts with ``--peer`` (default ``hf``: transformers' assisted generation in its settings), picked
separately for decode and for end-to-end tokens/s over the prompts both runners decoded. Then:

- the runner's ratio: its tokens / seconds over those prompts, over the peer's (decode: the bench's
  `decode_tokens` / `decode_s`; end to end: `new_tokens` / `wall_s`);
- per prompt: the mean of the per-prompt ratios with a two-sided 95% Student-t interval (the
  prompts as independent draws; at T > 0 each runner samples its own continuation, so this
  interval, not the pooled ratio, says how sure a comparison is);
- pooled over every file given: the runner's total tokens over total seconds against the total of
  each file's own fastest peer on the same prompts.

Every figure is derived from the files' measured records; nothing is timed here.

    python3 benchmarks/against_peer.py benchmarks/results/epyc_eval_*_cpu.json \\
        --runner adaptive:dq=8,dv=32768,v=block,df=lean [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math

from scipy import stats

from verispec.atomic import write_json_atomic
from verispec.bench.records import records_by_runner

#: (tokens field, seconds field) of a bench record, per measure.
MEASURES = {"decode": ("decode_tokens", "decode_s"), "end_to_end": ("new_tokens", "wall_s")}


def rate(records, measure: str) -> float:
    """Tokens per second of the records (a list of bench records), `measure` one of `MEASURES`."""
    tokens, seconds = MEASURES[measure]
    return sum(r[tokens] for r in records) / sum(r[seconds] for r in records)


def interval(values: list) -> tuple:
    """(mean, low, high): a two-sided 95% Student-t interval of the mean; (mean, nan, nan) for one value."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, math.nan, math.nan
    low, high = stats.t.interval(0.95, len(values) - 1, loc=mean, scale=stats.sem(values))
    return mean, float(low), float(high)


def compare(runs: dict, runner: str, T: float, measure: str, peer: str = "hf") -> dict:
    """The runner against the fastest `peer` runner at temperature T in one file's `records_by_runner` table:
    {peer, prompts, ratio, per_prompt (mean, low, high), values (the per-prompt ratios), totals
    [runner's tokens, seconds, peer's tokens, seconds]}.

    Raises:
        ValueError: the runner or every peer runner is missing at T (naming which).
    """
    mine = runs.get((runner, T))
    if not mine:
        raise ValueError(f"runner: {runner!r} has no records at T = {T:g}")
    peers = [label for label, t in runs if t == T and label.startswith(peer) and set(runs[label, t]) & set(mine)]
    if not peers:
        raise ValueError(f"peer: no runner starting with {peer!r} shares a prompt with {runner!r} at T = {T:g}")

    def common(label):
        return sorted(set(mine) & set(runs[label, T]))

    best = max(peers, key=lambda label: rate([runs[label, T][t] for t in common(label)], measure))
    tasks = common(best)
    ours, theirs = [mine[t] for t in tasks], [runs[best, T][t] for t in tasks]
    values = [rate([a], measure) / rate([b], measure) for a, b in zip(ours, theirs)]
    tokens, seconds = MEASURES[measure]
    return {"peer": best, "prompts": len(tasks), "ratio": rate(ours, measure) / rate(theirs, measure),
            "per_prompt": interval(values), "values": values,
            "totals": [sum(r[tokens] for r in ours), sum(r[seconds] for r in ours),
                       sum(r[tokens] for r in theirs), sum(r[seconds] for r in theirs)]}


def pooled(rows: list) -> float:
    """The runner's total tokens / seconds over its peers' totals, from `compare` results."""
    a, s, b, u = (sum(row["totals"][i] for row in rows) for i in range(4))
    return (a / s) / (b / u)


def report(paths: list, runner: str, peer: str = "hf") -> dict:
    """{"files": {path: {T: {measure: compare(...)}}}, "pooled": {T: {measure: {ratio, per_prompt, prompts}}}}
    over the temperatures the runner has in every file."""
    tables = {}
    for path in paths:
        with open(path) as handle:
            tables[path] = records_by_runner(json.load(handle)["records"])
    temperatures = sorted(set.intersection(*({t for label, t in runs if label == runner} for runs in tables.values())))
    if not temperatures:
        raise ValueError(f"runner: {runner!r} has no temperature in common across the files")
    files = {path: {T: {m: compare(runs, runner, T, m, peer) for m in MEASURES} for T in temperatures}
             for path, runs in tables.items()}
    total = {}
    for T in temperatures:
        total[T] = {}
        for m in MEASURES:
            rows = [files[path][T][m] for path in paths]
            values = [v for row in rows for v in row["values"]]
            total[T][m] = {"ratio": pooled(rows), "per_prompt": interval(values), "prompts": len(values)}
    return {"runner": runner, "peer": peer, "files": files, "pooled": total}


def lines(result: dict) -> list:
    """The report as text lines: one per file, temperature and measure, then the pooled ones."""
    out = []
    for path, temps in result["files"].items():
        for T, measures in temps.items():
            for m, row in measures.items():
                mean, low, high = row["per_prompt"]
                out.append(f"{path} T={T:g} {m}: {row['ratio']:.3f}x {row['peer']} ({row['prompts']} prompts); "
                           f"per prompt {mean:.3f} [{low:.3f}, {high:.3f}]")
    for T, measures in result["pooled"].items():
        for m, row in measures.items():
            mean, low, high = row["per_prompt"]
            out.append(f"pooled T={T:g} {m}: {row['ratio']:.3f}x ({row['prompts']} prompts); "
                       f"per prompt {mean:.3f} [{low:.3f}, {high:.3f}]")
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="verispec bench results files (JSON)")
    parser.add_argument("--runner", required=True, help="the runner's label, as in the files")
    parser.add_argument("--peer", default="hf", help="the peer's label prefix (default hf)")
    parser.add_argument("--json", default=None, help="also write the report here")
    args = parser.parse_args(argv)
    result = report(args.files, args.runner, args.peer)
    print("\n".join(lines(result)))
    if args.json:
        write_json_atomic(args.json, result)
    return result


if __name__ == "__main__":
    main()
