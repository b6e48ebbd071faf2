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

Batched files (`verispec bench --batch-size`, records ``runner|B=..|T=..|batch``): each row that
differs from batched target-only's row of the same batch is reproduced the same way, by re-running
the whole batch on both sides (`bench.batched.run_batch`) with a tap on the batched KV storages'
`append` (`BatchTap`), which keeps the logits of the row's node at position n_row + i - 1 on the
row's emitted path. "target_only" is then batched target-only, and a row's "rows" are that row's
nodes in the deciding forward ("fed": every row's). A divergence at the first generated token of
a batch whose prompts have one length is not found (that prefill does not go through `append`).

Phrase-pool runners (ouroboros_phrase, lookahead) keep one pool per runner and temperature across
the bench's prompts, and cost-policy runners (``pol=auto``) a `PolicyMemory` (the calibration
carried from prompt to prompt), so the drafts at prompt k depend on prompts 0..k-1. Their re-run
first rebuilds that state (`PoolReplay`): it runs the runner at T = 0 on every earlier prompt of
the file, in the bench's order, and checks that each emits its recorded tokens ("pool" in the
report: the prompts re-run and whether they matched). A mismatch leaves the pool unknown, and the divergence is then
"not reproduced".
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from verispec.atomic import write_json_atomic  # noqa: E402
from verispec import bench  # noqa: E402
from verispec.bench import batched  # noqa: E402
from verispec.bench.costs import recorded_spec  # noqa: E402
from verispec.bench.records import RecordKey, batched_record_key, record_key  # noqa: E402
from verispec.empirical import kv  # noqa: E402
from verispec.empirical.drafters.phrases.pool import PhrasePool  # noqa: E402
from verispec.reference import registry  # noqa: E402


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
        cache = kwargs.get("cache", kwargs.get("past_key_values"))  # CausalLM passes it as `cache`
        if positions is not None:
            positions = positions.reshape(-1)[-m:].cpu()
        else:
            start = int(cache.get_seq_length()) if cache is not None else 0
            positions = torch.arange(start, start + m)
        self._pending = (ids.cpu(), positions, _block_ancestry(kwargs.get("attention_mask"), m, cache).cpu())

    def _post(self, module, args, output):
        ids, positions, ancestry = self._pending
        logits = output.logits[0]  # [k, V]: the last k fed rows (generate keeps only the candidates')
        m, k = ids.shape[0], logits.shape[0]
        for j in (positions == self.position).nonzero().flatten().tolist():
            if j >= m - k and bool(ancestry[j, j]) and self._on_sequence(ids, positions, ancestry[j]):
                self.found.append({"forward": self.forwards, "rows": m, "row": j,
                                   "logits": logits[j - (m - k)].float().cpu()})
        self.forwards += 1

    def _on_sequence(self, ids, positions, ancestors) -> bool:
        seq = self.sequence
        return all(0 <= int(positions[a]) < len(seq) and int(ids[a]) == seq[int(positions[a])]
                   for a in ancestors.nonzero().flatten().tolist())


def _block_ancestry(mask, m: int, cache=None) -> torch.Tensor:
    """bool [m, m]: which rows of the forward each row attends to (itself included): a 4D mask's
    last m columns (additive: 0 = allowed), causal for a 2D or absent mask. The static KV's mask
    ({"full_attention": [B, 1, m, S]} over the cache's slots) is read at the slots its nodes are
    written to (`cache.write`); a padding node (written to the trash slot) attends to no row, not
    even itself."""
    if isinstance(mask, dict):
        mask, slots = mask.get("full_attention"), getattr(cache, "write", None)
        if mask is not None and slots is not None:
            block = mask[0, 0, -m:][:, slots[0, -m:]]
            return (block == 0) if block.dtype != torch.bool else block
    if mask is not None and mask.dim() == 4:
        block = mask[0, 0, -m:, -m:]
        return (block == 0) if block.dtype != torch.bool else block
    return torch.ones(m, m, dtype=torch.bool).tril()


def uses_pool(label: str) -> bool:
    """Whether the bench keeps a phrase pool for runner `label` across prompts."""
    name = label.partition(":")[0]
    return name in registry.REGISTRY and registry.spec(name).keeps_pool


