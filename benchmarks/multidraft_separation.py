"""Which multi-draft rules does a real-pair run separate? Paired per-prompt differences in block
efficiency against a baseline rule, with 95% confidence intervals, beside the one-step ordering
the reference computes exactly on measured target/draft rows.

    python3 benchmarks/multidraft_separation.py --bench benchmarks/results/bench_real_cpu_avx512_t1_verifiers.json \
        --rows benchmarks/results/real_pair_rows.npz --output OUT.json

Measured part (`--bench`, a `verispec bench` JSON at T = 1): for every method and prompt, block
efficiency = accepted tokens / iterations + 1. Each method is paired with `--baseline` (default
token) on the prompts both ran (same prompts, same seed): d_i = BE_method(i) - BE_baseline(i). The
95% interval is the paired t interval mean(d) +/- t_{0.975, n-1} s_d / sqrt(n) (scipy.stats.t);
"resolved" means the interval excludes 0; "resolved_holm" means the paired t test rejects a zero
mean difference at family-wise error 5% over all the methods of the file (Holm's step-down
procedure on the two-sided p-values), which guards the many comparisons of one file.
"prompts_to_resolve" is derived, not measured: ceil((t_{0.975, n-1} s_d / |mean(d)|)^2), the number
(at least 2) of prompts at which the interval's half-width would equal the mean difference if both
stayed as measured. Per-prompt differences are not independent draws of one
law across prompts of different difficulty; the pairing removes the prompt's own effect, which is
why the baseline runs on the same prompts.

Exact part (`--rows`, from `benchmarks/real_pair_rows.py`): on each measured (p, q) row at
temperature 1, the one-step (L = 1) acceptance probability of each rule with K i.i.d. drafts, from
the closed forms in `verispec.theory.closed_forms` (token: sum min(p, q); nss; rrs; rrsw; spectr;
alpha*, reached by optimal_is and global_resolution; hu_greedy's own greedy drafts), averaged over
the rows. `--rules ...,without_replacement_optimum` adds the optimum for K distinct draws (the
transport LP, one per row), against which Hu et al. (arXiv 2502.18779) compare i.i.d. drafts.
It is an exact ordering for one step on these rows, not a prediction of the L > 1 block efficiency
the bench measures; rows are the npz's truncation (top-k plus one merged token, whose error on
sum min(p, q) the npz states).

Stationary prediction (`--stationary-top-k k`, derived, not measured): for every rule of the bench
file at its own L and K, the exact block efficiency of one iteration when every position of every
draft path sees the same measured row (context-free target iid(p), draft iid(q), each cut to its
first k stored tokens plus one merged token), by exact enumeration of the numpy reference rule;
averaged over the rows. Unlike the one-step ordering, it follows how many paths survive to each
depth, which is what separates rules of equal one-step acceptance (optimal_is and
global_resolution both reach alpha* at every node, yet differ at L = 2). Beside each measured
paired interval it puts the predicted difference from the baseline, whether the interval contains
it, and Spearman's rank correlation of the two orderings. The model's assumption (one row for the
whole tree) is what real contexts break; the comparison says by how much.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from verispec.atomic import write_json_atomic  # noqa: E402
from verispec.bench.records import RecordKey  # noqa: E402

#: rule name -> one-step acceptance closed form in verispec.theory.closed_forms (None: K = 1 overlap).
ONE_STEP = {"token": None, "nss": "nss_acceptance", "rrs": "rrs_acceptance", "rrsw": "rrsw_acceptance",
            "spectr": "spectr_acceptance", "optimal_is": "optimal_multidraft_acceptance",
            "global_resolution": "optimal_multidraft_acceptance", "hu_greedy": "greedy_draft_acceptance"}

#: One-step optima that no rule of the bench is: computed only when `--rules` names them.
ONE_STEP_BOUNDS = {"without_replacement_optimum": "the transport LP's optimum for K distinct draws from q "
                                                  "(verispec.theory.lp.multidraft, replacement=False; HiGHS)"}


#: What each part of the output is: measured, or derived with its formula.
FIELDS = {
    "paired.mean_block_efficiency": "measured: per prompt, accepted tokens / iterations + 1 from the bench records; "
                                    "mean over the prompts both rules ran",
    "paired.mean_difference, ci_low, ci_high, p_value": "derived from the measured per-prompt differences: mean, "
                                                        "paired t interval, two-sided paired t test",
    "paired.prompts_to_resolve": "derived: max(2, ceil((t_{0.975, n-1} s_d / |mean(d)|)^2))",
    "exact_one_step, stationary_one_step": "derived: exact one-step acceptance (closed forms) on the measured rows; "
                                           "without_replacement_optimum, where asked for: "
                                           + ONE_STEP_BOUNDS["without_replacement_optimum"],
    "stationary_prediction": "derived: exact block efficiency of the reference rules under the stationary model "
                             "(every position sees the row's p and q), mean over the rows",
    "measured_vs_stationary.predicted_difference": "derived: stationary_prediction's difference from the baseline",
    "rank_agreement": "derived: scipy.stats.spearmanr of measured against predicted differences",
}


def per_prompt_block_efficiency(bench: dict, temperature: float = 1.0) -> dict:
    """{method label: {prompt id: block efficiency}} from a bench JSON's records at one T."""
    out: dict = {}
    for text, record in bench["records"].items():
        key = RecordKey.parse(text)
        if key.temperature != temperature or not record.get("accepted_count") or key.label == "target_only":
            continue  # target-only verifies no draft: its block efficiency is 1 by definition
        out.setdefault(key.label, {})[key.task] = record["accepted_sum"] / record["accepted_count"] + 1.0
    return out


