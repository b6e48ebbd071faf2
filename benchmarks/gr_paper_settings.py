"""Global Resolution at its paper's settings, on the real pair's rows: the time an exact solve takes
per node and the acceptance it reaches, beside the paper's claims.

Thomas & Pal, "Global Resolution: Optimal Multi-Draft Speculative Sampling via Convex Minimization"
(arXiv 2511.15898) claim, in their abstract, "the first multi-draft algorithm with 90% acceptance and
under 100 ms of overhead per generated token with negligible deviation from the target model
distribution", for n drafts drawn i.i.d. from one draft model, varying n and top-k draft sampling; their
solver "can be tuned to arbitrary accuracy" (an approximate solve). `global_resolution` here is an exact
construction in the same frame (`verispec.reference.verifiers.global_resolution`). This script runs it
at n in {2, 4, 5} drafts and draft top-k in {10, 100, 1000, none} on measured rows of the real pair:

- rows: a greedy target decode of the first `--prompts` HumanEval prompts, `--positions` positions each,
  both models fed the same prefix; p and q = softmax(logits / T) over the full vocabulary (V = 151,936)
  in float64 (`real_pair_rows.full_rows`). Top-k keeps the k most likely tokens of q (ties to the lower
  id) and renormalises; p stays whole.
- per row and setting (float64, one process): `build_ms`, building the resolution (`Resolution`: the
  target law and its realisation); `winner_ms`, the winner law of one drafted multiset (n i.i.d. draws
  from the truncated q, seeded); `acceptance` = sum min(p, y) of the realised law y (the one-step
  acceptance); `alpha_star`, the closed form min_H p(H) + 1 - q(H)^n (`closed_forms`), computed apart
  from the realisation; `greedy`, the optimal acceptance of Hu et al.'s greedy drafts (arXiv 2502.18779)
  from the same truncated q; `blends`, the realisation's depth in segments.

Timings are per node (one resolution and one winner law), not per generated token, and mean something
only on a quiet machine (the JSON records the load average before and after). Resumable: records already
in `--output` for the same settings are kept, and a prompt whose records are all there is not decoded.

    python3 benchmarks/gr_paper_settings.py --prompts 2 --positions 16 \
        --output benchmarks/results/gr_paper_settings_cpu_avx512.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import time
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from real_pair_rows import commit, full_rows  # noqa: E402
from verispec.atomic import write_json_atomic  # noqa: E402
from verispec.reference.verifiers.global_resolution import Resolution  # noqa: E402
from verispec.theory import closed_forms  # noqa: E402

CLAIMS = {
    "source": "Thomas & Pal, arXiv 2511.15898, abstract",
    "acceptance": "90% ('the first multi-draft algorithm with 90% acceptance')",
    "overhead": "under 100 ms of overhead per generated token",
    "accuracy": "an approximate solve, 'tuned to arbitrary accuracy', 'negligible deviation from the target "
                "model distribution'",
    "setting": "n draft tokens i.i.d. from a single draft model; n and top-k draft sampling varied; their "
               "target/draft pairs and hosts are not this file's",
}
FIELDS = {
    "build_ms": "measured: Resolution(p, q_k, n), the target law and its realisation, float64",
    "winner_ms": "measured: the winner law of one drafted multiset of n i.i.d. draws from q_k",
    "node_ms": "derived: build_ms + winner_ms, one verification node's selection cost",
    "acceptance": "computed: sum min(p, y) of the realised law y",
    "alpha_star": "computed: closed_forms.optimal_multidraft_acceptance(p, q_k, n), apart from the realisation",
    "greedy": "computed: closed_forms.greedy_draft_acceptance(p, q_k, n), Hu et al.'s greedy drafts",
    "blends": "computed: the realisation's number of blended segments",
}


def truncate_top_k(q: np.ndarray, k: int | None) -> np.ndarray:
    """q [V] float64 cut to its k most likely tokens (ties to the lower id) and renormalised; None or
    k >= V keeps q. Raises ValueError for k < 1."""
    if k is None or k >= len(q):
        return q
    if k < 1:
        raise ValueError(f"top_k: expected >= 1 or None, got {k}")
    keep = np.argsort(-q, kind="stable")[:k]  # [k]
    out = np.zeros_like(q)
    out[keep] = q[keep]
    return out / out.sum()


def measure_node(p: np.ndarray, q: np.ndarray, num_drafts: int, rng: np.random.Generator) -> dict:
    """One node of Global Resolution on rows p, q [V] (float64): timings, the realised acceptance and
    the closed forms it is checked against (module docstring)."""
    start = time.perf_counter()
    found = Resolution(p, q, num_drafts)
    built = time.perf_counter()
    counts = collections.Counter(rng.choice(len(q), size=num_drafts, p=q).tolist())
    winners = found.winner_probabilities(counts, q)
    done = time.perf_counter()
    acceptance = float(np.minimum(p, found.law).sum())
    return {"build_ms": 1e3 * (built - start), "winner_ms": 1e3 * (done - built),
            "node_ms": 1e3 * (done - start), "acceptance": acceptance,
            "alpha_star": float(closed_forms.optimal_multidraft_acceptance(p, q, num_drafts)),
            "greedy": float(closed_forms.greedy_draft_acceptance(p, q, num_drafts)),
            "winner_sum_error": abs(float(sum(winners)) - 1.0), "blends": len(found.nodes),
            "tie_runs": len(found.runs) - 1, "drafted_tokens": int((q > 0).sum())}


def setting_key(top_k, num_drafts: int) -> str:
    """The records' name of a setting, e.g. "top_k=10,n=4" ("none" for the whole vocabulary)."""
    return f"top_k={top_k or 'none'},n={num_drafts}"