class PoolReplay:
    """The phrase pool a runner had in the bench before each prompt, rebuilt by re-running it at
    T = 0 on the file's prompts in order (one pass per runner, however many prompts ask).
    order: [(task_id, prompt ids [1, n])] as the bench ran them; records: the file's records."""

    def __init__(self, label: str, pair, config, order: list, records: dict, spec=None):
        self.label, self.pair, self.config, self.order, self.records = label, pair, config, order, records
        self.spec = spec or bench.parse_method(label, config.draft_length, config.num_paths)  # spec: with its costs
        self.pools: dict = {}  # {(label, T): PhrasePool or PolicyMemory}, as `bench.run_method` keeps them
        self.done, self.mismatch = 0, None

    def before(self, task: str) -> tuple[dict, dict]:
        """(pools to pass to `bench.run_method`: a copy of the runner's pool before `task`, report
        {"prompts_rerun", "tokens_match", "first_mismatch"})."""
        tasks = [t for t, _ in self.order]
        if task not in tasks:  # the file's last run did not list it: its pool is unknown
            return {}, {"prompts_rerun": 0, "tokens_match": False, "first_mismatch": f"{task} (not in last_run)"}
        while self.done < tasks.index(task):
            earlier, ids = self.order[self.done]
            result = bench.run_method(self.spec, self.pair, ids, self.config, 0.0, self.config.seed, self.pools)
            recorded = self.records.get(record_key(self.label, 0, earlier), {}).get("tokens")
            if self.mismatch is None and result.tokens[0].tolist() != recorded:
                self.mismatch = earlier
            self.done += 1
        state = {key: PhrasePool.from_state(pool.state()) if isinstance(pool, PhrasePool) else copy.deepcopy(pool)
                 for key, pool in self.pools.items()}
        return state, {"prompts_rerun": self.done, "tokens_match": self.mismatch is None,
                      "first_mismatch": self.mismatch}


def replay(label, pair, prompt_ids, config, index: int, recorded: list[int], pools: dict | None = None):
    """Re-run runner `label` (a label, or its `bench.BenchMethod` as the file ran it: its cost
    model attached) at T = 0 as the bench did (`pools`: its phrase pool then), capturing the
    forward that decided token `index` of `recorded` -> dict (tokens_match, found, rows, row,
    forwards_matching, logits)."""
    spec = label if isinstance(label, bench.BenchMethod) else bench.parse_method(
        label, config.draft_length, config.num_paths)
    n = prompt_ids.shape[1]
    sequence = prompt_ids[0].tolist() + list(recorded)
    with TargetTap(pair.target, n + index - 1, sequence) as tap:
        method_pair = bench.QuantizedDrafts().pair_for(spec, pair)  # dq=8: int8 draft
        result = bench.run_method(spec, method_pair, prompt_ids, config, 0.0, config.seed, pools or {})
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
                near_tie: float = bench.NEAR_TIE, base_runs: dict | None = None,
                pool_replay: PoolReplay | None = None) -> dict:
    """Reproduce one first divergence (`bench.greedy_match`'s entry) of `runner`; see the
    module docstring for the verdicts. base_runs: target-only's re-runs by (task, index), shared
    by the runners that diverge at the same token (one decode each). pool_replay: a phrase-pool
    runner's pools before each prompt. runner: a label or its `bench.BenchMethod` (`replay`)."""
    spec, runner = runner, getattr(runner, "label", runner)
    task, i = divergence["task_id"], divergence["index"]
    a, b = divergence["target_only_token"], divergence["token"]
    base_tokens = records[record_key("target_only", 0, task)]["tokens"]
    method_tokens = records[record_key(runner, 0, task)]["tokens"]
    base_runs = {} if base_runs is None else base_runs
    if (task, i) not in base_runs:
        base_runs[task, i] = replay("target_only", pair, prompt_ids, config, i, base_tokens)
    base = _side(base_runs[task, i], a, b, a)
    pools, pool = pool_replay.before(task) if pool_replay is not None else ({}, None)
    method = _side(replay(spec, pair, prompt_ids, config, i, method_tokens, pools), a, b, b)
    if pool is not None and not pool["tokens_match"]:
        method["reproduced"] = False  # the pool the bench had is unknown
    out = {"runner": runner, "task_id": task, "index": i, "target_only_token": a, "method_token": b,
           "target_only": base, "method": method, "fresh_1_row": fresh_one_row(pair, prompt_ids, base_tokens[:i], a, b)}
    if pool is not None:
        out["pool"] = pool
    return _verdict(out, base, method, runner, near_tie)


def _verdict(out: dict, base: dict, method: dict, runner: str, near_tie: float) -> dict:
    """`out` with verdict, explained and why, from the two sides' reports (`_side`)."""
    a, b = out["target_only_token"], out["method_token"]
    if out.get("pool") and not out["pool"]["tokens_match"]:
        out.update(verdict="not reproduced", explained=False, why=f"{runner}'s pool before this prompt is "
                   f"unknown: the rebuild failed at {out['pool']['first_mismatch']}")
    elif not (base["reproduced"] and method["reproduced"]):
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
    config = config_of(results, bench.BenchConfig)
    out, base_runs, pool_replays = [], {}, {}
    order = [(task, encode_prompt(pair, prompts[task])) for task in _bench_order(results)]
    for row in results["summary"]:
        runner = row["runner"]
        for divergence in row.get("divergences", []):
            spec = recorded_spec(runner, results, config.draft_length, config.num_paths)  # its cost model
            carries = uses_pool(runner) or spec.param("policy") == "auto"  # a pool or a PolicyMemory
            if carries and runner not in pool_replays:
                pool_replays[runner] = PoolReplay(runner, pair, config, order, results["records"], spec)
            ids = encode_prompt(pair, prompts[divergence["task_id"]])
            out.append(explain_one(divergence, spec, pair, ids, results["records"], config, near_tie, base_runs,
                                   pool_replays.get(runner)))
    return out