def paired(values: dict, baseline: str, level: float = 0.95) -> list[dict]:
    """One row per method (baseline excluded): n, means, mean difference, its paired t interval."""
    from scipy import stats

    base = values[baseline]
    rows = []
    for method, by_prompt in sorted(values.items()):
        if method == baseline:
            continue
        common = sorted(set(by_prompt) & set(base))
        d = np.array([by_prompt[p] - base[p] for p in common])
        n = len(d)
        row = {"method": method, "baseline": baseline, "prompts": n,
               "mean_block_efficiency": float(np.mean([by_prompt[p] for p in common])) if n else None,
               "baseline_mean_block_efficiency": float(np.mean([base[p] for p in common])) if n else None,
               "mean_difference": float(d.mean()) if n else None}
        if n >= 2:
            t, spread = float(stats.t.ppf(0.5 + level / 2, n - 1)), float(d.std(ddof=1))
            half = t * spread / math.sqrt(n)
            row.update(ci_low=row["mean_difference"] - half, ci_high=row["mean_difference"] + half,
                       resolved=bool(row["mean_difference"] - half > 0 or row["mean_difference"] + half < 0),
                       p_value=_paired_p_value(d))
            if row["mean_difference"] != 0 and spread > 0:  # derived: same spread and mean assumed
                row["prompts_to_resolve"] = max(2, math.ceil((t * spread / abs(row["mean_difference"])) ** 2))
        rows.append(row)
    tested = [row for row in rows if "p_value" in row]
    for row, kept in zip(tested, holm([row["p_value"] for row in tested], 1 - level)):
        row["resolved_holm"] = kept
    return rows


def _paired_p_value(d) -> float:
    """Two-sided paired t p-value of differences d (scipy.stats.ttest_1samp of d against 0, which
    is ttest_rel of the two samples); 0 or 1
    when every difference is equal (scipy's NaN: no spread), as the interval is then a point."""
    from scipy import stats

    if np.all(d == d[0]):
        return 0.0 if d[0] != 0 else 1.0
    return float(stats.ttest_1samp(d, 0.0).pvalue)


def holm(p_values, alpha: float = 0.05) -> list[bool]:
    """Holm's step-down procedure (Holm 1979): which hypotheses are rejected at family-wise error
    rate alpha. The i-th smallest p-value (i = 0, 1, ...) is compared with alpha / (m - i); the first
    that fails stops the procedure, and it and every larger p-value are kept."""
    m = len(p_values)
    rejected = [False] * m
    for i, j in enumerate(sorted(range(m), key=lambda j: p_values[j])):
        if p_values[j] > alpha / (m - i):
            break
        rejected[j] = True
    return rejected


def truncated_row(data, r: int, top_k: int | None):
    """Row r of a real_pair_rows npz as (p, q), float64 [k + 1]: the first k = top_k stored tokens
    (stored by max(p, q) decreasing; every stored token when top_k is None) and one merged token
    holding the rest of each, renormalised (float32 storage)."""
    p, q = data["p"][r].astype(np.float64), data["q"][r].astype(np.float64)
    k = len(p) if top_k is None else min(top_k, len(p))
    p = np.append(p[:k], float(data["p_other"][r]) + p[k:].sum())
    q = np.append(q[:k], float(data["q_other"][r]) + q[k:].sum())
    return p / p.sum(), q / q.sum()


