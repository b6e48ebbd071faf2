"""Attention cost of a batch of rows of different lengths: packed varlen vs padded vs dense block-diagonal.

EMS-SD (Ni et al. 2024, arXiv 2405.07542) packs B rows into one sequence (batch dimension 1). How
the attention of one decoding step is computed there decides whether packing pays:

- ``packed_varlen``: `verispec.empirical.speedups.attention.varlen_attention`, each row's q new tokens attend
  to that row's own s_b cached slots and new tokens only (per-row SDPA);
  scores per head = sum_b q (s_b + q);
- ``dense_block_diagonal``: the same packed tensors through transformers' SDPA attention function
  with a [1, 1, Q, K + Q] additive block-diagonal mask (Q = B q, K = sum_b s_b);
  scores = Q (K + Q), about B times the useful work;
- ``padded``: the [B, S_max + q] layout of vanilla batching through the same SDPA function with a
  [B, 1, q, S_max + q] additive mask; scores = B q (S_max + q).

The three compute the same outputs (the largest difference to `padded` is recorded). Shapes are the
target's (Qwen2.5-1.5B: 12 query heads, 2 KV heads, head dim 128); row lengths are "equal" (every
row S) or "ragged" (row b holds round(S (b + 1) / B) slots, B > 1). Each record is the median of
`--repeats` timed calls of ONE layer's attention after one warm-up; `prepare_s` is the per-forward
setup (the `PackedRows` or the mask), shared by all layers. The `scores` fields are derived from the
formulas above, not measured; so is the `summary` section (per row length: time by B, time per
row, and each variant relative to packed_varlen at the largest B), computed from the records.

Results go to benchmarks/results/bench_attention_cpu.json (atomic write after every record; a rerun
with the same configuration resumes, skipping measured records). The host's CPU capability
(`torch.backends.cpu.get_cpu_capability()`), its AVX-512-BF16 / AMX flags and the load average
before and after are recorded: timings are only meaningful on an otherwise idle machine.

    python3 benchmarks/bench_attention.py [--batches 1,2,4,8] [--lengths 128,512,2048]
        [--new-tokens 5] [--dtypes float32,bfloat16] [--threads N] [--repeats 7] [--out PATH] [--fresh]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from types import SimpleNamespace

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from verispec.atomic import resume_json, write_json_atomic  # noqa: E402
from verispec.empirical.speedups.attention import packed_rows, varlen_attention  # noqa: E402
from verispec.empirical.model import additive_mask  # noqa: E402

SCHEMA = "verispec.bench_attention/1"
VARIANTS = ("packed_varlen", "dense_block_diagonal", "padded")
PROFILES = ("equal", "ragged")
DEFAULT_OUT = os.path.join(os.path.dirname(__file__), "results", "bench_attention_cpu.json")
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "amx_int8")


# ----------------------------------------------------------------------------------------------
# Host
# ----------------------------------------------------------------------------------------------

def host_info() -> dict:
    """CPU model, capability and flags, core/thread counts, library versions."""
    flags, model = set(), platform.processor()
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
                elif line.startswith("model name") and model in ("", platform.processor()):
                    model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    import transformers

    return {"cpu_model": model, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cpu_flags": {flag: flag in flags for flag in CPU_FLAGS}, "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "platform": platform.platform()}


def load_average():
    try:
        return list(os.getloadavg())
    except OSError:
        return None


# ----------------------------------------------------------------------------------------------
# One case: tensors of the three layouts
# ----------------------------------------------------------------------------------------------

def row_lengths(profile: str, batch: int, length: int) -> list[int]:
    """Cached slots per row: "equal" (all `length`) or "ragged" (linearly spread up to `length`)."""
    if profile == "equal":
        return [length] * batch
    return [max(1, round(length * (b + 1) / batch)) for b in range(batch)]


def make_case(lengths, q, heads, kv_heads, head_dim, dtype, seed=0) -> dict:
    """Random per-row queries/keys/values laid out three ways (packed: rows' cached slots then the
    packed new tokens; padded: right-padded rows) plus what each variant needs."""
    g = torch.Generator().manual_seed(seed)
    B, S_max = len(lengths), max(lengths)
    rows_q = [torch.randn(1, heads, q, head_dim, generator=g).to(dtype) for _ in lengths]
    rows_k = [torch.randn(1, kv_heads, s + q, head_dim, generator=g).to(dtype) for s in lengths]
    rows_v = [torch.randn(1, kv_heads, s + q, head_dim, generator=g).to(dtype) for s in lengths]

    def packed(per_row):  # every row's cached slots, then every row's new tokens: [1, H_kv, K + Q, D]
        cached = [x[:, :, :s] for x, s in zip(per_row, lengths)]
        return torch.cat(cached + [x[:, :, s:] for x, s in zip(per_row, lengths)], 2)

    packed_k, packed_v = packed(rows_k), packed(rows_v)
    padded_k = torch.zeros(B, kv_heads, S_max + q, head_dim, dtype=dtype)  # [B, H_kv, S_max + q, D]
    padded_v = torch.zeros_like(padded_k)
    valid = torch.zeros(B, S_max, dtype=torch.bool)  # [B, S_max]
    for b, s in enumerate(lengths):
        padded_k[b, :, :s], padded_k[b, :, S_max:] = rows_k[b][0, :, :s], rows_k[b][0, :, s:]
        padded_v[b, :, :s], padded_v[b, :, S_max:] = rows_v[b][0, :, :s], rows_v[b][0, :, s:]
        valid[b, :s] = True
    return {"lengths": lengths, "q": q, "dtype": dtype, "heads": heads, "kv_heads": kv_heads,
            "packed_q": torch.cat(rows_q, 2), "packed_k": packed_k, "packed_v": packed_v,
            "owner": torch.arange(B).repeat_interleave(torch.tensor(lengths)),  # [K]
            "new_rows": torch.arange(B).repeat_interleave(q),  # [Q]
            "padded_q": torch.cat(rows_q, 0), "padded_k": padded_k, "padded_v": padded_v, "valid": valid,
            "scale": head_dim ** -0.5}


def dense_mask(case) -> torch.Tensor:
    """[1, 1, Q, K + Q]: own row's cache and own row's causal new tokens (the old packed mask)."""
    rows, owner = case["new_rows"], case["owner"]
    Q = rows.numel()
    idx = torch.arange(Q)
    past = rows.view(Q, 1) == owner.view(1, -1)
    new = (rows.view(Q, 1) == rows.view(1, Q)) & (idx.view(1, Q) <= idx.view(Q, 1))
    return additive_mask(torch.cat([past, new], 1), case["dtype"])[None, None]


def padded_mask(case) -> torch.Tensor:
    """[B, 1, q, S_max + q]: the row's valid cache and its causal new tokens."""
    valid, q = case["valid"], case["q"]
    B = valid.shape[0]
    causal = torch.ones(q, q, dtype=torch.bool).tril()
    allowed = torch.cat([valid.unsqueeze(1).expand(B, q, -1), causal.expand(B, q, q)], 2)
    return additive_mask(allowed, case["dtype"]).unsqueeze(1)


