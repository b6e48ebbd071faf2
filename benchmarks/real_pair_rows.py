"""Measured next-token rows of the real pair: the target's p and the draft's q at every position of a
greedy target decode of a few HumanEval prompts, stored sparsely for the lossy-frontier notebook.

    python3 benchmarks/real_pair_rows.py --prompts 4 --max-new-tokens 16 --top-k 1024 \
        --temperatures 1,0.7 --output benchmarks/results/real_pair_rows.npz

The pair is `verispec bench`'s default (Qwen2.5-Coder 1.5B target / 0.5B draft, from the local cache:
nothing is downloaded when the converted weights are there), in the bench's dtype choice ("auto"),
on CPU with one torch thread. Each prompt is the raw HumanEval prompt (as the bench feeds it); the
target decodes `--max-new-tokens` tokens greedily, and at each of those positions both models'
next-token distributions softmax(logits / T) are taken in float64 from the same prefix.

Truncation (each row of V = 151,936 is stored in k + 1 entries):
the k tokens of largest max(p, q) (ids int32, p and q float32), plus one merged "other" token holding
the rest of each: p_other = p(tail), q_other = q(tail) (float64, 1 - the kept mass summed in float64).
What the merge does, with T the tail (its tokens each have max(p, q) <= the k-th largest):

- sum min(p, q) on the merged row is Sum_kept min + min(p(T), q(T)) >= the true Sum_kept min +
  Sum_T min(p, q): it errs high, by min(p(T), q(T)) - Sum_T min(p, q) in [0, min(p(T), q(T))]; TV =
  1 - sum min errs low by the same amount. The exact Sum_T min(p, q) is stored per row
  (`tail_sum_min`), so the error is known, not only bounded.
- H(p) on the merged row is below the true entropy, by p(T) H(p | T) <= p(T) log |T|; the exact
  H(p) of the full row is stored (`entropy_p_full`). Typical acceptance's threshold uses H(p), so
  its values on these rows are approximate, within that bound.
- Divergences (FSD's js, kl) on the merged row are at most the full row's (merging is a
  coarse-graining); the full row's JS and KL(q || p) are stored (`js_full`, `kl_q_p_full`).
- Every kept token's p and q are exact (up to float32 rounding of the stored values).

Also written: a JSON beside the npz (same stem) with the command, commit, environment, prompts,
the truncation statement and per-row summaries. Not a timing benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

TRUNCATION = (
    "each row keeps the top-k tokens by max(p, q) (ids int32, p and q float32) plus one merged 'other' token with "
    "p_other = p(tail), q_other = q(tail) (float64). On the merged row sum min(p, q) errs HIGH (and TV = 1 - sum min "
    "errs LOW) by min(p_other, q_other) - tail_sum_min, which lies in [0, min(p_other, q_other)]; tail_sum_min is the "
    "exact sum over the tail of min(p, q), stored per row. H(p) on the merged row errs LOW by p_other * H(p | tail) "
    "<= p_other * log(V - k); the full row's entropy is stored (entropy_p_full), so typical acceptance's threshold "
    "(through H(p)) is approximate on the merged rows within that bound. JS and KL on the merged row are <= the "
    "full row's (stored: js_full, kl_q_p_full).")


def commit() -> str:
    """The checkout's HEAD commit (hex), as the results files record it; "" outside a git checkout."""
    done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.abspath(__file__)))
    return done.stdout.strip()


def _entropy(row: np.ndarray) -> float:
    positive = row[row > 0]
    return float(-(positive * np.log(positive)).sum())


def _kl(a: np.ndarray, b: np.ndarray) -> float:
    """KL(a || b) in nats over a's support (b > 0 wherever a > 0 for softmax rows)."""
    support = a > 0
    return float((a[support] * np.log(a[support] / b[support])).sum())


def sparse_row(p: np.ndarray, q: np.ndarray, k: int) -> dict:
    """The stored form of one position's full rows p, q [V] (float64): the k ids of largest
    max(p, q) in decreasing order, their p and q, the tail masses and the full-row checks."""
    ids = np.argsort(-np.maximum(p, q), kind="stable")[:k]  # [k]
    tail = np.ones(len(p), dtype=bool)
    tail[ids] = False
    return {"ids": ids.astype(np.int32), "p": p[ids].astype(np.float32), "q": q[ids].astype(np.float32),
            "p_other": float(max(0.0, 1.0 - p[ids].sum())), "q_other": float(max(0.0, 1.0 - q[ids].sum())),
            "tail_sum_min": float(np.minimum(p[tail], q[tail]).sum()),
            "sum_min_full": float(np.minimum(p, q).sum()), "entropy_p_full": _entropy(p),
            "js_full": (_kl(p, (p + q) / 2) + _kl(q, (p + q) / 2)) / 2, "kl_q_p_full": _kl(q, p),
            "tail_max_p": float(p[tail].max()), "tail_max_q": float(q[tail].max())}


