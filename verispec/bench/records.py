"""The bench's results file: one JSON record per (method, temperature, prompt), written atomically
after each record, resumed by a rerun with the same configuration and refused for another one.

Layout (kept stable so committed result files stay readable): ``{"config": identity,
"records": {"label|T=t|task_id": record}, "pools": {"label|T=t": PhrasePool state},
"environment", "fields", "last_run", "summary"}``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace

from ..atomic import write_json_atomic
from ..empirical.drafters.phrases import PhrasePool
from .clocks import PeakMemory, PhaseClock
from .spec import BenchMethod, method_entry

__all__ = ["RECORD_SCHEMA", "RecordKey", "load_results", "save_results", "method_key", "record_key",
           "batched_record_key", "records_by_runner", "measured_record", "restore_pools", "save_pool"]

#: Version of the record layout (2: one timed span per record, split by `PhaseClock`; 3: adaptive,
#: hybrid and opt_tree run under the cost policy unless ``pol=fixed``, and ``hf`` takes assistant
#: settings); files of another version are refused on resume rather than mixed.
RECORD_SCHEMA = 3


def load_results(path, config, fresh) -> dict:
    """The results file at `path` to resume ({"config", "records", ...}), or a fresh one.

    Raises:
        ValueError: the file holds a run whose `config.identity()` differs (unless `fresh`).
    """
    if fresh or not os.path.exists(path):
        return {"config": config.identity(), "records": {}}
    with open(path) as handle:
        results = json.load(handle)
    if results.get("config") != config.identity():
        raise ValueError(f"output: {path} holds a run with another configuration; pass --fresh to "
                         "overwrite it or --output for a new file")
    return results


def save_results(path: str, results: dict) -> None:
    """Write `results` to `path` atomically (a reader never sees half a file)."""
    write_json_atomic(path, results)


@dataclass(frozen=True)
class RecordKey:
    """One record's key in a results file, as fields: ``label|T=t|task`` (`verispec bench`) or
    ``label|B=b|T=t|task`` (the batched bench: `batch_size` b, `task` the batch's index as text).
    ``str(key)`` is the text; `parse` reads it back."""

    label: str
    temperature: float
    task: str
    batch_size: int | None = None

    def __str__(self) -> str:
        batch = "" if self.batch_size is None else f"B={self.batch_size}|"
        return f"{self.label}|{batch}T={float(self.temperature):g}|{self.task}"

    @classmethod
    def parse(cls, key: str) -> "RecordKey":
        """The fields of a record key's text.

        Raises:
            ValueError (naming ``key``): not "label|T=t|task" or "label|B=b|T=t|task".
        """
        parts = key.split("|")
        try:
            if len(parts) == 3 and parts[1].startswith("T="):
                return cls(parts[0], float(parts[1][2:]), parts[2])
            if len(parts) == 4 and parts[1].startswith("B=") and parts[2].startswith("T="):
                return cls(parts[0], float(parts[2][2:]), parts[3], int(parts[1][2:]))
        except ValueError:
            pass
        raise ValueError(f"key: expected 'label|T=t|task' or 'label|B=b|T=t|task', got {key!r}")

    def relabelled(self, label: str) -> "RecordKey":
        """The same key for another runner `label` (e.g. its target-only twin)."""
        return replace(self, label=label)


def records_by_runner(records: dict) -> dict:
    """{(label, temperature): {task: record}}: a results file's records ("label|T=t|task") grouped
    by runner and temperature.

    Raises:
        ValueError (naming ``key``): a key that is not a record key (`RecordKey.parse`).
    """
    out: dict = {}
    for text, record in records.items():
        key = RecordKey.parse(text)
        out.setdefault((key.label, key.temperature), {})[key.task] = record
    return out


def method_key(label: str, T) -> str:
    """The key "label|T=.." of a method's pool, also the prefix of its records' keys."""
    return f"{label}|T={float(T):g}"


def record_key(label: str, T, task_id: str) -> str:
    """The key "label|T=..|task_id" of one record."""
    return str(RecordKey(label, T, task_id))


def batched_record_key(label: str, batch_size: int, T, index) -> str:
    """The key "label|B=..|T=..|index" of one batched-bench record (batch `index`)."""
    return str(RecordKey(label, T, str(index), batch_size))


def measured_record(spec: BenchMethod, result, memory: PeakMemory, clock: PhaseClock) -> dict:
    """One method's measurements on one prompt. Verifying calls: the target calls after the one
    that reads the prompt. That call emits tokens (the peer's first call; our first iteration,
    `engine.decode(verify_in_prefill=True)`), which then fall in the prefill phase; a separate
    prefill forward emits none."""
    stats = result.stats
    length = result.tokens.shape[1] if result.lengths is None else int(result.lengths[0])
    tokens = result.tokens[0, :length].tolist()  # the real tokens: up to EOS with stop_at_eos
    taus = stats.accepted_lengths.long()  # one per target call after a prefill (the peer: one per call)
    first = 0
    if spec.name.startswith("hf"):
        first, taus = int(stats.logs["call_tokens"][0]), taus[1:]
    elif int(stats.prompt_call_tokens.sum()):  # our first iteration read the prompt
        first, taus = int(stats.prompt_call_tokens[0]), taus[1:]
    record = {"tokens": tokens, "new_tokens": len(tokens), "wall_s": clock.total_s, "prefill_s": clock.prefill_s,
              "decode_s": clock.decode_s, "decode_tokens": len(tokens) - first, "prompt_call_tokens": first,
              "target_forwards": stats.target_forwards, "draft_forwards": stats.draft_forwards,
              "verify_calls": stats.target_forwards - 1, "verify_tokens": len(tokens) - first,
              "iterations": stats.iterations, "accepted_sum": float(taus.double().sum()),
              "accepted_count": int(taus.numel()), "peak_memory_mb": memory.peak_mb}
    if stats.storage:  # the engine's KV storage (`verispec.bench.dispatch.bench_storage`); not the peer's
        record["storage"] = stats.storage
    if stats.replayed_steps or stats.captured_steps:  # CUDA graphs (engine.decode(graphs=...))
        record.update(captured_steps=stats.captured_steps, replayed_steps=stats.replayed_steps)
    if spec.linear_layout != "xw":
        record["linear_layout"] = spec.linear_layout
    if spec.draft_forward != "hf":
        record["draft_forward"] = spec.draft_forward
    if spec.target_forward != "hf":
        record["target_forward"] = spec.target_forward
    if spec.param("policy") is not None:  # the draft length / node budget rule, and its cost model
        record["policy"] = spec.param("policy")
        if spec.cost_model:
            record["cost_model"] = spec.cost_model
    for name in ("chain_lengths", "tree_sizes"):  # what the drafter chose, per iteration
        if name in stats.logs:
            record[name] = [int(x) for x in stats.logs[name]]
    if spec.name.startswith("hf"):
        record["call_tokens"] = list(stats.logs["call_tokens"])
    if "top2_margins" in stats.logs:
        record["top2_margins"] = [round(float(m), 5) for m in stats.logs["top2_margins"][0]]
        record["runner_up_tokens"] = stats.logs["runner_up_tokens"][0].tolist()
    if "predicted_acceptance" in stats.logs:  # trees: the draft's own E[A] per iteration
        record["predicted_sum"] = float(stats.logs["predicted_acceptance"].double().sum())
        record["draft_rows"] = int(stats.draft_rows)
    for name in ("pool_lookups", "pool_hits"):
        if name in stats.logs:
            record[name] = int(stats.logs[name])
    for name in ("leaves_kept", "leaf_tokens"):  # runner-up leaves (policy auto, T = 0)
        if name in stats.logs:
            record[name] = int(stats.logs[name].sum())
    entry = method_entry(spec.name)
    if entry is not None and entry.keeps_pool and entry.needs_draft:  # phrase drafts: rows per draft forward vary
        record["draft_rows"] = int(stats.draft_rows)
    return record


def save_pool(results: dict, label: str, T, pool) -> None:
    """Store a phrase method's pool after its latest record, so a resumed run starts as warm."""
    results.setdefault("pools", {})[method_key(label, T)] = pool.state()


def restore_pools(results) -> dict:
    """{(label, T): PhrasePool} of the phrase methods' pools saved in `results` (each the pool
    after that method's last record), so that a resumed run continues with warm pools."""
    out = {}
    for key, state in results.get("pools", {}).items():
        label, _, T = key.rpartition("|T=")
        out[label, float(T)] = PhrasePool.from_state(state)
    return out