def one_step_ordering(rows_path: str, num_drafts: int, temperature: float = 1.0, rules=tuple(ONE_STEP),
                      top_k: int | None = None) -> dict:
    """{rule: mean one-step acceptance over the npz rows at `temperature`} and the rows used."""
    from verispec.theory import closed_forms, lp

    data = np.load(rows_path)
    keep = np.nonzero(np.isclose(data["temperature"], temperature))[0]
    sums = {rule: 0.0 for rule in rules}
    for r in keep:
        p, q = truncated_row(data, int(r), top_k)
        for rule in rules:
            if rule in ONE_STEP_BOUNDS:
                value = lp.multidraft(p, q, num_drafts, replacement=False).value
            elif ONE_STEP[rule] is None:
                value = np.minimum(p, q).sum()
            else:
                value = getattr(closed_forms, ONE_STEP[rule])(p, q, num_drafts)
            sums[rule] += float(value)
    return {"rows": int(len(keep)), "num_drafts": num_drafts, "temperature": temperature,
            "tokens_per_row": "every stored token + 1 merged" if top_k is None else f"top {top_k} + 1 merged",
            "mean_one_step_acceptance": {rule: sums[rule] / len(keep) for rule in rules}}


def reference_method(label: str, draft_length: int, num_drafts: int):
    """The numpy reference Method a bench label names, with the bench's L and K where it takes them
    (`verispec.bench.spec.parse_method`), less the torch twin's engine options.

    Raises:
        ValueError (naming ``methods``): an unknown method or key (`parse_method`).
    """
    from verispec.bench.spec import parse_method
    from verispec.reference import methods, registry

    spec = parse_method(label, draft_length, num_drafts)
    engine_only = registry.spec(spec.name).torch_only
    return methods.get(spec.name, **{k: v for k, v in spec.params if k not in engine_only})


def stationary_block_efficiency(p, q, labels, draft_length: int, num_drafts: int) -> list[float]:
    """Exact block efficiency E[tau] + 1 of one iteration of each labelled rule when every position
    of every draft path sees the same target row p and draft row q (context-free models `iid(p)`,
    `iid(q)`), by exact enumeration of the reference rule (`verispec.reference.exact`). For token
    this is Leviathan et al.'s (1 - a^(L+1)) / (1 - a) under their i.i.d. acceptance assumption
    (arXiv 2211.17192, Equation 1); for trees it follows how many paths reach each depth.

    Args:
        p, q: target and draft rows, float64 [V], each summing to 1. labels: bench method labels.
        draft_length, num_drafts: the bench's L and K.

    Returns:
        [block efficiency per label], floats.
    """
    from verispec.reference import exact, models

    target, draft = models.iid(p), models.iid(q)
    return [float(exact.block_efficiency(target, draft, reference_method(label, draft_length, num_drafts)))
            for label in labels]


def stationary_prediction(rows_path: str, labels, draft_length: int, num_drafts: int, top_k: int,
                          baseline: str = "token", temperature: float = 1.0, n_jobs: int = 1) -> dict:
    """The L > 1 block efficiency the reference predicts from the measured rows under a stationary
    model: per row, `stationary_block_efficiency` on its first `top_k` stored tokens plus one merged
    token; then the mean over rows, and each rule's predicted difference from `baseline`. Rows run
    in parallel with joblib (`n_jobs` processes)."""
    from joblib import Parallel, delayed

    if baseline not in labels:
        labels = [baseline, *labels]
    data = np.load(rows_path)
    keep = np.nonzero(np.isclose(data["temperature"], temperature))[0]
    rows = [truncated_row(data, int(r), top_k) for r in keep]
    per_row = np.array(Parallel(n_jobs=n_jobs)(
        delayed(stationary_block_efficiency)(p, q, labels, draft_length, num_drafts) for p, q in rows))  # [rows, rules]
    base = per_row[:, labels.index(baseline)]
    return {"rows": len(rows), "draft_length": draft_length, "num_drafts": num_drafts, "temperature": temperature,
            "tokens_per_row": f"top {top_k} + 1 merged", "model": "stationary: every position sees the row's p and q",
            "mean_block_efficiency": {label: float(per_row[:, i].mean()) for i, label in enumerate(labels)},
            "mean_difference": {label: float((per_row[:, i] - base).mean()) for i, label in enumerate(labels)
                                if label != baseline}}


def compare(paired_rows: list[dict], predicted: dict) -> list[dict]:
    """Per method: the measured paired difference and interval beside the stationary prediction's
    difference, and whether the interval contains it."""
    out = []
    for row in paired_rows:
        guess = predicted["mean_difference"].get(row["method"])
        if guess is None or "ci_low" not in row:
            continue
        out.append({"method": row["method"], "measured_difference": row["mean_difference"],
                    "ci_low": row["ci_low"], "ci_high": row["ci_high"], "predicted_difference": guess,
                    "prediction_inside_interval": bool(row["ci_low"] <= guess <= row["ci_high"])})
    return out