def config_of(results: dict, config_class):
    """The bench configuration (`bench.BenchConfig` or `bench.BatchedBenchConfig`) a results file
    was written with: its "config" less the keys the class does not take (the record schema)."""
    fields = {f.name for f in dataclasses.fields(config_class)}
    return config_class(**{k: v for k, v in results["config"].items() if k in fields})


def encode_prompt(pair, text: str) -> torch.Tensor:
    """A prompt's token ids as the bench feeds them: int64 [1, n] on the target's device."""
    return pair.tokenizer(text, return_tensors="pt").input_ids.to(pair.target.device)  # [1, n]


def _bench_order(results: dict) -> list[str]:
    """The file's prompts in the order the bench ran them (its last run's list, which a resumed
    run keeps)."""
    return list(results["last_run"]["prompts"])


class BatchTap:
    """While active, wraps the batched KV storages' `append` (`PaddedKV`, `PackedKV`): for the
    target's storage, keeps the logits of every fed node at a watched (row, position) whose
    ancestors in the forest hold that row's sequence. watch: {(row, position): sequence (prompt +
    recorded tokens), rows numbered as in the batch given to the run (finished rows leave the
    storage through `select`, which the tap follows); found: {(row, position): [{"forward", "rows",
    "fed", "logits"}]} in call order ("rows": the row's nodes in that forward, "fed": every row's)."""

    def __init__(self, model, watch: dict):
        self.model, self.watch = model, watch
        self.found = {key: [] for key in watch}
        self.forwards, self._tokens, self._rows, self._originals = 0, {}, {}, {}

    def __enter__(self):
        for cls in (kv.PaddedKV, kv.PackedKV):
            self._originals[cls] = (cls.append, cls.select)
            cls.append, cls.select = self._wrap(cls.append), self._wrap_select(cls.select)
        return self

    def __exit__(self, *exc):
        for cls, (append, select) in self._originals.items():
            cls.append, cls.select = append, select
        return False

    def _wrap(self, original):
        def append(storage, tokens, parents, real, logits_to_keep=0, chain=False):
            m, pos = storage.uncommitted, storage.pos.clone()  # before this forward
            logits = original(storage, tokens, parents, real, logits_to_keep, chain)
            if storage.model is self.model:
                self._see(storage, m, pos, tokens, logits)
            return logits
        return append

    def _wrap_select(self, original):
        def select(storage, rows):  # finished rows leave the batch: keep each row's original index
            original(storage, rows)
            if id(storage) in self._rows:
                self._rows[id(storage)] = self._rows[id(storage)][rows.cpu()]
        return select

    def _see(self, storage, m, pos, tokens, logits):
        """Record the watched nodes among the n new ones (forest: m earlier uncommitted + n)."""
        earlier = self._tokens.get(id(storage)) if m else tokens[:, :0]
        if earlier is None or earlier.shape[1] != m:  # a forest grown before the tap: matches nothing
            earlier = tokens.new_full((tokens.shape[0], m), -1)
        forest = torch.cat([earlier, tokens], 1).cpu()  # [B, m + n], every uncommitted node's token
        self._tokens[id(storage)] = forest
        ancestry = storage.ancestry.cpu()  # [B, m + n, m + n], after this forward's nodes were added
        depth = ancestry.sum(-1) - 1  # [B, m + n]
        real = storage.real[:, m:].cpu()  # [B, n]
        original = self._rows.setdefault(id(storage), torch.arange(tokens.shape[0])).tolist()  # [B]
        n, k = tokens.shape[1], logits.shape[1]  # logits: the last k columns
        for (row, position), sequence in self.watch.items():
            if row not in original:  # the row has finished
                continue
            r = original.index(row)
            for j in range(n - k, n):
                node = m + j
                if not real[r, j] or int(pos[r] + depth[r, node]) != position:
                    continue
                if all(int(pos[r] + depth[r, a]) < len(sequence)
                       and int(forest[r, a]) == sequence[int(pos[r] + depth[r, a])]
                       for a in ancestry[r, node].nonzero().flatten().tolist()):
                    self.found[row, position].append({
                        "forward": self.forwards, "rows": int(real[r].sum()), "fed": int(real.sum()),
                        "logits": logits[r, j - (n - k)].float().cpu()})
        self.forwards += 1


