"""`verispec bench`: the command (its options: `verispec.bench.arguments`). Needs the torch extra.

`run(args)` checks the model sources and the device before anything loads, loads the pair (a load
failure is one line naming --target or --draft), runs `run_bench` or, with --batch-size,
`run_batched_bench` under a progress bar, and prints the table. Bad input is a ValueError naming
the option, which `verispec.cli` prints as one line (exit status 2); 0 when the run completed.
"""

from __future__ import annotations

import difflib
import os
import re
import sys

import torch
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

from ..empirical.speedups.hardware import resolve_dtype
from . import batched, weights
from .run import BenchConfig, default_output, run_bench
from .report import format_table
from .spec import BASELINE, parse_method

__all__ = ["run", "load_models", "model_source_problem", "device_problem"]

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def model_source_problem(value: str, argument: str) -> str | None:
    """Why ``value`` cannot name a model (one line naming ``argument``), or None: it must be a
    built-in name, an existing model folder (with config.json) or .gguf file, or a hub id
    'org/name' (checked before torch/transformers load anything)."""
    if value in weights.BUILTIN_MODELS:
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
    close = difflib.get_close_matches(value, list(weights.BUILTIN_MODELS), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    looks_like_path = os.path.isabs(value) or value.startswith((".", "~")) or value.endswith(".gguf")
    what = "no such file or folder" if looks_like_path else "not a built-in model name"
    return (f"{argument}: {value!r}: {what}{hint}; expected a built-in name "
            f"({', '.join(weights.BUILTIN_MODELS)}), a model folder or .gguf file, or a Hugging Face id 'org/name'")


def device_problem(device: str) -> str | None:
    """Why ``--device`` cannot be used here (one line), or None."""
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


def load_models(args, device) -> weights.ModelPair:
    """The target/draft pair of --target / --draft (--dtype, --device-map) on `device`.

    Raises:
        ValueError: a model that does not load (one line naming --target or --draft, not a
            transformers traceback), or a draft whose tokenizer differs from the target's.
    """
    dtype = getattr(torch, resolve_dtype(args.dtype, device)[0])
    loaded = {}
    for argument, value, device_map in (("--target", args.target, args.device_map), ("--draft", args.draft, None)):
        try:
            loaded[argument] = weights.load_model(value, dtype=dtype, device=device, device_map=device_map)
        except Exception as err:  # OSError (missing/offline hub id), ValueError (bad config), ...
            first = (str(err).strip().splitlines() or [""])[0]
            raise ValueError(f"{argument}: cannot load {value!r}: {type(err).__name__}: {first}") from err
    (target, tokenizer), (draft, draft_tokenizer) = loaded["--target"], loaded["--draft"]
    if tokenizer.get_vocab() != draft_tokenizer.get_vocab():
        raise ValueError(f"--draft: the tokenizer of {args.draft!r} differs from the target's "
                         f"({args.target!r}); speculative decoding needs one vocabulary")
    return weights.ModelPair(target, draft, tokenizer)


def _given(args, *names) -> dict:
    """{name: value} of the options among `names` the command line set (the rest: the config's defaults)."""
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def run(args) -> int:
    """Run `verispec bench` from parsed arguments (module docstring); returns the exit status.

    Raises:
        ValueError: a bad model source, device, method or option combination (naming the option).
    """
    problem = (model_source_problem(args.target, "--target") or model_source_problem(args.draft, "--draft")
               or (device_problem(args.device) if args.device else None))
    if problem:
        raise ValueError(problem)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    common = dict(target=args.target, draft=args.draft, dtype=args.dtype, device=device, threads=args.threads or 0,
                  seed=args.seed, device_map=args.device_map, **_given(args, "max_new_tokens", "methods", "temperatures"))
    console = Console(width=max(Console().width, 120))
    if args.batch_size:
        for flag, given in (("--first-prompt", args.first_prompt), ("--stop-at-eos", args.stop_at_eos)):
            if given:
                raise ValueError(f"{flag} is not taken with --batch-size")
        return _run_batched(args, common, console)
    config = BenchConfig(first_prompt=args.first_prompt, draft_length=args.draft_length, num_paths=args.num_paths,
                         stop_at_eos=args.stop_at_eos, graphs=args.graphs, **_given(args, "prompts"),
                         **common)
    specs = [parse_method(m, config.draft_length, config.num_paths) for m in config.methods]
    output = args.output or default_output(config.device)
    total = config.prompts * len(config.temperatures) * (1 + sum(s.name != BASELINE for s in specs))
    results = _results(args, console, total, run_bench, config, output)
    if results is None:
        return 2
    env = results["environment"]
    console.print(format_table(results["summary"], title=(
        f"verispec bench: {config.target} / {config.draft}, HumanEval, {config.max_new_tokens} tokens, "
        f"{env['dtype']} on {env['device_name']} ({env['torch_threads']} threads), "
        f"L={config.draft_length} K={config.num_paths}")))
    console.print("tok/s: tokens emitted in the decode phase per second; each method is timed as one span, split "
                  "at the end of the forwards that read the prompt (the target's reads it with the first draft); "
                  "e2e: the whole "
                  f"span. dtype {env['dtype']} ({env['dtype_reason']}), CPU capability {env['cpu_capability']}")
    console.print(f"results: {output}" + (f", plot: {results['plot']}" if results.get("plot") else ""))
    return 0


def _results(args, console, units, runner, config, output):
    """Load the model pair, then ``runner(config, output, ...)`` (`run_bench` or
    `run_batched_bench`) under a progress bar of `units` records: its results, or None after
    printing the ValueError it raised (bad configuration or output file)."""
    pair = load_models(args, config.device)
    return _with_progress(console, units, lambda step: runner(config, output, fresh=args.fresh, progress=step,
                                                              plot=not args.no_plot, pair=pair))


def _with_progress(console, total, work):
    """Run `work(step)` under a progress bar: records done of `total`, the current record (prompt,
    method, temperature: `step(description)` starts it), elapsed time and an estimate of the time
    left. Returns its results, or None after printing the ValueError it raised."""
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
            results = work(step)
        except ValueError as err:
            console.print(f"[red]verispec bench: {err}[/]")
            return None
        progress.update(task, completed=total)
    return results


def _run_batched(args, common, console) -> int:
    """`verispec bench --batch-size`: `run_batched_bench` (prompts: the largest B unless given)."""
    config = batched.BatchedBenchConfig(prompts=args.prompts or max(args.batch_size), batch_sizes=args.batch_size,
                                        draft_length=args.draft_length, **_given(args, "batches"), **common)
    config.check()
    batches = sum(min(config.prompts // B, config.batches or config.prompts) for B in config.batch_sizes)
    units = batches * len(config.temperatures) * (1 + 2 * len(config.methods))
    results = _results(args, console, units, batched.run_batched_bench, config, args.output)
    if results is None:
        return 2
    env = results["environment"]
    console.print(batched.format_batched_table(results["summary"], title=(
        f"verispec bench --batch-size: {config.prompts} HumanEval prompts, {config.max_new_tokens} tokens, "
        f"{env['dtype']} on {env['device_name']} ({env['torch_threads']} threads), L={config.draft_length}")))
    console.print("speedup: batched target-only's wall time / the method's, same prompts and B: e2e includes the "
                  "prompt prefills, decode excludes them; "
                  "vanilla pads inputs and KV cache, packed (EMS-SD) packs them unpadded")
    if results.get("plot"):
        console.print(f"plot: {results['plot']}")
    return 0
