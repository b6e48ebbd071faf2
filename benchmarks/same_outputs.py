"""Same outputs before and after a refactor: the verdicts and numbers of `verispec check`, `verispec
prove` and `verispec lp`, recorded from one checkout and compared with another's.

    python3 benchmarks/same_outputs.py record --output OUT.json [--timeout 60] [--only check,lp,prove,all_vocab]
        [--match REGEX]
    python3 benchmarks/same_outputs.py compare BEFORE.json AFTER.json [--diff OUT.diff]

`record` runs the `verispec` command of the checkout it is started from (`python3 -m verispec.cli`,
with that checkout first on PYTHONPATH) once per invocation below and keeps, for each, the exit
status, the printed lines and the JSON it wrote (`--json`), with every timing taken out of the
compared text and kept apart under `seconds`:

- `verispec check` at its defaults, with `--rational`, and on the rules declared lossy;
- `verispec lp` at its defaults and with `--tv 0.1`;
- `verispec prove NAME` for every method `benchmarks/bench_prove.py` measures, at its three base
  sizes (V, L) = (2, 1), (2, 2), (3, 1), K = 1 for single-path methods and 2 otherwise, with the
  time limit docs/prove.md uses (60 s); a proof that runs out of time is recorded as "unknown
  (time limit)" only, since what it reached by then depends on the machine's load;
- `verispec prove NAME --all-vocab` for the same methods at L = 1 (and L = 2 for single-path ones).

A command still running after 10 times the proof's limit (at least 600 s: a z3 call that does not
honour its own time limit on a loaded host) is stopped and recorded with exit "killed".

What is compared: exit statuses; printed lines with durations replaced by `<t>`, a table's time
column blanked and its border lines dropped, and the solver that answered a query dropped (z3 and
cvc5 race; either answer is the same verdict); JSON without its timings, load averages, solver
names and call counts. `compare` writes the unified diff of the two records (timings included, so
an empty diff "but for timings" shows as changed `seconds` lines only) and exits 1 when any line
other than a timing differs.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]  # this checkout's verispec and bench_prove

from bench_prove import ALL_VOCAB_LENGTHS, BASE_SIZES, PROVE_METHODS, SINGLE_PATH  # noqa: E402

from verispec.atomic import write_json_atomic  # noqa: E402

#: The rich tables' columns that hold a duration; their cells are blanked.
TIME_COLUMNS = ("time s", "LP s")
#: JSON keys whose values are timings or depend on the machine / solver race, not on the code.
DROPPED_KEYS = {"seconds", "time", "python", "version", "solver", "solvers", "answered_by", "solver_calls",
                "solver_checks", "found_by", "counterexample_found_by", "workers", "backend", "max_query_seconds"}
DURATION = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)? ?s\b")
ANSWERED = re.compile(r"\(portfolio: .*?; answered by [^)]*\)|\(z3[^;]*; answered by [^)]*\)")


def _dropped(key: str) -> bool:
    return key in DROPPED_KEYS or key.endswith(("_time", "_seconds", "load_average_before", "load_average_after"))


def normalise_json(value):
    """`value` without the keys of DROPPED_KEYS (recursively), and durations in strings as <t>."""
    if isinstance(value, dict):
        return {k: normalise_json(v) for k, v in sorted(value.items()) if not _dropped(k)}
    if isinstance(value, list):
        return [normalise_json(v) for v in value]
    if isinstance(value, str):
        return DURATION.sub("<t> s", value)
    return value


def _cells(line: str) -> list[str] | None:
    for bar in ("┃", "│"):
        if bar in line:
            return [cell.strip() for cell in line.split(bar)]
    return None


def normalise_lines(text: str) -> list[str]:
    """Printed lines without durations: table rows as their cells with the time columns blanked,
    border lines dropped, other lines with every duration written <t>."""
    blank: set = set()
    lines = []
    for line in text.splitlines():
        if not re.search(r"[A-Za-z0-9]", line):
            continue  # a table border or an empty line
        cells = _cells(line)
        if cells is None:
            lines.append(ANSWERED.sub("(<solvers>)", DURATION.sub("<t> s", line.rstrip())))
            continue
        blank |= {i for i, cell in enumerate(cells) if cell in TIME_COLUMNS}
        lines.append(" | ".join("<t>" if i in blank and not any(c in TIME_COLUMNS for c in cells) else cell
                                for i, cell in enumerate(cells)))
    return lines


def _verispec(argv: list[str], timeout: float) -> tuple[int, str, dict | None, float]:
    """Run `verispec ARGV --json TMP` from ROOT; its exit status, stdout, JSON (or None) and wall time."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "out.json")
        env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               "COLUMNS": "400", "TERM": "dumb"}
        start = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, "-m", "verispec.cli", *argv, "--json", path], cwd=ROOT, env=env,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:  # a solver call that ignored its own time limit
            return "killed", "", None, time.perf_counter() - start
        seconds = time.perf_counter() - start
        data = None
        if os.path.exists(path):
            with open(path) as handle:
                data = json.load(handle)
    return done.returncode, done.stdout, data, seconds


