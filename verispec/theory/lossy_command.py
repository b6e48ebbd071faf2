"""`verispec lp --tv EPS`: the optimal lossy frontier BE*(eps) (`lossy.lossy_single_path`) on the
seeded instances of `verispec lp` (target = models.random_tree(V, 2s), draft =
models.random_tree(V, 2s + 1, concentration)), with its checks:

- eps = 0 gives block verification's block efficiency (the lossless LP, arXiv 2602.16961);
- BE*(0) <= BE*(eps) <= L + 1, with equality on the right once eps >= TV(draft, target) on L tokens;
- at L = 1, BE*(eps) = 1 + min(1, sum min(p, q) + eps) (`closed_forms.optimal_lossy_acceptance`);
- the optimum certified in exact rationals (`lossy.lossy_certificate`).
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..atomic import write_json_atomic
from ..reference import exact, models
from . import closed_forms, lossy

#: Tolerance of every float check (block, bounds, closed form).
TOLERANCE = 1e-7


def frontier_instance(vocab_size: int, draft_length: int, seed: int, tv: float, concentration: float = 1.0) -> dict:
    """BE*(tv) and its checks for one seeded instance, as a JSON-ready dict (block efficiencies in
    tokens per target call); `ok` is False when a check fails."""
    V, L = vocab_size, draft_length
    target = models.random_tree(V, 2 * seed)
    draft = models.random_tree(V, 2 * seed + 1, concentration)
    lossless = lossy.lossy_single_path(target, draft, (), L, 0.0).value + 1
    result = lossy.lossy_single_path(target, draft, (), L, tv)
    best = result.value + 1
    block = float(closed_forms.block_expected_accepted_length(target, draft, (), L)) + 1
    full = float(exact.total_variation(exact.target_distribution(draft, (), L), exact.target_distribution(target, (), L)))
    checks = {"zero_budget_is_block": abs(lossless - block) <= TOLERANCE,
              "between_lossless_and_all": lossless <= best + TOLERANCE and best <= L + 1 + TOLERANCE,
              "all_accepted_past_tv_of_draft": tv < full or abs(best - (L + 1)) <= TOLERANCE}
    closed = None
    if L == 1:
        closed = 1 + float(closed_forms.optimal_lossy_acceptance(target.probs(()), draft.probs(()), tv))
        checks["closed_form"] = abs(best - closed) <= TOLERANCE
    cert = lossy.lossy_certificate(target, draft, (), L, tv, result)
    exact_value = None if cert.value is None else float(cert.value + 1)
    return {"seed": seed, "vocab_size": V, "draft_length": L, "tv": tv, "target": repr(target), "draft": repr(draft),
            "tv_draft_target": full, "block_efficiency_lossless": lossless, "block": block,
            "block_efficiency": best, "gain": best - lossless, "closed_form": closed,
            "exact": {"certified": cert.certified, "block_efficiency": exact_value, "reason": cert.reason},
            "solver": result.solver, "solve_time": result.solve_time, "num_variables": result.num_variables,
            "checks": checks, "ok": all(checks.values())}


def _print_table(records, tv, console) -> None:
    table = Table(title=f"verispec lp --tv {tv:g}: the optimal lossy frontier BE*(eps) (tokens per target call)")
    for col in ("seed", "V,L", "TV(draft, target)", "BE*(0) = block", f"BE*({tv:g})", "gain", "closed form",
                "exact", "ok"):
        table.add_column(col, justify="center" if col in ("exact", "ok") else "right")
    for r in records:
        table.add_row(str(r["seed"]), f"{r['vocab_size']},{r['draft_length']}", f"{r['tv_draft_target']:.4f}",
                      f"{r['block_efficiency_lossless']:.6f}", f"{r['block_efficiency']:.6f}", f"{r['gain']:.6f}",
                      "-" if r["closed_form"] is None else f"{r['closed_form']:.6f}",
                      "yes" if r["exact"]["certified"] else "no", "yes" if r["ok"] else "FAIL")
    console.print(table)


def run_frontier(args, console: Console) -> int:
    """`verispec lp --tv EPS` (arguments already validated): print BE*(EPS) per instance, write
    JSON when --json is given. Returns 0 when every check holds, 1 otherwise."""
    tv = float(args.tv)
    records = [frontier_instance(args.vocab_size, args.draft_length, args.seed + i, tv, args.concentration)
               for i in range(args.instances)]
    _print_table(records, tv, console)
    failed = [r["seed"] for r in records if not r["ok"]]
    if args.json:
        write_json_atomic(args.json, {"tv": tv, "tolerance": TOLERANCE, "all_ok": not failed,
                                      "failed_seeds": failed, "instances": records})
    certified = sum(r["exact"]["certified"] for r in records)
    for r in records:
        console.print(f"seed {r['seed']}: BE*({tv:g}) = {r['block_efficiency']:.6f}")
    console.print(f"BE*(eps) certified exactly (rational primal and dual of the LP on the exact binary rationals "
                  f"of the instance's float64 rows, renormalised exactly, and of eps) on {certified} of {len(records)} instances")
    console.print("all frontier checks hold" if not failed else f"FAILED frontier checks for seeds {failed}")
    return 0 if not failed else 1
