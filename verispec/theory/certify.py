"""`verispec lp`: certify optimality claims with LPs on seeded random instances.

For each instance (target = models.random_tree(V, 2s), draft = models.random_tree(V, 2s + 1,
concentration), s = seed + i):

1. single path: the information-agnostic LP value (Thomas & Pal 2026, arXiv 2602.16961) must equal
   block verification's E[tau] (arXiv 2403.10444) within 1e-7; token-level E[tau] is reported with
   its gap to the optimum;
2. K > 1 paths: the multi-path LP bound must dominate the exactly enumerated E[tau] of every
   i.i.d.-path method (gbv, rrs, spectr, nss, traversal, khisti, optimal_is) up to 1e-7.
   SpecHub and rrsw draw their paths from other laws, which this bound does not cover; with K = 2
   SpecHub is certified against the same LP built from its own exact draft law
   (`frontier.draft_law_bound`).

With `--tv EPS` it prints the optimal lossy frontier BE*(EPS) instead (`lossy_command`).

Wiring (done by the CLI owner): `add_arguments(subparser)` then `run(args) -> exit code`
(0 = every certificate holds, 1 = some certificate failed).
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from ..reference import exact, methods, models
from ..atomic import write_json_atomic
from . import closed_forms, exact_lp, frontier, lossy_command, lp

#: |LP - block| and (method - bound) tolerances for a certificate to hold.
TOLERANCE = 1e-7

#: Multi-path methods whose drafts are K i.i.d. paths (the bound's assumption; rrsw is not).
IID_METHODS = ("gbv", "rrs", "spectr", "nss", "traversal", "khisti", "optimal_is")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``verispec lp`` on `subparsers` (its ``func``: `run`); returns its parser."""
    parser = subparsers.add_parser("lp", help="LP certificates: BV = LP optimum, multi-path methods under the bound; "
                                              "--tv EPS: the optimal lossy frontier BE*(EPS)")
    add_arguments(parser)
    parser.set_defaults(func=run)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the `verispec lp` options to `parser` (an argparse (sub)parser); returns it."""
    parser.add_argument("--vocab-size", type=int, default=3, help="V (default 3)")
    parser.add_argument("--draft-length", type=int, default=2, help="L (default 2)")
    parser.add_argument("--num-paths", type=int, default=2, help="K; 1 skips the multi-path bound (default 2)")
    parser.add_argument("--instances", type=int, default=5, help="number of random instances (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="first instance seed (default 0)")
    parser.add_argument("--concentration", type=float, default=1.0,
                        help="Dirichlet concentration of the draft model (default 1.0)")
    parser.add_argument("--json", metavar="PATH", default=None, help="write the results as JSON (atomically)")
    parser.add_argument("--tv", metavar="EPS", type=float, default=None,
                        help="instead: the optimal lossy frontier BE*(EPS), the best block efficiency of any "
                             "single-path verifier within total variation EPS of the target (--num-paths unused)")
    return parser


def _check(args):
    for name in ("vocab_size", "draft_length", "num_paths", "instances"):
        value = getattr(args, name)
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"--{name.replace('_', '-')}: must be an int >= 1, got {value!r}")
    if args.seed < 0:
        raise ValueError(f"--seed: must be >= 0, got {args.seed}")
    if not args.concentration > 0:
        raise ValueError(f"--concentration: must be > 0, got {args.concentration}")
    if getattr(args, "tv", None) is not None:
        closed_forms.check_tv_budget(args.tv, "--tv")


def certify_instance(vocab_size: int, draft_length: int, num_paths: int, seed: int,
                     concentration: float = 1.0) -> dict:
    """All certificates for one seeded instance, as a JSON-ready dict (values in accepted tokens,
    times in seconds). `ok` is False when a certificate fails."""
    V, L, K = vocab_size, draft_length, num_paths
    target = models.random_tree(V, 2 * seed)
    draft = models.random_tree(V, 2 * seed + 1, concentration)
    single = lp.single_path(target, draft, (), L)
    block = float(closed_forms.block_expected_accepted_length(target, draft, (), L))
    token = float(closed_forms.token_expected_accepted_length(target, draft, (), L))
    record = {
        "seed": seed, "vocab_size": V, "draft_length": L, "num_paths": K,
        "target": repr(target), "draft": repr(draft),
        "single_path": {"lp_value": single.value, "block": block, "token": token,
                        "token_gap": single.value - token, "lp_minus_block": single.value - block,
                        "ok": abs(single.value - block) <= TOLERANCE, "solver": single.solver,
                        "status": single.status, "solve_time": single.solve_time,
                        "num_variables": single.num_variables, "num_constraints": single.num_constraints},
    }
    record["single_path"]["exact"] = _exact_record(
        lambda: exact_lp.single_path_certificate(target, draft, (), L, single))
    ok = record["single_path"]["ok"]
    if K > 1:
        bound = lp.multi_path(target, draft, (), L, K)
        rows = {}
        for name in IID_METHODS:
            start = time.perf_counter()
            value = float(exact.expected_accepted_length(target, draft,
                                                         methods.get(name, draft_length=L, num_paths=K)))
            rows[name] = {"expected_accepted_length": value, "slack": bound.value - value,
                          "ok": value <= bound.value + TOLERANCE,
                          "enumeration_time": time.perf_counter() - start}
            ok = ok and rows[name]["ok"]
        record["multi_path"] = {"bound": bound.value, "method": bound.method, "solver": bound.solver,
                                "status": bound.status, "solve_time": bound.solve_time,
                                "rounds": bound.rounds, "num_variables": bound.num_variables,
                                "num_constraints": bound.num_constraints, "methods": rows,
                                "exact": _exact_record(lambda: exact_lp.multi_path_certificate(
                                    target, draft, (), L, K, bound))}
    if K == 2:
        record["own_law"] = _spechub_certificate(target, draft, L)
        ok = ok and record["own_law"]["ok"]
    record["ok"] = bool(ok)
    return record


def _exact_record(certify) -> dict:
    """An exact certificate (`exact_lp`) as JSON: certified, the exact value "a/b", or the reason."""
    start = time.perf_counter()
    try:
        cert = certify()
    except ValueError as err:  # too many subsets for the exact multi-path LP
        return {"certified": False, "reason": str(err), "time": time.perf_counter() - start}
    return {"certified": cert.certified, "value": None if cert.value is None else str(cert.value),
            "reason": cert.reason, "time": time.perf_counter() - start}


def _spechub_certificate(target, draft, L) -> dict:
    """SpecHub (K = 2, its own draft law) against the same LP built from its exact draft law."""
    method = methods.get("spechub", draft_length=L)
    start = time.perf_counter()
    try:
        bound = frontier.draft_law_bound(target, draft, method.draft, L)
    except ValueError as err:  # more than 16 possibly-drafted nodes at a depth: all subsets is too many
        return {"method": "spechub", "skipped": str(err), "ok": True}
    value = float(exact.expected_accepted_length(target, draft, method))
    return {"method": "spechub", "bound": bound, "expected_accepted_length": value,
            "ok": value <= bound + TOLERANCE, "time": time.perf_counter() - start}


def _print_table(records, console) -> None:
    table = Table(title="verispec lp: LP certificates (E\\[tau], accepted draft tokens)")
    columns = ["seed", "V,L,K", "block", "LP", "token gap", "bound"] + list(IID_METHODS) + \
        ["spechub / own bound", "LP s", "exact", "ok"]
    for col in columns:
        table.add_column(col, justify="right" if col not in ("ok",) else "center")
    for r in records:
        sp_ = r["single_path"]
        mp = r.get("multi_path")
        lp_cell = f"{sp_['lp_value']:.4f}" + ("" if sp_["ok"] else " FAIL")
        cells = [str(r["seed"]), f"{r['vocab_size']},{r['draft_length']},{r['num_paths']}",
                 f"{sp_['block']:.4f}", lp_cell, f"{sp_['token_gap']:.4f}",
                 "-" if mp is None else f"{mp['bound']:.4f}"]
        for name in IID_METHODS:
            m = None if mp is None else mp["methods"][name]
            cells.append("-" if m is None else f"{m['expected_accepted_length']:.4f}" + ("" if m["ok"] else " FAIL"))
        own = r.get("own_law")
        cells.append("-" if own is None or "skipped" in own else
                     f"{own['expected_accepted_length']:.4f} / {own['bound']:.4f}" + ("" if own["ok"] else " FAIL"))
        time_s = sp_["solve_time"] + (mp["solve_time"] if mp else 0.0)
        exact_ok = [sp_["exact"]["certified"]] + ([mp["exact"]["certified"]] if mp else [])
        cells += [f"{time_s:.3f}", "yes" if all(exact_ok) else "no", "yes" if r["ok"] else "FAIL"]
        table.add_row(*cells)
    console.print(table)
    if records and records[0].get("multi_path"):
        console.print(f"multi-path bound: {records[0]['multi_path']['method']} "
                      f"(solver {records[0]['multi_path']['solver']}); single path: "
                      f"{records[0]['single_path']['solver']}")


def run(args: argparse.Namespace) -> int:
    """Run the certificates described by `args` (from `add_arguments`); print a rich table; write
    JSON when --json is given. Returns 0 when every certificate holds, 1 otherwise, 2 on bad
    arguments (message on stderr)."""
    console = Console(width=max(Console().width, 150))  # full table when piped
    try:
        _check(args)
    except ValueError as err:
        Console(stderr=True).print(f"verispec lp: {err}")
        return 2
    if getattr(args, "tv", None) is not None:
        return lossy_command.run_frontier(args, console)
    records = [certify_instance(args.vocab_size, args.draft_length, args.num_paths, args.seed + i,
                                args.concentration) for i in range(args.instances)]
    _print_table(records, console)
    failed = [r["seed"] for r in records if not r["ok"]]
    summary = {"tolerance": TOLERANCE, "all_ok": not failed, "failed_seeds": failed, "instances": records}
    if args.json:
        write_json_atomic(args.json, summary)
    console.print("all certificates hold" if not failed else f"FAILED certificates for seeds {failed}")
    exact_ok = [r for r in records if r["single_path"]["exact"]["certified"]
                and ("multi_path" not in r or r["multi_path"]["exact"]["certified"])]
    console.print(f"LP optima certified exactly (rational primal and dual, equal objectives in Fractions) on "
                  f"{len(exact_ok)} of {len(records)} instances" + ("" if len(exact_ok) == len(records) else
                  "; the others are float64 solver values (see 'exact' in --json for the reason)"))
    return 0 if not failed else 1