def replay_batched(label: str, pair, batch: list, config, watch: dict, recorded: list) -> dict:
    """Re-run one batch at T = 0 as the batched bench did (`bench.batched.run_batch`), tapping the
    target's forwards -> {(row, position): run dict as `replay` returns}. recorded: every row's
    recorded tokens; a run matches a row when it emits that row's tokens up to the watched one."""
    with BatchTap(pair.target, watch) as tap:
        result = batched.run_batch(label, pair, batch, config, 0.0)
    tokens = result.tokens.tolist()
    out = {}
    for (row, position), found in tap.found.items():
        index = position - len(batch[row]) + 1
        run = {"tokens_match": tokens[row][:index + 1] == list(recorded[row][:index + 1]),
               "forwards_matching": len(found)}
        if found:  # the deciding forward: the last to hold the emitted node
            run.update(rows=found[-1]["rows"], row=row, fed=found[-1]["fed"], logits=found[-1]["logits"])
        out[row, position] = run
    return out


def batched_divergences(results: dict) -> dict:
    """{(B, batch): [(runner, row, index)]}: every first divergence of a T = 0 batched record from
    batched target-only's record of the same batch."""
    out: dict = {}
    for text, record in sorted(results["records"].items()):
        key = RecordKey.parse(text)
        if key.label == "target_only" or key.temperature != 0:
            continue
        base = results["records"][str(key.relabelled("target_only"))]["tokens"]
        for row, (mine, theirs) in enumerate(zip(record["tokens"], base)):
            index = bench.first_divergence(mine, theirs)
            if index is not None:
                out.setdefault((key.batch_size, int(key.task)), []).append((key.label, row, index))
    return out


def explain_batched(results: dict, pair, prompts: list, near_tie: float = bench.NEAR_TIE) -> list[dict]:
    """Every first divergence of a batched bench file (`verispec bench --batch-size`), reproduced
    by re-running the batch (both sides) with `BatchTap`; verdicts as `explain_one`.
    prompts: the bench's prompts in order ({"task_id", "prompt"})."""
    config = config_of(results, bench.BatchedBenchConfig)
    records, out = results["records"], []
    for (B, batch), found in batched_divergences(results).items():
        items = prompts[batch * B:(batch + 1) * B]
        ids = [pair.tokenizer(p["prompt"], return_tensors="pt").input_ids[0] for p in items]  # each [n_i]
        base_tokens = records[batched_record_key("target_only", B, 0, batch)]["tokens"]
        watch = {(row, len(ids[row]) + i - 1): ids[row].tolist() + base_tokens[row] for _, row, i in found}
        base_runs = replay_batched("target_only", pair, ids, config, watch, base_tokens)
        for runner in dict.fromkeys(runner for runner, _, _ in found):  # one re-run per runner and batch
            method_tokens = records[batched_record_key(runner, B, 0, batch)]["tokens"]
            rows = {row: i for name, row, i in found if name == runner}
            mine = {(row, len(ids[row]) + i - 1): ids[row].tolist() + method_tokens[row] for row, i in rows.items()}
            method_runs = replay_batched(runner, pair, ids, config, mine, method_tokens)
            for row, i in rows.items():
                key, a, b = (row, len(ids[row]) + i - 1), base_tokens[row][i], method_tokens[row][i]
                base, method = _side(base_runs[key], a, b, a), _side(method_runs[key], a, b, b)
                item = {"runner": runner, "batch_size": B, "batch": batch, "row": row,
                        "task_id": items[row]["task_id"], "index": i, "target_only_token": a, "method_token": b,
                        "target_only": base, "method": method,
                        "fresh_1_row": fresh_one_row(pair, ids[row].unsqueeze(0), base_tokens[row][:i], a, b)}
                out.append(_verdict(item, base, method, runner, near_tie))
    return out


def is_batched(results: dict) -> bool:
    """Whether a results file comes from the batched bench (record keys runner|B=..|T=..|batch)."""
    return any(RecordKey.parse(key).batch_size is not None for key in results["records"])


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
    if is_batched(results):
        found = explain_batched(results, pair, humaneval_prompts())
    else:
        found = explain(results, pair, {p["task_id"]: p["prompt"] for p in humaneval_prompts()})
    for item in found:
        where = f"B={item['batch_size']} row {item['row']} " if "batch_size" in item else ""
        print(f"{item['runner']} {where}{item['task_id']} token {item['index']}: {item['verdict']}: {item['why']}")
    output = args.output or os.path.splitext(args.results)[0] + "_divergences.json"
    write_json_atomic(output, found)
    print(f"{sum(i['explained'] for i in found)}/{len(found)} divergences reproduced as near-ties; {output}")


if __name__ == "__main__":
    main()