def _prove_json(data: dict | None) -> dict | None:
    """A proof's JSON; for a proof stopped by its time limit only the verdict and the word "time
    limit" (the outputs decided by then depend on the load)."""
    if data is None:
        return None
    out_of_time = data.get("verdict") == "unknown" and ("timeout" in data.get("reason", "")
                                                        or "undecided" in data.get("reason", ""))
    if out_of_time:
        return {"verdict": "unknown", "reason": "time limit"}
    return normalise_json(data)


def invocations(names, single_path) -> list[tuple[str, list[str]]]:
    """(label, argv) of every recorded invocation, in order."""
    runs = [("check", ["check"]), ("check --rational", ["check", "--rational"]),
            ("check lossy", ["check", "--method", "typical", "--method", "static_ensemble", "--method", "fsd"]),
            ("lp", ["lp"]), ("lp --tv 0.1", ["lp", "--tv", "0.1"])]
    for name in names:
        K = 1 if name in single_path else 2
        for V, L in BASE_SIZES:
            runs.append((f"prove {name} V={V} L={L} K={K}",
                         ["prove", name, "--vocab-size", str(V), "--draft-length", str(L), "--num-paths", str(K)]))
        for L in ALL_VOCAB_LENGTHS["single" if name in single_path else "multi"]:
            runs.append((f"prove {name} --all-vocab L={L} K={K}",
                         ["prove", name, "--all-vocab", "--draft-length", str(L), "--num-paths", str(K)]))
    return runs


def _kind(label: str) -> str:
    return "all_vocab" if "--all-vocab" in label else label.split()[0]


def record(output: str, timeout: float, only: set, commit: str | None = None, match: str = "") -> dict:
    """Run every invocation whose kind is in `only` (and whose label matches the regular expression
    `match`); write the record to `output` (atomically, after each). `commit` labels the checkout
    (default: its `git rev-parse HEAD`)."""
    if commit is None:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
    data = {"commit": commit, "prove_timeout_s": timeout, "runs": {}, "seconds": {}}
    start = time.perf_counter()
    for label, argv in invocations(PROVE_METHODS, SINGLE_PATH):
        if _kind(label) not in only or not re.search(match, label):
            continue
        if argv[0] == "prove":
            argv = argv + ["--timeout", f"{timeout:g}"]
        status, stdout, out, seconds = _verispec(argv, timeout=max(10 * timeout, 600))
        is_prove = argv[0] == "prove" and "--all-vocab" not in argv
        lines = normalise_lines(stdout)
        if is_prove and out is not None and _prove_json(out).get("reason") == "time limit":
            lines = [lines[0]]  # the verdict line only: the rest is what the time limit left
        data["runs"][label] = {"argv": argv, "exit": status, "lines": lines,
                               "json": _prove_json(out) if is_prove else normalise_json(out)}
        data["seconds"][label] = round(seconds, 2)
        data["total_seconds"] = round(time.perf_counter() - start, 1)
        write_json_atomic(output, data)
        print(f"{label:50s} exit {status!s:6s} {seconds:7.1f} s", flush=True)
    return data


def _text(data: dict) -> list[str]:
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False).splitlines(keepends=True)


#: The record's fields that hold timings or the commit: in the diff, never compared.
UNCOMPARED = ("commit", "seconds", "total_seconds")


def compare(before: dict, after: dict) -> tuple[list[str], list[str]]:
    """The unified diff of the two records (timings included) and the changed lines of their
    compared parts (everything but UNCOMPARED)."""
    diff = list(difflib.unified_diff(_text(before), _text(after), "before", "after", n=1))
    kept = [{k: v for k, v in data.items() if k not in UNCOMPARED} for data in (before, after)]
    changed = [line for line in difflib.unified_diff(_text(kept[0]), _text(kept[1]), n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    return diff, changed


def subset_changes(before: dict, after: dict) -> list[str]:
    """The labels recorded in `after` whose compared parts differ from `before`'s (for a partial run)."""
    return [label for label, run in after["runs"].items() if before["runs"].get(label) != run]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    rec = sub.add_parser("record", help="run the commands of this checkout and write the record")
    rec.add_argument("--output", required=True)
    rec.add_argument("--timeout", type=float, default=60.0, help="prove's time limit per proof (default 60 s)")
    rec.add_argument("--only", default="check,lp,prove,all_vocab", help="kinds to run (default all four)")
    rec.add_argument("--match", default="", help="only the invocations whose label matches this regular expression")
    rec.add_argument("--commit", default=None,
                     help="label of the checkout (default its git HEAD; for an exported tree without .git)")
    cmp = sub.add_parser("compare", help="diff two records; exit 1 when anything but a timing differs")
    cmp.add_argument("before")
    cmp.add_argument("after")
    cmp.add_argument("--diff", default=None, help="also write the unified diff to this file")
    args = parser.parse_args(argv)
    if args.mode == "record":
        record(args.output, args.timeout, set(args.only.split(",")), args.commit, args.match)
        return 0
    with open(args.before) as handle:
        before = json.load(handle)
    with open(args.after) as handle:
        after = json.load(handle)
    diff, changed = compare(before, after)
    if args.diff:
        with open(args.diff, "w") as handle:
            handle.writelines(diff)
    sys.stdout.writelines(diff)
    print(f"\n{len(changed)} changed line(s) other than timings" + (":" if changed else ""))
    sys.stdout.writelines(line if line.endswith("\n") else line + "\n" for line in changed)
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
