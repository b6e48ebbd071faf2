"""Explain the greedy divergences of a `verispec bench` run by reproducing them.

At T = 0 a lossless runner emits target-only's greedy tokens, but in bf16 the argmax of a
multi-row verification forward can differ from the 1-row forward's at a near-tie (other GEMM
summation orders). For every first divergence the bench reports (token index i, target-only's
token a, the runner's token b), this script re-runs BOTH decodes exactly as the bench ran them
(same runner, models, dtype, threads, seed) with a hook on the target that captures the forward
which decided token i: the forward holding the node at position n + i - 1 on the emitted path
(its ancestors in the forward are the emitted tokens). It reports, per side, that forward's rows
and the logit gap logit[a] - logit[b] there, and claims only what it reproduces:

- "reproduced near-tie": the re-run runner's deciding forward ranks b first, target-only's
  1-row forward ranks a first, and both gaps lie within `NEAR_TIE`;
- "reproduced, not a near-tie": both flips reproduce but a gap is wider (a real disagreement);
- "not reproduced": a re-run emits other tokens before i, or its deciding forward does not rank
  the recorded token first. Nothing is claimed about such a divergence.

A plain 1-row forward of the same prefix after a fresh prefill is reported too ("fresh_1_row").

    python3 benchmarks/explain_divergences.py [results.json] [--output out.json]

Reads benchmarks/results/bench_real_cpu.json by default; writes <results>_divergences.json.
Phrase runners (ouroboros, lookahead) restart from an empty pool here, so their divergences are
reproduced only when the pool the bench had does not matter.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from verispec.atomic import write_json_atomic  # noqa: E402
from verispec import bench  # noqa: E402


class TargetTap:
    """Forward hooks on `model.model` keeping, for every forward, the rows at `position` that lie
    on `sequence` (their token and every ancestor inside the forward equal the sequence's):
    `found` = [{"forward", "rows", "row", "logits" (float32 [V])}] in call order."""

    def __init__(self, model, position: int, sequence: list[int]):
        self.model, self.position, self.sequence = model, position, sequence
        self.found, self.forwards, self._pending = [], 0, None

    def __enter__(self):
        module = self.model.model
        self._handles = [module.register_forward_pre_hook(self._pre, with_kwargs=True),
                         module.register_forward_hook(self._post)]
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        return False

    def _pre(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)[0]  # [m]
        m = ids.shape[0]
        positions = kwargs.get("position_ids")
        if positions is not None:
            positions = positions.reshape(-1)[-m:].cpu()
        else:
            cache = kwargs.get("past_key_values")
            start = int(cache.get_seq_length()) if cache is not None else 0
            positions = torch.arange(start, start + m)
        self._pending = (ids.cpu(), positions, _block_ancestry(kwargs.get("attention_mask"), m))

    def _post(self, module, args, output):
        ids, positions, ancestry = self._pending
        logits = output.logits[0]  # [k, V]: the last k fed rows (generate keeps only the candidates')
        m, k = ids.shape[0], logits.shape[0]
        for j in (positions == self.position).nonzero().flatten().tolist():
            if j >= m - k and self._on_sequence(ids, positions, ancestry[j]):
                self.found.append({"forward": self.forwards, "rows": m, "row": j,
                                   "logits": logits[j - (m - k)].float().cpu()})
        self.forwards += 1

    def _on_sequence(self, ids, positions, ancestors) -> bool:
        seq = self.sequence
        return all(0 <= int(positions[a]) < len(seq) and int(ids[a]) == seq[int(positions[a])]
                   for a in ancestors.nonzero().flatten().tolist())


def _block_ancestry(mask, m: int) -> torch.Tensor:
    """bool [m, m]: which rows of the forward each row attends to (itself included): a 4D mask's
    last m columns (additive: 0 = allowed), causal for a 2D or absent mask."""
    if mask is not None and mask.dim() == 4:
        block = mask[0, 0, -m:, -m:]
        return (block == 0) if block.dtype != torch.bool else block
    return torch.ones(m, m, dtype=torch.bool).tril()


def replay(label: str, pair, prompt_ids, config, index: int, recorded: list[int]):
    """Re-run runner `label` at T = 0 as the bench did, capturing the forward that decided token
    `index` of `recorded` -> dict (tokens_match, found, rows, row, forwards_matching, logits)."""
    spec = bench.parse_method(label, config.draft_length, config.num_paths)
    n = prompt_ids.shape[1]
    sequence = prompt_ids[0].tolist() + list(recorded)
    with TargetTap(pair.target, n + index - 1, sequence) as tap:
        method_pair = bench.QuantizedDrafts().pair_for(spec, pair)  # dq=8: int8 draft
        result = bench.run_method(spec, method_pair, prompt_ids, config, 0.0, config.seed, {})
    tokens = result.tokens[0].tolist()
    out = {"tokens_match": tokens[:index + 1] == list(recorded[:index + 1]), "forwards_matching": len(tap.found)}
    if tap.found:
        last = tap.found[-1]  # the deciding forward: the last to hold the emitted node
        out.update(rows=last["rows"], row=last["row"], logits=last["logits"])
    return out


def _side(run: dict, a: int, b: int, expected: int) -> dict:
    """The report of one re-run: rows of its deciding forward, gap logit[a] - logit[b], argmax,
    and whether it reproduces the recorded token `expected`."""
    if "logits" not in run:
        return {"reproduced": False, "tokens_match": run["tokens_match"], "forwards_matching": 0}
    logits = run["logits"]
    argmax = int(logits.argmax())
    return {"reproduced": run["tokens_match"] and argmax == expected, "tokens_match": run["tokens_match"],
            "rows": run["rows"], "row": run["row"], "argmax": argmax, "gap": float(logits[a] - logits[b]),
            "forwards_matching": run["forwards_matching"]}


def fresh_one_row(pair, prompt_ids, prefix: list[int], a: int, b: int) -> dict:
    """A 1-row forward of the last prefix token after a fresh prefill of the rest."""
    seq = torch.tensor([prompt_ids[0].tolist() + list(prefix)], device=pair.target.device)  # [1, n + i]
    _, cache = pair.target.forward(seq[:, :-1])
    logits = pair.target.chain(cache, seq[:, -1:])[0, -1]  # [V]
    return {"argmax": int(logits.argmax()), "gap": float(logits[a] - logits[b])}


def explain_one(divergence: dict, runner: str, pair, prompt_ids, records: dict, config,
                near_tie: float = bench.NEAR_TIE) -> dict:
    """Reproduce one first divergence (`bench.greedy_match`'s entry) of `runner`; see the
    module docstring for the verdicts."""
    task, i = divergence["task_id"], divergence["index"]
    a, b = divergence["target_only_token"], divergence["token"]
    base_tokens = records[f"target_only|T=0|{task}"]["tokens"]
    method_tokens = records[f"{runner}|T=0|{task}"]["tokens"]
    base = _side(replay("target_only", pair, prompt_ids, config, i, base_tokens), a, b, a)
    method = _side(replay(runner, pair, prompt_ids, config, i, method_tokens), a, b, b)
    out = {"runner": runner, "task_id": task, "index": i, "target_only_token": a, "method_token": b,
           "target_only": base, "method": method, "fresh_1_row": fresh_one_row(pair, prompt_ids, base_tokens[:i], a, b)}
    if not (base["reproduced"] and method["reproduced"]):
        sides = [name for name, side in (("target_only", base), (runner, method)) if not side["reproduced"]]
        out.update(verdict="not reproduced", explained=False, why=f"re-run of {', '.join(sides)} does not "
                   "emit the recorded token from the recorded prefix")
    elif abs(base["gap"]) <= near_tie and abs(method["gap"]) <= near_tie:
        out.update(verdict="reproduced near-tie", explained=True,
                   why=f"the {method['rows']}-row forward ranks {b} over {a} by {-method['gap']:.4g}; "
                       f"target-only's {base['rows']}-row forward ranks {a} over {b} by {base['gap']:.4g}")
    else:
        out.update(verdict="reproduced, not a near-tie", explained=False,
                   why=f"gaps {base['gap']:.4g} (target-only) and {method['gap']:.4g} ({runner}) exceed {near_tie}")
    return out


def explain(results: dict, pair, prompts: dict, near_tie: float = bench.NEAR_TIE) -> list[dict]:
    """Every first divergence of the summary's T = 0 rows, reproduced (`explain_one`).
    prompts: {task_id: prompt text}."""
    fields = {f.name for f in dataclasses.fields(bench.BenchConfig)}
    config = bench.BenchConfig(**{k: v for k, v in results["config"].items() if k in fields})
    out = []
    for row in results["summary"]:
        for divergence in row.get("divergences", []):
            ids = pair.tokenizer(prompts[divergence["task_id"]], return_tensors="pt").input_ids
            out.append(explain_one(divergence, row["runner"], pair, ids.to(pair.target.device),
                                   results["records"], config, near_tie))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", default=os.path.join("benchmarks", "results", "bench_real_cpu.json"))
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    from verispec.bench.prompts import humaneval_prompts
    from verispec.bench.weights import load_pair

    with open(args.results) as handle:
        results = json.load(handle)
    threads = results.get("environment", {}).get("torch_threads")
    if threads:
        torch.set_num_threads(threads)  # CPU GEMM blocking, hence rounding, can depend on it
    cfg = results["config"]
    pair = load_pair(cfg["target"], cfg["draft"], dtype=getattr(torch, cfg["dtype"]), device=cfg["device"],
                     progress=False)
    prompts = {p["task_id"]: p["prompt"] for p in humaneval_prompts()}
    found = explain(results, pair, prompts)
    for item in found:
        print(f"{item['runner']} {item['task_id']} token {item['index']}: {item['verdict']}: {item['why']}")
    output = args.output or os.path.splitext(args.results)[0] + "_divergences.json"
    write_json_atomic(output, found)
    print(f"{sum(i['explained'] for i in found)}/{len(found)} divergences reproduced as near-ties; {output}")


if __name__ == "__main__":
    main()
