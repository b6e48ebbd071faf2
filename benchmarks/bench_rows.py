"""How the cost of a forward grows with the number of token rows, per dtype, on this machine.

Speculative decoding pays off when verifying L + 1 tokens in one target forward costs about as
much as one token. This measures that premise: the time of one GEMM with the target's MLP shape
(1536 -> 8960, Qwen2.5-1.5B) for M = 1..32 rows, in bfloat16 and float32, as a ratio to M = 1 in
the same run; with ``--model``, also one forward of the real target (KV cache of a
HumanEval prompt) for 1..21 new tokens, in bfloat16, float32 and with int8 weights (torch's
dynamic int8 linears, float32 activations), the last for reference only: verispec never quantizes
a target, because those layers make a row's logits depend on the other rows of its forward
(`verispec.empirical.speedups.quantize.quantize_weights`). Prints a table and writes
benchmarks/results/bench_rows.json (or --output), with the CPU's capability and what
`--dtype auto` picks on it. Every GEMM and float forward is timed in both linear layouts of
`verispec.empirical.speedups.linear_layout` (``xw``: torch's ``X @ W^T``; ``wx``: ``(W @ X^T)^T`` for 2..32
rows, the bench's ``lin=wx``), the float32 ones also as ``wxpad`` (``wx`` on the rows zero-padded
to the next power of two, ``lin=wxpad``), the bfloat16 ones also as ``packed`` (the weight
reordered once for oneDNN, ``lin=packed``, where this CPU's oneDNN has bfloat16). The row counts
include non-powers of two (3, 5, 12, 15, 17, ...): the GEMM kernel's cost is not monotone in the
rows on every CPU, and a verification forward's row count is whatever the draft's length makes it.

    python3 benchmarks/bench_rows.py [--model] [--threads 2] [--output PATH]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from verispec.atomic import write_json_atomic  # noqa: E402

ROWS = (1, 2, 3, 4, 5, 8, 12, 15, 16, 17, 24, 31, 32)
#: New tokens of the target forwards timed (a draft of L tokens is verified by L + 1 rows).
MODEL_ROWS = (1, 2, 3, 4, 8, 12, 15, 16, 17, 21)


def _time(fn, repeats):
    fn()  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def gemm_rows(dtype, repeats=20, layout="xw"):
    """{M: seconds} for x [M, 1536] @ W.T, W [8960, 1536] (``wx``: as (W @ x.T).T; ``wxpad``: on x's
    rows zero-padded to the next power of two; ``packed``: a linear layer in that layout)."""
    from verispec.empirical.speedups.linear_layout import linear_layout, weight_major_linear

    g = torch.Generator().manual_seed(0)
    weight = torch.randn(8960, 1536, generator=g).to(dtype)
    layer = torch.nn.Linear(1536, 8960, bias=False, dtype=dtype)
    layer.weight.data.copy_(weight)
    product = (lambda x: x @ weight.T) if layout == "xw" else layer if layout == "packed" else (
        lambda x: weight_major_linear(x, weight, None, pad=layout == "wxpad"))
    with torch.no_grad(), linear_layout(layer, layout if layout == "packed" else "xw"):
        return {m: _time(lambda x=torch.randn(m, 1536, generator=g).to(dtype): product(x), repeats) for m in ROWS}


def model_rows(dtype=torch.bfloat16, repeats=3, int8=False, layout="xw"):
    """{q: seconds} of one target forward in `dtype` of q new tokens after a HumanEval prompt, its
    linear layers in `layout`; `int8`: of the target's int8-weight copy
    (`verispec.empirical.speedups.quantize.quantize_weights`, float32 activations; timed for reference, not
    a dtype the bench offers)."""
    from verispec.empirical.speedups.linear_layout import linear_layout
    from verispec.bench.prompts import humaneval_prompts
    from verispec.empirical.speedups.quantize import quantize_weights
    from verispec.bench.weights import load_model

    model, tokenizer = load_model(dtype=dtype, progress=False)
    if int8:
        model = quantize_weights(model, role="target")
    ids = tokenizer(humaneval_prompts(1)[0]["prompt"], return_tensors="pt").input_ids  # [1, n]
    _, cache = model.forward(ids)
    n = cache.get_seq_length()
    out = {}
    for q in MODEL_ROWS:
        def step(q=q):
            model.forward(ids[:, -q:], cache)
            cache.crop(n - cache.get_seq_length())  # back to the prompt (negative count, transformers 5)
        with linear_layout(model.model, layout):
            out[q] = _time(step, repeats)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="store_true", help="also time the real target (cached pair): bf16, float32, int8 weights")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--output", default=os.path.join(os.path.dirname(__file__), "results", "bench_rows.json"))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from verispec.empirical.speedups.hardware import choose_dtype, host_info

    auto, reason = choose_dtype("cpu")
    results = {"machine": platform.machine(), **host_info("cpu"), "auto_dtype": auto, "auto_dtype_reason": reason,
               "torch": torch.__version__, "threads": torch.get_num_threads(), "gemm": {}}
    print(f"{'dtype':17} " + " ".join(f"M={m:<5}" for m in ROWS) + "   (time / time at M=1)")
    gemms = ((torch.bfloat16, "xw"), (torch.float32, "xw"), (torch.bfloat16, "wx"), (torch.float32, "wx"),
             (torch.float32, "wxpad"), (torch.bfloat16, "packed"))
    for dtype, layout in gemms:
        t, name = gemm_rows(dtype, layout=layout), str(dtype) + ("" if layout == "xw" else f" lin={layout}")
        results["gemm"][name] = {"seconds": t, "ratio_to_1_row": {m: t[m] / t[1] for m in ROWS}}
        print(f"{name[6:]:17} " + " ".join(f"{t[m] / t[1]:<7.2f}" for m in ROWS) + f"   M=1: {t[1] * 1e3:.2f} ms")
    runs = ((torch.bfloat16, False, "xw"), (torch.float32, False, "xw"), (torch.float32, True, "xw"),
            (torch.bfloat16, False, "wx"), (torch.float32, False, "wx"), (torch.float32, False, "wxpad"),
            (torch.bfloat16, False, "packed"))
    for dtype, int8, layout in runs if args.model else ():
        t, name = model_rows(dtype, int8=int8, layout=layout), "int8" if int8 else str(dtype)[6:]
        name += "" if layout == "xw" else f"_lin_{layout}"
        results[f"target_forward_{name.replace('bfloat16', 'bf16')}"] = {
            "seconds": t, "ratio_to_1_row": {q: t[q] / t[1] for q in t}}
        print(f"target {name} forward, new tokens: " + ", ".join(f"{q}: {t[q]:.3f} s ({t[q] / t[1]:.2f}x)" for q in t))
    path = args.output
    write_json_atomic(path, results)
    print(f"results: {path}")


if __name__ == "__main__":
    main()
