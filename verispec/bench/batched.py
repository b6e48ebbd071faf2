"""`verispec bench --batch-size 1,2,4,8`: batched speculative decoding, padded ("vanilla") vs
unpadded (EMS-SD, Ni et al. 2024, arXiv 2405.07542), each against batched target-only decoding at
the same batch size B, as in EMS-SD's Figure 1 (speedup vs B).

The first `prompts` HumanEval prompts (P, at least the largest B) are cut into consecutive batches
of B (P rounded down to a multiple of B), so every B decodes the same prompts. Per batch and
temperature, methods: ``target_only`` and, for every method (any of `BATCHED_METHODS`: chains,
multi-path rules, multi-draft selection, trees, prompt lookup; ``name:K=3,L=5`` as for `verispec
bench`, L defaulting to `draft_length` and K to the registry's), both implementations (KV
storages of `verispec.empirical.engine.decode`). Times are wall-clock of the
whole call (prefill included, the same prompts for all methods of a B); speedup = target-only's
time / the method's at the same B and T. Each record also keeps the KV accounting (padded slots
written, peak slots) and, at T = 0, whether every row equals batched target-only greedy.

Results: JSON written atomically after every record, resumable like `verispec bench`
(`benchmarks/results/bench_batched_<device>.json`), a table, and a plot of speedup vs B.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace

import torch

from ..empirical import methods
from ..empirical.engine import decode, target_only_method
from ..reference import registry
from ..reference.deprecation import deprecated
from .clocks import PeakMemory
from .config import BatchedBenchSettings
from .records import RecordKey, batched_record_key, load_results, save_results
from .report import pyplot, save_figure, table
from .run import default_output, environment, prepare, resolved_dtype
from .spec import BenchMethod, parse_method

__all__ = ["BatchedBenchConfig", "BATCHED_METHODS", "batched_method", "run_batch", "run_batched_bench",
           "summarize_batched", "format_batched_table", "plot_batched"]

#: The methods that decode a batch (registry names): every torch method but target-only (each
#: batch's baseline) and the phrase-pool ones, whose drafter holds one row's pool and sequence.
BATCHED_METHODS = tuple(name for name in registry.names("torch")
                        if registry.spec(name).family not in (registry.BASELINE, registry.PHRASE_POOL))
#: Implementation -> the engine's KV storage: padded rows (vanilla) or packed rows (EMS-SD).
STORAGES = {"vanilla": "vanilla", "packed": "packed"}
IMPLEMENTATIONS = tuple(STORAGES)
#: Deprecated implementation names -> the current ones (a label such as "block/ems" of an older results file).
RENAMED_IMPLEMENTATIONS = {"ems": "packed"}


@dataclass
class BatchedBenchConfig(BatchedBenchSettings):
    """What `run_batched_bench` measures (CLI: `verispec bench --batch-size ...`): the fields and
    defaults of `config.BatchedBenchSettings`, with the methods a run needs."""

    def identity(self) -> dict:
        """Fields every record depends on (a resumed file must share them)."""
        out = asdict(self)
        for name in ("threads", "prompts", "batch_sizes", "methods", "temperatures", "device_map", "batches"):
            out.pop(name)
        return out

    def check(self) -> None:
        """Raises ValueError naming the field: unknown or unbatched method, an option (dv, dq,
        lin), B < 1, fewer prompts than max B."""
        for m in self.methods:
            batched_method(m, self.draft_length)
        if not self.batch_sizes or any(not isinstance(b, int) or b < 1 for b in self.batch_sizes):
            raise ValueError(f"batch_sizes: expected ints >= 1, got {self.batch_sizes!r}")
        if not isinstance(self.batches, int) or self.batches < 0:
            raise ValueError(f"batches: expected an int >= 0 (0 = every batch), got {self.batches!r}")
        if self.prompts < max(self.batch_sizes):
            raise ValueError(f"prompts: {self.prompts} prompts cannot fill a batch of {max(self.batch_sizes)}")


def batched_method(text: str, draft_length: int) -> BenchMethod:
    """``"name"`` or ``"name:K=3,L=5"`` parsed as `verispec bench` does (`spec.parse_method`; L:
    `draft_length` unless set, K: the registry's default unless set).

    Raises:
        ValueError (naming ``methods``): an unknown method, one that does not batch (phrase pools,
            the peers, target-only: each batch's baseline, run anyway), or an option.
    """
    name = text.partition(":")[0] if isinstance(text, str) else text
    if name not in BATCHED_METHODS:
        raise ValueError(f"methods: {text!r} is not batched; known: {', '.join(BATCHED_METHODS)}")
    spec = parse_method(text, draft_length, registry.spec(name).defaults("torch").get("num_paths", 1))
    if spec.draft_vocab or spec.draft_quant or spec.linear_layout != "xw" or spec.draft_forward != "hf" \
            or spec.target_forward != "hf":
        raise ValueError(f"methods: {text!r}: the options dv, dq, lin, df and tf are not taken in batched mode")
    if spec.param("policy") == "auto":  # its cost model prices one row's forwards, not a batch's
        if "pol=auto" in text:
            raise ValueError(f"methods: {text!r}: the cost policy (pol=auto) is not taken in batched mode")
        spec = replace(spec, params=tuple((k, "fixed" if k == "policy" else v) for k, v in spec.params))
    return spec


def _methods(config):
    """The labels run per batch: target_only, then "name/implementation" for every method."""
    return [registry.BASELINE_METHOD] + [f"{m}/{impl}" for m in config.methods for impl in IMPLEMENTATIONS]


def run_batch(label: str, pair, batch: list, config: BatchedBenchConfig, T: float):
    """One batch through the engine's entry point, as the bench runs it: target-only on a padded
    KV, or a method with the implementation's KV storage (vanilla: padded; packed: EMS-SD).

    Args:
        label: ``"target_only"`` or ``"name/implementation"`` (``"block/packed"``, ``"gbv:K=3/vanilla"``;
            the implementation ``"ems"`` is the deprecated name of ``"packed"``: it warns).
        pair: a `ModelPair`. batch: the rows' prompt ids, each int64 [n_i]. config: the bench's
            configuration (max_new_tokens, draft_length, seed). T: temperature.

    Returns:
        `verispec.empirical.engine.decode`'s result (tokens int64 [B, max_new_tokens], stats).

    Raises:
        ValueError: an unknown or unbatched method (`batched_method`).
    """
    N = config.max_new_tokens
    if label == registry.BASELINE_METHOD:
        return decode(pair.target, None, batch, target_only_method(), N, T, uniforms=config.seed, storage="vanilla")
    text, _, implementation = label.rpartition("/")
    if implementation in RENAMED_IMPLEMENTATIONS:
        deprecated(f"the implementation {implementation!r}", repr(RENAMED_IMPLEMENTATIONS[implementation]))
        implementation = RENAMED_IMPLEMENTATIONS[implementation]
    spec = batched_method(text, config.draft_length)
    draft = pair.draft if registry.spec(spec.name).needs_draft else None
    return decode(pair.target, draft, batch, methods.get(spec.name, **dict(spec.params)), N, T,
                  uniforms=config.seed, storage=STORAGES[implementation])


def _record(result, memory) -> dict:
    s = result.stats
    return {"tokens": result.tokens.tolist(), "wall_s": s.wall_time_s, "prefill_s": s.prefill_time_s,
            "target_forwards": s.target_forwards, "draft_forwards": s.draft_forwards,
            "accepted_sum": float(s.accepted_lengths.double().sum()),
            "accepted_count": int(s.accepted_lengths.numel()),
            "padded_kv_slots": int(getattr(s, "padded_kv_slots", 0)),
            "peak_kv_slots": int(getattr(s, "peak_kv_slots", 0)), "peak_memory_mb": memory.peak_mb}


def run_batched_bench(config: BatchedBenchConfig, output: str | None = None, *, fresh: bool = False, pair=None,
                      prompts=None, progress=None, plot: bool = True) -> dict:
    """Run (or resume) the batched benchmark; returns the results dict (also written to `output`,
    default benchmarks/results/bench_batched_<device>.json). Arguments as `verispec.bench.run_bench`.

    Raises:
        ValueError: bad configuration (`BatchedBenchConfig.check`) or an output file from another one.
    """
    config.check()
    dtype, dtype_reason = resolved_dtype(config, pair)  # "auto": the host's (or the given models') dtype
    config = BatchedBenchConfig(**{**asdict(config), "dtype": dtype})
    output = output or default_output(config.device).replace("bench_real_", "bench_batched_")
    results = load_results(output, config, fresh)
    pair, prompts = prepare(config, pair, prompts)
    ids = [pair.tokenizer(p["prompt"], return_tensors="pt").input_ids[0] for p in prompts]  # each [n_i]
    results["environment"] = environment(config, torch.get_num_threads(), dtype_reason)
    small = BatchedBenchConfig(**{**asdict(config), "max_new_tokens": 2})
    for method in _methods(config):  # warm-up
        run_batch(method, pair, ids[:2], small, 1.0)
    for B in config.batch_sizes:
        for i in range(min(len(ids) // B, config.batches or len(ids))):
            for T in config.temperatures:
                for method in _methods(config):
                    key = batched_record_key(method, B, T, i)
                    if key in results["records"]:
                        continue
                    if progress:
                        progress(f"B={B} batch {i} {method} T={float(T):g}")
                    with PeakMemory(config.device) as memory:
                        result = run_batch(method, pair, ids[i * B:(i + 1) * B], config, float(T))
                    results["records"][key] = _record(result, memory)
                    save_results(output, results)
    results["summary"] = summarize_batched(results)
    save_results(output, results)
    if plot:
        results["plot"] = plot_batched(results["summary"], os.path.splitext(output)[0] + ".png")
    return results


def _decode_s(record: dict) -> float:
    """The decode phase of a record: wall time minus its prompt prefills (0 in files that predate
    `prefill_s`, so the decode speedup then equals the end-to-end one)."""
    return record["wall_s"] - record.get("prefill_s", 0.0)


def summarize_batched(results: dict) -> list[dict]:
    """One row per (method, B, T): tokens/s, speedup over target-only at the same B and T (over
    the batches both ran; `speedup` end to end, `decode_speedup` without the prompt prefills),
    block efficiency, padded KV slots per batch, peak KV slots, peak memory, and at T = 0 the
    fraction of rows equal to batched target-only greedy."""
    groups: dict = {}
    for text, record in results["records"].items():
        key = RecordKey.parse(text)
        groups.setdefault((key.label, key.batch_size, key.temperature), {})[key.task] = record
    rows = []
    baseline = registry.BASELINE_METHOD
    for (method, B, T), done in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0] != baseline)):
        base = groups.get((baseline, B, T), {})
        common = [b for b in done if b in base]
        if not common:
            continue
        tokens = sum(len(done[b]["tokens"]) * len(done[b]["tokens"][0]) for b in common)
        wall = sum(done[b]["wall_s"] for b in common)
        decode = sum(_decode_s(done[b]) for b in common)
        count = sum(done[b]["accepted_count"] for b in common)
        row = {"runner": method, "batch_size": B, "temperature": T, "batches": len(common), "tokens": tokens,
               "tokens_per_s": tokens / wall, "speedup": sum(base[b]["wall_s"] for b in common) / wall,
               "decode_speedup": sum(_decode_s(base[b]) for b in common) / decode,
               "block_efficiency": (sum(done[b]["accepted_sum"] for b in common) / count + 1.0)
               if method != baseline and count else 1.0,
               "padded_kv_slots": sum(done[b]["padded_kv_slots"] for b in common) / len(common),
               "peak_kv_slots": max(done[b]["peak_kv_slots"] for b in common),
               "peak_memory_mb": max((done[b]["peak_memory_mb"] or 0.0) for b in common)}
        if T == 0:
            pairs = [(r, s) for b in common for r, s in zip(done[b]["tokens"], base[b]["tokens"])]
            row["greedy_match_rate"] = sum(r == s for r, s in pairs) / len(pairs)
        rows.append(row)
    return rows


_COLUMNS = (("runner", "runner", "{}"), ("B", "batch_size", "{}"), ("T", "temperature", "{:g}"),
            ("batches", "batches", "{}"), ("block eff.", "block_efficiency", "{:.2f}"),
            ("tok/s", "tokens_per_s", "{:.2f}"), ("speedup (e2e)", "speedup", "{:.2f}x"),
            ("speedup (decode)", "decode_speedup", "{:.2f}x"),
            ("padded KV slots", "padded_kv_slots", "{:.0f}"), ("peak KV slots", "peak_kv_slots", "{}"),
            ("peak MB", "peak_memory_mb", "{:.0f}"), ("greedy match", "greedy_match_rate", "{:.0%}"))


def format_batched_table(summary: list[dict], title: str = "verispec bench --batch-size"):
    """A `rich.table.Table` of the summary rows."""
    return table(_COLUMNS, summary, title)


def plot_batched(summary: list[dict], path: str) -> str | None:
    """Speedup over batched target-only vs B, one line per (method, T); left end to end, right the
    decode phase (prompt prefills excluded) -> PNG path (None without matplotlib)."""
    plt = pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    lines = sorted({(r["runner"], r["temperature"]) for r in summary if r["runner"] != registry.BASELINE_METHOD})
    for ax, key, title in ((axes[0], "speedup", "end to end (prefill included)"),
                           (axes[1], "decode_speedup", "decode phase (prefill excluded)")):
        for method, T in lines:
            pts = sorted((r["batch_size"], r.get(key, r["speedup"])) for r in summary
                         if (r["runner"], r["temperature"]) == (method, T))
            ax.plot([b for b, _ in pts], [s for _, s in pts], marker="o", label=f"{method} T={T:g}")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size B")
        ax.set_title(title)
    axes[0].set_ylabel("speedup over batched target-only")
    axes[0].legend()
    fig.suptitle("batched speculative decoding: vanilla (padded) vs EMS-SD (unpadded)")
    fig.tight_layout()
    return save_figure(fig, path)