def rank_agreement(rows: list[dict]) -> dict:
    """Spearman's rank correlation (scipy.stats.spearmanr) between the measured and the predicted
    differences of `compare`'s rows, with its two-sided p-value and the number of rules."""
    from scipy import stats

    if len(rows) < 3:
        return {"rules": len(rows)}
    result = stats.spearmanr([r["measured_difference"] for r in rows], [r["predicted_difference"] for r in rows])
    return {"rules": len(rows), "spearman_rho": float(result.statistic), "p_value": float(result.pvalue),
            "inside_interval": sum(r["prediction_inside_interval"] for r in rows)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", required=True, help="verispec bench JSON with T = 1 records")
    parser.add_argument("--baseline", default="token")
    parser.add_argument("--rows", help="real_pair_rows.npz for the exact one-step ordering")
    parser.add_argument("--num-drafts", type=int, default=2)
    parser.add_argument("--rules", default=",".join(ONE_STEP),
                        help=f"rules of the exact part; also {', '.join(ONE_STEP_BOUNDS)} (an LP per row)")
    parser.add_argument("--top-k", type=int, help="exact part: keep the first k stored tokens per row, merge the rest")
    parser.add_argument("--stationary-top-k", type=int,
                        help="also predict L > 1 block efficiency of every bench rule on the rows under the "
                             "stationary model, rows cut to this many tokens + 1 merged (2 costs minutes)")
    parser.add_argument("--draft-length", type=int,
                        help="L of the stationary prediction (default: the bench file's draft_length)")
    parser.add_argument("--jobs", type=int, default=1, help="processes for the stationary prediction")
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    with open(args.bench) as f:
        bench = json.load(f)
    values = per_prompt_block_efficiency(bench)
    if args.baseline not in values:
        raise SystemExit(f"--baseline: {args.baseline!r} has no T = 1 records in {args.bench}")
    given = sys.argv[1:] if argv is None else list(argv)
    out = {"command": "python3 " + " ".join([os.path.relpath(__file__, os.getcwd()), *given]),
           "bench": args.bench, "interval": "paired t, 95%",
           "family": "resolved_holm: Holm step-down over the file's methods, family-wise error 5%", "fields": FIELDS,
           "paired": paired(values, args.baseline)}
    if args.rows:
        rules = tuple(r for r in args.rules.split(",") if r)
        unknown = [r for r in rules if r not in ONE_STEP and r not in ONE_STEP_BOUNDS]
        if unknown:
            raise SystemExit(f"--rules: no one-step closed form for {unknown}; known: "
                             f"{', '.join([*ONE_STEP, *ONE_STEP_BOUNDS])}")
        out["exact_one_step"] = one_step_ordering(args.rows, args.num_drafts, rules=rules, top_k=args.top_k)
    if args.stationary_top_k:
        if not args.rows:
            raise SystemExit("--stationary-top-k: needs --rows")
        labels = sorted(values)
        draft_length = args.draft_length or bench.get("config", {}).get("draft_length", 4)
        out["stationary_prediction"] = stationary_prediction(
            args.rows, labels, draft_length, args.num_drafts, args.stationary_top_k, args.baseline, n_jobs=args.jobs)
        out["stationary_one_step"] = one_step_ordering(args.rows, args.num_drafts, rules=rules,
                                                       top_k=args.stationary_top_k)
        out["measured_vs_stationary"] = compare(out["paired"], out["stationary_prediction"])
        out["rank_agreement"] = rank_agreement(out["measured_vs_stationary"])
    write_json_atomic(args.output, out)
    report(out)
    return 0


def report(out: dict) -> None:
    """Print the paired verdicts, the one-step ordering and the stationary comparison of `out`."""
    for row in out["paired"]:
        ci = f"[{row['ci_low']:+.3f}, {row['ci_high']:+.3f}]" if "ci_low" in row else "(n < 2)"
        holm_verdict = ", Holm: resolved" if row.get("resolved_holm") else ""
        print(f"{row['method']:28s} n={row['prompts']:3d} d={row['mean_difference']:+.3f} 95% CI {ci} "
              f"{'resolved' if row.get('resolved') else 'not resolved'}{holm_verdict}")
    if "exact_one_step" in out:
        ranked = sorted(out["exact_one_step"]["mean_one_step_acceptance"].items(), key=lambda kv: -kv[1])
        print("exact one-step acceptance:", ", ".join(f"{r} {v:.4f}" for r, v in ranked))
    for row in out.get("measured_vs_stationary", []):
        print(f"{row['method']:28s} measured {row['measured_difference']:+.3f} "
              f"[{row['ci_low']:+.3f}, {row['ci_high']:+.3f}], stationary model {row['predicted_difference']:+.3f}"
              f"{'' if row['prediction_inside_interval'] else '  (outside)'}")
    if out.get("rank_agreement", {}).get("spearman_rho") is not None:
        agree = out["rank_agreement"]
        print(f"rank agreement over {agree['rules']} rules: Spearman rho {agree['spearman_rho']:+.2f} "
              f"(p = {agree['p_value']:.2g}); {agree['inside_interval']} predictions inside the measured interval")


if __name__ == "__main__":
    sys.exit(main())
