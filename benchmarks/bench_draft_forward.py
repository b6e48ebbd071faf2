"""What does the lean draft forward (``df=lean``, ``df=scripted``) save per draft forward? One draft
append of r token rows over the prompt's cache, timed through the engine's `CausalLM.chain` with
the transformers module's forward, with `verispec.empirical.speedups.lean_forward.LeanForward`, and
with the same forward's layers as TorchScript (``scripted``), alternated, on the real pair's draft
(int8 weights with ``--dq 8``, the default; the bench's draft vocabulary with ``--dv``), plus the
largest logit difference between the lean and the transformers forward, and between the scripted
and the lean one.

The JSON keeps every timing, the median per (forward, rows), the ratios lean / hf and scripted /
lean of the medians (derived), and the host's CPU capability and load average. Run it on a quiet
machine only. The file is written once at the end (atomically); a second run of the same settings
keeps it, ``--fresh`` replaces it.

    python3 benchmarks/bench_draft_forward.py [--rows 1,2,4,8] [--repeats 25] [--threads 2]
        [--dq 8] [--dv 32768] [--first-prompt 50] [--tiny] [--output PATH] [--fresh]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from verispec.atomic import resume_json, write_json_atomic  # noqa: E402
from verispec.empirical.model import cache_length, crop_cache  # noqa: E402
from verispec.empirical.speedups.hardware import host_info  # noqa: E402
from verispec.empirical.speedups.lean_forward import lean_view  # noqa: E402
from verispec.empirical.speedups.quantize import quantize_draft  # noqa: E402

DEFAULT_OUTPUT = os.path.join(ROOT, "benchmarks", "results", "draft_forward_cpu.json")


def _draft_and_prompt(args):
    """(draft CausalLM as the bench runs it, prompt ids [1, n], its name)."""
    if args.tiny:
        import transformers

        from verispec.empirical.model import CausalLM

        config = transformers.Qwen2Config(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                          num_key_value_heads=2, intermediate_size=64, max_position_embeddings=512)
        draft, ids, name = CausalLM.from_config(config, seed=0), torch.arange(1, 40).unsqueeze(0) % 64, "tiny"
    else:
        from verispec.bench.prompts import humaneval_prompts
        from verispec.bench.weights import load_pair

        pair = load_pair(dtype=torch.bfloat16, progress=False)
        item = humaneval_prompts(args.first_prompt + 1)[args.first_prompt]
        draft, name = pair.draft, item["task_id"]
        ids = pair.tokenizer(item["prompt"], return_tensors="pt").input_ids
    if args.dq:
        draft = quantize_draft(draft)
    return draft, ids, name


def time_appends(views: dict, ids, rows: int, repeats: int) -> dict:
    """{forward: [seconds]} of `repeats` appends of `rows` tokens each, the forwards alternated,
    every append onto the same prefilled cache (cropped back after each)."""
    caches = {name: view.prefill(ids)[1] for name, view in views.items()}
    length = cache_length(next(iter(caches.values())))
    tokens = torch.full((1, rows), 13)  # any id: the cost does not depend on it
    times = {name: [] for name in views}
    for _ in range(repeats + 3):  # the first 3 of each are warm-up
        for name, view in views.items():
            crop_cache(caches[name], length)
            start = time.perf_counter()
            view.chain(caches[name], tokens)
            times[name].append(time.perf_counter() - start)
    return {name: values[3:] for name, values in times.items()}


def max_logit_difference(first, second, ids) -> float:
    """Largest |logit| difference of two forwards (views) over a prefill and a 2-token append
    (finite logits only: -inf outside a draft vocabulary in both)."""
    outs = []
    for view in (first, second):
        logits, cache = view.prefill(ids)
        outs.append(torch.cat([logits[:, -1:], view.chain(cache, torch.tensor([[13, 14]]))], 1))
    finite = torch.isfinite(outs[0])
    return float((outs[0][finite] - outs[1][finite]).abs().max())


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,2,4,8")
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dq", type=int, default=8, choices=(0, 8), help="8: the int8 draft (dq=8); 0: as loaded")
    parser.add_argument("--dv", type=int, default=32768, help="draft vocabulary: the k lowest ids (0: all)")
    parser.add_argument("--first-prompt", type=int, default=50)
    parser.add_argument("--tiny", action="store_true", help="a tiny random model (a smoke run, no timing claim)")
    parser.add_argument("--output", default=DEFAULT_OUTPUT)
    parser.add_argument("--fresh", action="store_true", help="replace --output instead of keeping it")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [int(r) for r in args.rows.split(",")]
    settings = {"rows": rows, "repeats": args.repeats, "threads": torch.get_num_threads(), "dq": args.dq,
                "dv": args.dv, "first_prompt": args.first_prompt, "tiny": args.tiny}
    old = resume_json(args.output, settings, args.fresh)
    if old:
        print(f"kept {args.output} (same settings; --fresh measures again)")
        return old
    draft, ids, name = _draft_and_prompt(args)
    views = {"hf": draft, "lean": lean_view(draft), "scripted": lean_view(draft, scripted=True)}
    if args.dv and not args.tiny:
        subset = torch.arange(min(args.dv, draft.vocab_size))
        views = {key: view.with_head_subset(subset) for key, view in views.items()}
    out = {**settings, "prompt": name, "prompt_tokens": int(ids.shape[1]), "torch": torch.__version__,
           "load_average_before": list(os.getloadavg()), **host_info("cpu"),
           "max_logit_difference": max_logit_difference(views["hf"], views["lean"], ids),
           "max_logit_difference_scripted": max_logit_difference(views["lean"], views["scripted"], ids),
           "by_rows": {}}
    with torch.inference_mode():
        for r in rows:
            times = time_appends(views, ids, r, args.repeats)
            medians = {key: statistics.median(values) for key, values in times.items()}
            out["by_rows"][str(r)] = {"seconds": times, "median_s": medians,
                                      "ratio_lean_over_hf": medians["lean"] / medians["hf"],
                                      "ratio_scripted_over_lean": medians["scripted"] / medians["lean"]}
            print(f"{r} rows: hf {medians['hf'] * 1e3:.1f} ms, lean {medians['lean'] * 1e3:.1f} ms, scripted "
                  f"{medians['scripted'] * 1e3:.1f} ms (lean / hf {medians['lean'] / medians['hf']:.3f}, "
                  f"scripted / lean {medians['scripted'] / medians['lean']:.3f})")
    out["ratio_is"] = "derived: median lean (scripted) seconds / median hf (lean) seconds, alternated appends"
    out["load_average_after"] = list(os.getloadavg())
    write_json_atomic(args.output, out)
    return out


if __name__ == "__main__":
    main()