def _sdpa_function():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward


def variant_calls(case, variant):
    """(prepare() -> state, run(state) -> output [B or 1, tokens, H, D], derived scores per head)."""
    module = SimpleNamespace(num_key_value_groups=case["heads"] // case["kv_heads"], is_causal=True, training=False)
    q, lengths, scale = case["q"], case["lengths"], case["scale"]
    if variant == "packed_varlen":
        return (lambda: packed_rows(case["owner"], case["new_rows"]),
                lambda spec: varlen_attention(case["packed_q"], case["packed_k"], case["packed_v"], spec, scale),
                sum(q * (s + q) for s in lengths))
    sdpa = _sdpa_function()
    if variant == "dense_block_diagonal":
        Q, K = q * len(lengths), sum(lengths)
        return (lambda: dense_mask(case),
                lambda mask: sdpa(module, case["packed_q"], case["packed_k"], case["packed_v"], mask, scaling=scale)[0],
                Q * (K + Q))
    if variant == "padded":
        return (lambda: padded_mask(case),
                lambda mask: sdpa(module, case["padded_q"], case["padded_k"], case["padded_v"], mask, scaling=scale)[0],
                len(lengths) * q * (max(lengths) + q))
    raise ValueError(f"variant: expected one of {', '.join(VARIANTS)}, got {variant!r}")


def _median_time(fn, repeats: int) -> tuple[float, float]:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def measure(case, variant, repeats: int) -> tuple[dict, torch.Tensor]:
    """One record (timings in seconds) and the variant's output, [B, q, H, D] in row order."""
    prepare, run, scores = variant_calls(case, variant)
    with torch.inference_mode():
        prepare_s, _ = _median_time(prepare, repeats)
        state = prepare()
        median_s, min_s = _median_time(lambda: run(state), repeats)
        out = run(state)
    if out.shape[0] == 1:  # packed [1, Q, H, D] -> [B, q, H, D]
        out = out.view(len(case["lengths"]), case["q"], *out.shape[2:])
    return {"median_s": median_s, "min_s": min_s, "prepare_s": prepare_s, "repeats": repeats,
            "scores_per_head_derived": int(scores)}, out


# ----------------------------------------------------------------------------------------------
# The sweep, resumable
# ----------------------------------------------------------------------------------------------

def record_key(dtype: str, profile: str, batch: int, length: int) -> str:
    return f"{dtype}|{profile}|B={batch}|S={length}"


def _load(path: str, config: dict, fresh: bool) -> dict:
    """The records of `path` to resume by key ({} when there is none, or with `fresh`).
    Raises ValueError naming output for a file of another schema or configuration (kept)."""
    old = resume_json(path, {"schema": SCHEMA, "config": config}, fresh)
    return {r["key"]: r for r in (old or {}).get("records", [])}


def run(batches, lengths, new_tokens=5, dtypes=("float32", "bfloat16"), heads=12, kv_heads=2, head_dim=128,
        repeats=7, threads=None, out=DEFAULT_OUT, fresh=False, log=print) -> dict:
    """Measure every (dtype, profile, B, S) case; write `out` after each; returns the payload.

    Raises:
        ValueError naming the argument: a batch, length, new_tokens, repeats or head count < 1,
        heads not a multiple of kv_heads, an unknown dtype.
    """
    for name, values in (("batches", batches), ("lengths", lengths), ("new_tokens", [new_tokens]),
                         ("repeats", [repeats]), ("heads", [heads, kv_heads, head_dim])):
        if not values or any(not isinstance(v, int) or v < 1 for v in values):
            raise ValueError(f"{name}: expected integers >= 1, got {values!r}")
    if heads % kv_heads:
        raise ValueError(f"heads: {heads} is not a multiple of kv_heads {kv_heads}")
    for dtype in dtypes:
        if not isinstance(getattr(torch, str(dtype), None), torch.dtype) or not getattr(torch, dtype).is_floating_point:
            raise ValueError(f"dtypes: unknown floating dtype {dtype!r} (e.g. float32, bfloat16)")
    if threads:
        torch.set_num_threads(threads)
    config = {"batches": list(batches), "lengths": list(lengths), "new_tokens": new_tokens, "dtypes": list(dtypes),
              "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim, "repeats": repeats,
              "threads": torch.get_num_threads()}
    done = _load(out, config, fresh)
    payload = {"schema": SCHEMA, "config": config, "host": host_info(), "load_average_start": load_average(),
               "records": list(done.values()), "complete": False}
    for dtype in dtypes:
        for profile in PROFILES:
            for B in batches:
                for S in lengths:
                    key = record_key(dtype, profile, B, S)
                    if key in done or (profile == "ragged" and B == 1):
                        continue
                    payload["records"].append(_measure_case(key, dtype, profile, B, S, config, repeats, log))
                    write_json_atomic(out, payload)
    payload["complete"], payload["load_average_end"] = True, load_average()
    payload["summary"] = summarise(payload["records"])
    write_json_atomic(out, payload)
    return payload


def summarise(records) -> dict:
    """Derived from the records: per "dtype|profile|S" and variant, [B, median ms, ms per row] by B,
    and each variant's time relative to packed_varlen at the largest B."""
    groups: dict = {}
    for r in records:
        groups.setdefault(f"{r['dtype']}|{r['profile']}|S={r['length']}", []).append(r)
    summary = {}
    for key, rows in sorted(groups.items()):
        rows.sort(key=lambda r: r["batch"])
        ms = {v: [r["variants"][v]["median_s"] * 1e3 for r in rows] for v in VARIANTS}
        by_variant = {v: [[r["batch"], t, t / r["batch"]] for r, t in zip(rows, ms[v])] for v in VARIANTS}
        last = rows[-1]["variants"]
        summary[key] = {"ms_by_batch": by_variant, "largest_batch": rows[-1]["batch"],
                        "relative_to_packed_varlen": {v: last[v]["median_s"] / last["packed_varlen"]["median_s"]
                                                      for v in VARIANTS}}
    return summary


def _measure_case(key, dtype, profile, B, S, config, repeats, log) -> dict:
    lengths = row_lengths(profile, B, S)
    case = make_case(lengths, config["new_tokens"], config["heads"], config["kv_heads"], config["head_dim"],
                     getattr(torch, dtype))
    record = {"key": key, "dtype": dtype, "profile": profile, "batch": B, "length": S, "row_lengths": lengths,
              "variants": {}}
    outputs = {}
    for variant in VARIANTS:
        record["variants"][variant], outputs[variant] = measure(case, variant, repeats)
    for variant in VARIANTS:
        diff = (outputs[variant].float() - outputs["padded"].float()).abs().max()
        record["variants"][variant]["max_abs_diff_vs_padded"] = float(diff)
    times = {v: record["variants"][v]["median_s"] * 1e3 for v in VARIANTS}
    log(f"{key:32s} " + "  ".join(f"{v} {t:8.3f} ms" for v, t in times.items()))
    return record


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=_ints, default=[1, 2, 4, 8])
    parser.add_argument("--lengths", type=_ints, default=[128, 512, 2048])
    parser.add_argument("--new-tokens", type=int, default=5, help="q, new tokens per row (L + 1 for a chain)")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--fresh", action="store_true", help="discard an existing result file")
    args = parser.parse_args(argv)
    return run(args.batches, args.lengths, args.new_tokens, [d for d in args.dtypes.split(",") if d],
               args.heads, args.kv_heads, args.head_dim, args.repeats, args.threads, args.out, args.fresh)


if __name__ == "__main__":
    main()