def full_rows(pair, prompt: str, steps: int, temperatures):
    """Greedy target decode of `steps` tokens from `prompt`; yields (position, T, p, q) at every
    position, p and q the full next-token rows softmax(logits / T) [V] float64 (numpy), both models
    fed the same prefix (the target's greedy tokens)."""
    import torch

    ids = pair.tokenizer(prompt, return_tensors="pt").input_ids  # [1, n]
    with torch.no_grad():
        target_logits, target_cache = pair.target.prefill(ids, logits_to_keep=1)  # [1, 1, V]
        draft_logits, draft_cache = pair.draft.prefill(ids, logits_to_keep=1)
        for position in range(steps):
            lt, ld = target_logits[0, -1].double(), draft_logits[0, -1].double()  # [V] each
            for T in temperatures:
                yield position, T, torch.softmax(lt / T, -1).numpy(), torch.softmax(ld / T, -1).numpy()
            token = lt.argmax().view(1, 1)  # the target's greedy token continues both prefixes
            target_logits = pair.target.chain(target_cache, token)
            draft_logits = pair.draft.chain(draft_cache, token)


def _rows_of_prompt(pair, prompt: str, steps: int, temperatures, k: int):
    """`full_rows`, each stored as `sparse_row`: yields (position, T, sparse row)."""
    for position, T, p, q in full_rows(pair, prompt, steps, temperatures):
        yield position, T, sparse_row(p, q, k)


def record(args) -> dict:
    """Load the pair, decode every prompt and return the stacked arrays and the metadata."""
    import torch

    from verispec.bench.prompts import humaneval_prompts
    from verispec.bench.weights import load_pair
    from verispec.empirical.speedups.hardware import resolve_dtype

    torch.set_num_threads(args.threads)
    dtype, reason = resolve_dtype(args.dtype, "cpu")
    start = time.perf_counter()
    pair = load_pair(dtype=getattr(torch, dtype), device="cpu", progress=False)
    prompts = humaneval_prompts(args.first_prompt + args.prompts)[args.first_prompt:]
    rows, index = [], []
    for i, item in enumerate(prompts):
        for position, T, row in _rows_of_prompt(pair, item["prompt"], args.max_new_tokens, args.temperatures,
                                                args.top_k):
            rows.append(row)
            index.append((i, position, T))
        print(f"{item['task_id']}: {args.max_new_tokens} positions", flush=True)
    arrays = {key: np.stack([r[key] for r in rows]) if np.ndim(rows[0][key]) else np.array([r[key] for r in rows])
              for key in rows[0]}
    arrays.update(prompt_index=np.array([x[0] for x in index], dtype=np.int16),
                  position=np.array([x[1] for x in index], dtype=np.int16),
                  temperature=np.array([x[2] for x in index], dtype=np.float32))
    meta = {"command": "python3 " + " ".join([os.path.relpath(__file__, os.getcwd())] + sys.argv[1:]),
            "commit": commit(), "target": "qwen2.5-coder-1.5b-instruct-q4_k_m (bf16 conversion)",
            "draft": "qwen2.5-coder-0.5b-instruct-q4_k_m (bf16 conversion)", "dtype": dtype, "dtype_reason": reason,
            "threads": args.threads, "device": "cpu", "host": platform.machine(), "vocab_size": pair.target.vocab_size,
            "top_k": args.top_k, "max_new_tokens": args.max_new_tokens, "temperatures": list(args.temperatures),
            "prompts": [item["task_id"] for item in prompts], "decode": "greedy target (argmax), both models fed it",
            "rows": len(rows), "truncation": TRUNCATION, "wall_s": round(time.perf_counter() - start, 1)}
    return arrays, meta


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--first-prompt", type=int, default=0)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--top-k", type=int, default=1024)
    parser.add_argument("--temperatures", type=lambda s: [float(x) for x in s.split(",")], default=[1.0, 0.7])
    parser.add_argument("--dtype", default="auto", help="the bench's choice by default (bf16 on native-bf16 CPUs)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", required=True, help="the .npz; the JSON is written beside it")
    args = parser.parse_args(argv)
    arrays, meta = record(args)
    np.savez_compressed(args.output, meta=np.array(json.dumps(meta)), **arrays)
    summary = {**meta, "rows_summary": _summary(arrays)}
    with open(os.path.splitext(args.output)[0] + ".json", "w") as f:
        json.dump(summary, f, indent=1)
    print(f"{meta['rows']} rows -> {args.output} ({os.path.getsize(args.output) / 1e6:.2f} MB)")
    return 0


def _summary(arrays: dict) -> dict:
    """Per temperature: the tail masses and the merge's effect on sum min(p, q), measured."""
    out = {}
    for T in sorted(set(arrays["temperature"].tolist()), reverse=True):
        sel = arrays["temperature"] == T
        merged_min = np.minimum(arrays["p"][sel].astype(np.float64), arrays["q"][sel]).sum(1) + np.minimum(
            arrays["p_other"][sel], arrays["q_other"][sel])
        out[f"T={T:g}"] = {
            "rows": int(sel.sum()), "p_other_max": float(arrays["p_other"][sel].max()),
            "q_other_max": float(arrays["q_other"][sel].max()),
            "sum_min_full_mean": float(arrays["sum_min_full"][sel].mean()),
            "merged_sum_min_minus_full_max": float((merged_min - arrays["sum_min_full"][sel]).max()),
            "merged_sum_min_minus_full_min": float((merged_min - arrays["sum_min_full"][sel]).min()),
            "note": "merged_sum_min_minus_full: derived, sum min(p, q) on the merged float32 row minus the full row's"}
    return out


if __name__ == "__main__":
    sys.exit(main())