def summarise(records: list[dict]) -> dict:
    """Per setting: medians and maxima of the timings, means of the acceptances, the largest gap
    between the realised acceptance and alpha*, and how often i.i.d. drafts beat greedy ones."""
    out = {}
    for key in dict.fromkeys(r["setting"] for r in records):
        rows = [r for r in records if r["setting"] == key]
        col = {name: [r[name] for r in rows] for name in rows[0] if name not in ("setting", "row")}
        out[key] = {"rows": len(rows),
                    **{f"{name}_median": statistics.median(col[name]) for name in ("build_ms", "winner_ms", "node_ms")},
                    **{f"{name}_max": max(col[name]) for name in ("build_ms", "winner_ms", "node_ms")},
                    "acceptance_mean": statistics.fmean(col["acceptance"]),
                    "alpha_star_mean": statistics.fmean(col["alpha_star"]),
                    "acceptance_minus_alpha_star_max": max(abs(a - b) for a, b in zip(col["acceptance"],
                                                                                   col["alpha_star"])),
                    "greedy_mean": statistics.fmean(col["greedy"]),
                    "iid_above_greedy_rows": sum(a > g for a, g in zip(col["alpha_star"], col["greedy"])),
                    "winner_sum_error_max": max(col["winner_sum_error"]),
                    "blends_median": statistics.median(col["blends"]),
                    "tie_runs_median": statistics.median(col["tie_runs"]),
                    "drafted_tokens_median": statistics.median(col["drafted_tokens"])}
    return out


def _settings(args) -> list:
    return [(k, n) for k in args.top_k for n in args.num_drafts]


def _load_previous(path: str, config: dict) -> list:
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        previous = json.load(handle)
    return previous["records"] if previous.get("config") == config else []


def run(args, command: str) -> dict:
    """Decode, measure every row at every setting, and return the results file's content (`command`:
    the invocation it records)."""
    import torch

    from verispec.bench.prompts import humaneval_prompts
    from verispec.bench.run import environment
    from verispec.bench.weights import load_pair
    from verispec.empirical.speedups.hardware import resolve_dtype

    config = {"prompts": args.prompts, "positions": args.positions, "temperatures": args.temperatures,
              "top_k": args.top_k, "num_drafts": args.num_drafts, "seed": args.seed}
    records = _load_previous(args.output, config)
    done = {(r["row"]["prompt"], r["row"]["position"], r["row"]["T"], r["setting"]) for r in records}
    torch.set_num_threads(args.threads)
    dtype, reason = resolve_dtype(args.dtype, "cpu")
    pair = load_pair(dtype=getattr(torch, dtype), device="cpu", progress=False)
    header = {"command": command, "commit": commit(), "config": config,
              "environment": environment(SimpleNamespace(device="cpu", dtype=dtype), args.threads, reason),
              "claims": CLAIMS, "fields": FIELDS, "load_average_before": os.getloadavg(),
              "rows": "greedy target decode, both models fed the same prefix; p whole, q cut to top_k and renormalised"}
    settings = _settings(args)
    for index, item in enumerate(humaneval_prompts(args.prompts)):
        wanted = {(item["task_id"], i, T, setting_key(k, n)) for i in range(args.positions)
                  for T in args.temperatures for k, n in settings}
        if wanted <= done:
            continue
        for position, T, p, q in full_rows(pair, item["prompt"], args.positions, args.temperatures):
            row = {"prompt": item["task_id"], "position": position, "T": T}
            if not records:
                measure_node(p, q, 2, np.random.default_rng(0))  # untimed warm-up
            for k, n in settings:
                if (row["prompt"], position, T, setting_key(k, n)) in done:
                    continue
                rng = np.random.default_rng([args.seed, index, position, k or 0, n])
                records.append({"setting": setting_key(k, n), "row": row,
                                **measure_node(p, truncate_top_k(q, k), n, rng)})
        write_json_atomic(args.output, _payload(header, records))
        print(f"{item['task_id']}: {len(records)} records", flush=True)
    return _payload(header, records)


def _payload(header: dict, records: list) -> dict:
    return {**header, "load_average_after": os.getloadavg(), "summary": summarise(records), "records": records}


def _ints_or_none(text: str) -> list:
    return [None if x in ("0", "none") else int(x) for x in text.split(",")]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--positions", type=int, default=16)
    parser.add_argument("--temperatures", type=lambda s: [float(x) for x in s.split(",")], default=[1.0])
    parser.add_argument("--top-k", type=_ints_or_none, default=[10, 100, 1000, None],
                        help="draft top-k values, comma-separated; 0 or none = the whole vocabulary")
    parser.add_argument("--num-drafts", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4, 5])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="auto", help="the bench's choice by default (bf16 on native-bf16 CPUs)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for the two models' forwards")
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else list(argv)
    out = run(args, "python3 " + " ".join([os.path.relpath(__file__, os.getcwd()), *given]))
    write_json_atomic(args.output, out)
    for key, row in out["summary"].items():
        print(f"{key:>22}: node {row['node_ms_median']:8.1f} ms median ({row['node_ms_max']:8.1f} max), "
              f"acceptance {row['acceptance_mean']:.4f} (alpha* {row['alpha_star_mean']:.4f}, greedy "
              f"{row['greedy_mean']:.4f}), blends {row['blends_median']:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
