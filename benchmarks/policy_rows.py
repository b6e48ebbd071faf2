"""How far the cost policy's chains sit from the best fixed draft length, computed on the real pair's
measured next-token rows (`benchmarks/results/real_pair_rows.npz`) under a cost model. A
computation, not a timing: nothing here runs a model or a clock.

Model of a chain iteration that starts at position i of a prompt's recorded positions: its k-th
drafted token is drawn from the draft row of position i + k - 1 and accepted with probability
min(1, p(x) / q(x)) given the tokens before it were accepted (token verification, Leviathan et
al. 2023, arXiv 2211.17192), independently across positions. Two approximations, both stated in the
JSON: the rows are those of the TARGET's greedy continuation (at T > 0 a sampled continuation
would see other prefixes), and past the recorded positions a chain cannot grow (every rule is
capped alike). At T = 0 the draft proposes its argmax and it is accepted iff the target's argmax
is the same: exact along the greedy path; after a rejection the draft's own continuation is not
recorded, so its stop decisions read the target path's rows there (they change only its cost).

- Fixed length L (1..max_length): E[tokens] = 1 + sum_k prod_{j<k} alpha_{i+j}, alpha = the full
  row's sum min(p, q) (`sum_min_full`; at T = 0 the argmax agreement), seconds
  `CostModel.chain_seconds(L, n)`; exact.
- The policy (`verispec.reference.policy.keeps_drafting` on the drafted tokens' calibrated q(x)):
  Monte Carlo over the drafted tokens (--samples chains per start; the expected tokens of each
  drawn chain are taken exactly given its tokens, a Rao-Blackwellised estimate), with the
  calibration either its prior (the bin centres: where the engine starts) or "in_sample" (each
  bin's mean acceptance over these same rows: where the engine's online calibration tends, fitted
  in sample, so an optimistic bound on what online learning reaches).
  Tail draws (the merged token) have draft probability at most `tail_max_q`; they are given that
  (the policy is optimistic about them; they are rare: q_other).
- transformers' default stop (num_assistant_tokens 20, confidence 0.4, constant schedule), under
  the same model, for reference.

Rate = sum over starts of E[tokens] / sum over starts of E[seconds] (every start weighted alike:
a stationary approximation of a decode). Output: per cost model and temperature, every fixed L's
rate, the best L, the policy's rate with each calibration and its ratio to the best fixed L.

    python3 benchmarks/policy_rows.py [--costs COSTS.json ...] [--samples 400] [--max-length 20]
        [--output benchmarks/results/policy_rows.json]

Cost models: `--costs PATH` (a `CostModel.to_dict()` JSON as the bench caches them, or a file with
"cost_models": {id: model}, as `benchmarks/measure_costs.py` and the bench write them), or by
default the models derived from committed measurements (`derived_costs`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from verispec.atomic import write_json_atomic  # noqa: E402
from verispec.reference import policy  # noqa: E402
from verispec.reference.costs import CostModel, ForwardCost  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS = os.path.join(HERE, "results", "real_pair_rows.npz")
#: The cache length the prices are read at (HumanEval/0-3's prompts are 115-185 tokens long).
CACHE_LENGTH = 150


def derived_costs() -> dict:
    """{name: (CostModel, how it was derived)} from committed measurements (labelled, not measured here)."""
    out = {}
    with open(os.path.join(HERE, "results", "forward_times_cpu_avx2.json")) as handle:
        times = json.load(handle)
    runs = [r for r in times["runs"] if r["runner"].startswith("hf:dq=8")]
    target = [(rows, 0, s) for r in runs for rows, s in r["target_forwards"][1:]]  # the prompt's forward left out
    draft = [(1, 0, r["draft_one_row_mean_s"]) for r in runs]
    out["avx2_float32_int8_draft"] = (CostModel.fitted([("target", *t) for t in target] + [("draft", *d) for d in draft]),
                                      "fitted to benchmarks/results/forward_times_cpu_avx2.json: the target's timed "
                                      "forwards of hf:dq=8 (rows, seconds; float32) and its int8 draft's mean one-row "
                                      "forward; cache length not recorded there, so no per-position term")
    with open(os.path.join(HERE, "results", "bench_rows_cpu_avx512.json")) as handle:
        rows = json.load(handle)["target_forward_bf16"]["seconds"]
    knots = sorted((int(r), s) for r, s in rows.items())
    target = ForwardCost(tuple(r for r, _ in knots), tuple(s for _, s in knots), (0.0,) * len(knots))
    for ratio in (0.15, 0.3):
        draft = ForwardCost((1,), (ratio * knots[0][1],), (0.0,))
        out[f"avx512_bf16_draft_{ratio:g}"] = (CostModel(draft, target), (
            f"target: benchmarks/results/bench_rows_cpu_avx512.json's bf16 forwards of 1..16 rows; draft one-row "
            f"forward ASSUMED {ratio:g} x the target's one-row forward (no committed draft timing on that host)"))
    return out


def measured_costs(paths) -> dict:
    """{name: (CostModel, where from)} of the files given (a model, or a file's "cost_models")."""
    out = {}
    for path in paths:
        with open(path) as handle:
            data = json.load(handle)
        for ident, model in (data.get("cost_models") or {os.path.basename(path): data}).items():
            out[ident] = (CostModel.from_dict(model), f"measured: {path} ({ident}; key {model.get('key')})")
    return out


class _Prices:
    """A CostModel's chain prices at one cache length, tabulated (the rule only calls chain_seconds)."""

    def __init__(self, costs: CostModel, max_length: int, n: int):
        self.table = [costs.chain_seconds(d, n) for d in range(max_length + 2)]

    def chain_seconds(self, length, cache_length=0, paths=1):
        return self.table[length]


def prompt_rows(data: dict, T: float) -> list[list[dict]]:
    """Per prompt, per recorded position: {"alpha": its acceptance rate, "q" [k + 1]: the law of the
    drawn token (the kept tokens, then the merged tail), "accept" [k + 1]: each one's acceptance
    chance, "conf" [k + 1]: each one's draft probability} (T = 0: the argmax alone)."""
    at = data["temperature"] == np.float32(T if T > 0 else 1.0)
    prompts = []
    for prompt in sorted(set(data["prompt_index"][at].tolist())):
        sel = np.flatnonzero(at & (data["prompt_index"] == prompt))
        sel = sel[np.argsort(data["position"][sel])]
        prompts.append([_row(data, i, T) for i in sel])
    return prompts


def _row(data: dict, i: int, T: float) -> dict:
    p, q = data["p"][i].astype(np.float64), data["q"][i].astype(np.float64)  # [k] each
    if T == 0:  # the draft's argmax, accepted iff the target's argmax is the same; confidence at T = 1
        hit = float(np.argmax(p) == np.argmax(q))
        return {"alpha": hit, "q": np.array([1.0]), "accept": np.array([hit]), "conf": np.array([q.max()])}
    q_other, tail_min = float(data["q_other"][i]), float(data["tail_sum_min"][i])
    accept = np.minimum(1.0, np.divide(p, q, out=np.ones_like(p), where=q > 0))
    return {"alpha": float(data["sum_min_full"][i]), "q": np.append(q, q_other) / (q.sum() + q_other),
            "accept": np.append(accept, tail_min / q_other if q_other > 0 else 0.0),
            "conf": np.append(q, float(data["tail_max_q"][i]))}


def fixed_length(prompts, prices: _Prices, L: int) -> tuple[float, float]:
    """(sum of E[tokens], sum of seconds) over every start of a chain of up to L tokens."""
    tokens = seconds = 0.0
    for rows in prompts:
        for i in range(len(rows)):
            d = min(L, len(rows) - i)
            alphas = [rows[i + k]["alpha"] for k in range(d)]
            tokens += policy.expected_tokens(alphas)
            seconds += prices.chain_seconds(d)
    return tokens, seconds


def _draw_chain(rows, i, rule, rng, max_length) -> tuple[float, int]:
    """One drawn chain from start i cut by `rule(confidences) -> continue?` -> (E[tokens | chain], length)."""
    confidences, accepts = [], []
    while True:
        row = rows[i + len(accepts)]
        j = rng.choice(len(row["q"]), p=row["q"])
        confidences.append(float(row["conf"][j]))
        accepts.append(float(row["accept"][j]))
        if len(accepts) >= min(max_length, len(rows) - i) or not rule(confidences):
            return policy.expected_tokens(accepts), len(accepts)


def drawn_rate(prompts, prices: _Prices, rule, samples: int, max_length: int, seed: int = 0):
    """(sums of E[tokens] and of seconds over every start, standard error of the rate) of chains cut
    by `rule`, `samples` draws per start (one draw at T = 0: deterministic)."""
    rng = np.random.default_rng(seed)
    tokens, seconds, per_start = 0.0, 0.0, []
    for rows in prompts:
        for i in range(len(rows)):
            n = samples if len(rows[i]["q"]) > 1 else 1
            drawn = [_draw_chain(rows, i, rule, rng, max_length) for _ in range(n)]
            t = float(np.mean([x for x, _ in drawn]))
            s = float(np.mean([prices.chain_seconds(d) for _, d in drawn]))
            tokens, seconds = tokens + t, seconds + s
            per_start.append((t, s, float(np.var([x / prices.chain_seconds(d) for x, d in drawn])) / n))
    error = float(np.sqrt(sum(v for *_, v in per_start))) / len(per_start)  # delta method, rough
    return tokens, seconds, error


def learned_calibration(prompts, bins: int) -> policy.Calibration:
    """Each bin's mean acceptance of a drawn token over the rows (the prior's centre where empty)."""
    mass, hits = np.zeros(bins), np.zeros(bins)
    for rows in prompts:
        for row in rows:
            b = np.clip((row["conf"] * bins).astype(int), 0, bins - 1)
            np.add.at(mass, b, row["q"])
            np.add.at(hits, b, row["q"] * row["accept"])
    centres = (np.arange(bins) + 0.5) / bins
    return policy.Calibration(tuple(float(h / m) if m > 0 else float(c) for h, m, c in zip(hits, mass, centres)))


def evaluate(prompts, costs: CostModel, args) -> dict:
    """Every fixed L's rate, the best, the policy's with each calibration, and hf's default stop."""
    prices = _Prices(costs, max(args.max_length, 20), CACHE_LENGTH)  # 20: hf's default length
    fixed = {L: fixed_length(prompts, prices, L) for L in range(1, args.max_length + 1)}
    rates = {L: t / s for L, (t, s) in fixed.items()}
    best = max(rates, key=rates.get)
    out = {"fixed_rates": {str(L): r for L, r in rates.items()}, "best_fixed_length": best,
           "best_fixed_rate": rates[best]}
    for name, g in (("prior", policy.Calibration.prior(8)), ("in_sample", learned_calibration(prompts, 8))):
        def rule(conf, g=g):
            return policy.keeps_drafting([float(g(c)) for c in conf], prices, CACHE_LENGTH, args.max_length)
        t, s, err = drawn_rate(prompts, prices, rule, args.samples, args.max_length)
        out[f"policy_{name}"] = {"rate": t / s, "standard_error": err, "tokens_per_iteration": t / sum(
            len(r) for r in prompts), "ratio_to_best_fixed": (t / s) / rates[best],
            "calibration": [float(v) for v in g.values]}
    t, s, err = drawn_rate(prompts, prices, lambda conf: conf[-1] >= 0.4, args.samples, 20)
    out["hf_default_stop"] = {"rate": t / s, "standard_error": err, "ratio_to_best_fixed": (t / s) / rates[best]}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--costs", action="append", help="a CostModel JSON (default: the derived models)")
    parser.add_argument("--samples", type=int, default=400, help="drawn chains per start at T > 0")
    parser.add_argument("--max-length", type=int, default=20)
    parser.add_argument("--temperatures", type=lambda s: [float(x) for x in s.split(",")], default=[0.0, 0.7, 1.0])
    parser.add_argument("--output", default=os.path.join(HERE, "results", "policy_rows.json"))
    args = parser.parse_args(argv)
    data = dict(np.load(ROWS))
    models = derived_costs() if not args.costs else measured_costs(args.costs)
    out = {"command": "python3 benchmarks/policy_rows.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "rows": "benchmarks/results/real_pair_rows.npz", "cache_length": CACHE_LENGTH,
           "model": __doc__.split("\n\n")[1].replace("\n", " "), "results": {}}
    for name, (costs, how) in models.items():
        out["results"][name] = {"costs": how}
        for T in args.temperatures:
            result = evaluate(prompt_rows(data, T), costs, args)
            out["results"][name][f"T={T:g}"] = result
            print(f"{name} T={T:g}: best fixed L={result['best_fixed_length']} {result['best_fixed_rate']:.3f} tok/s; "
                  f"policy prior {result['policy_prior']['ratio_to_best_fixed']:.3f}x, in sample "
                  f"{result['policy_in_sample']['ratio_to_best_fixed']:.3f}x, hf stop "
                  f"{result['hf_default_stop']['ratio_to_best_fixed']:.3f}x", flush=True)
    write_json_atomic(args.output, out)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
