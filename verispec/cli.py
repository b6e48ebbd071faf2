"""The `verispec` command. With no arguments it runs `verispec check` on its defaults.

    verispec check [--method NAME|pkg.module:attr ...] [--vocab-sizes 3,4,5,6 | --vocab-size V]
                   [--budget B] [--draft-length L] [--num-paths K] [--instances N] [--seed S]
                   [--num-tokens N] [--rational] [--json PATH]
                   [--workers N] [--backend loky|dask|ray] [--cluster ADDRESS]
                   exit status: 0 lossless (or declared lossy: TV reported), 1 a law differs,
                   2 bad arguments, 3 a rule contract error
    verispec lp ...        (LP certificates; needs cvxpy)
    verispec lp --tv EPS [--vocab-size V] [--draft-length L] [--instances N]
                   (the optimal lossy frontier BE*(EPS) within total variation EPS of the target)
    verispec prove METHOD|pkg.module:attr [--vocab-size V] [--draft-length L] [--num-paths K]
                   [--timeout S] [--target-temperature 0|1] [--json PATH]
                   (for every target/draft pair at V, L, K; exit 0 proved, 1 counterexample, 3 unknown)
    verispec check-sampler transformers|vllm [--mode M] ...; verispec check-engine transformers|vllm ...
                   (a library's own sampler; an engine's whole speculative decoding: G-tests; exit 0 passes)
    verispec bench [--prompts N] [--max-new-tokens N] [--methods a,b:K=3] [--temperatures 0,1] ...
                           (real models; needs the torch extra; first use downloads ~1.6 GB)
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import time
from dataclasses import asdict
from fractions import Fraction

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from . import __version__
from .atomic import write_json_atomic
from .bench import arguments as bench_arguments
from .check import DEFAULT_VOCAB_SIZES, plan_instances, run_check
from .commandline import CONTRACT_ERROR, exit_status, int_list, nonnegative_int, positive_int
from .formal import command as prove_command
from .integrations import check_engine, check_sampler
from .reference import methods, registry
from .reference.contract import RuleContractError
from .testing.assertions import DEFAULT_BUDGET
from .theory import certify

#: The subcommands after `check`, in --help order. Each lives in its package and registers itself:
#: ``add_parser(subparsers)`` adds its options and sets ``func`` to its ``run(args) -> int``, or to
#: ``"module:attr"`` for a command whose package needs an optional extra (imported when it runs;
#: ``extra`` names the extra). A new command is one module with `add_parser` and one entry here.
COMMANDS = (certify, prove_command, check_sampler, check_engine, bench_arguments)

# The check command's argparse types (its block below moves to its package): verispec.commandline's.
_positive_int, _nonnegative_int, _int_list = positive_int, nonnegative_int, int_list


def _method_spec(text: str) -> str:
    """--method: a built-in name or 'pkg.module:attr' (loaded later, with a one-line error)."""
    if ":" in text or text in methods.names() + methods.lossy_names():
        return text
    raise argparse.ArgumentTypeError(f"unknown method {text!r}: expected a built-in name "
                                     f"({', '.join(methods.names() + methods.lossy_names())}) or 'pkg.module:attr'")


def _vocab_sizes(text: str) -> tuple:
    return tuple(sorted(set(_int_list(text))))


def _add_check(sub) -> None:
    p = sub.add_parser("check", help="check methods lossless (exact law) on seeded toy instances",
                       description="Exact enumeration of each method's output law vs the target's, on seeded "
                                   "instances: a check on those instances, not a proof for all distributions.")
    p.add_argument("--method", action="append", type=_method_spec, metavar="NAME|pkg.module:attr",
                   help="method to check (repeatable): a built-in name or your own Method as "
                        f"'pkg.module:attr' (default every lossless built-in but the slow ones: "
                        f"{', '.join(registry.quick_check_names())}; the rules declared lossy, "
                        f"{', '.join(methods.lossy_names())}, run when named and are reported 'lossy' with their TV)")
    p.add_argument("--vocab-size", type=_positive_int, default=None,
                   help="check this one V only (shorthand for --vocab-sizes V)")
    sizes = ",".join(map(str, DEFAULT_VOCAB_SIZES))
    p.add_argument("--vocab-sizes", type=_vocab_sizes, default=None, metavar="V,V,...",
                   help=f"vocabulary sizes (default {sizes}): the smallest gets --instances random-tree "
                        "instances, each larger one fewer i.i.d. instances within --budget; a bug that needs "
                        "size s (top-k with k = s, K paths) is found only by a larger V")
    p.add_argument("--budget", type=_positive_int, default=DEFAULT_BUDGET,
                   help=f"N-token outcomes (V**N) spent per larger vocabulary size (default {DEFAULT_BUDGET})")
    p.add_argument("--draft-length", type=_positive_int, default=2, help="L of built-in methods (default 2)")
    p.add_argument("--num-paths", type=_positive_int, default=2, help="K for multi-path methods (default 2)")
    p.add_argument("--instances", type=_positive_int, default=4,
                   help="random instances at the smallest vocabulary size (default 4)")
    p.add_argument("--seed", type=_nonnegative_int, default=0, help="seed of the instances (default 0)")
    p.add_argument("--num-tokens", type=_positive_int, default=None,
                   help="N tokens of output law (default: each method's draft depth + 2; required for a "
                        "user method that declares no depth)")
    p.add_argument("--rational", action="store_true", help="exact Fraction models: lossless means TV == 0")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON (atomically)")
    p.add_argument("--workers", type=_positive_int, default=1, metavar="N",
                   help="joblib workers enumerating the (method, instance) pairs (default 1: this process); "
                        "the results are those of a serial run")
    prove_command.add_backend_arguments(p)
    p.set_defaults(func=_run_check)


def _check_table(results, args, sizes, counts):
    table = Table(title=f"verispec check: V in {list(sizes)} ({', '.join(f'{c} at V={v}' for v, c in counts.items())} "
                        f"instances), L={args.draft_length} K={args.num_paths}, seed {args.seed}"
                        + (", rational" if args.rational else ""))
    for column in ("method", "N", "inst.", "max TV", "block eff.", "branches", "time s", "lossless"):
        table.add_column(column, justify="left" if column == "method" else "right")
    verdict = {"lossless": "[green]yes[/]", "NOT lossless": "[red]NO[/]", "contract error": "[red]CONTRACT[/]",
               "lossy": "[yellow]LOSSY[/]"}
    for r in results:
        tv = "0 (exact)" if args.rational and r.exact_zero and r.max_tv == 0 else f"{r.max_tv:.2e}"
        tv += " (exact below)" if r.status == "lossy" and r.max_tv_rational is not None else ""
        table.add_row(r.method, str(r.num_tokens), str(r.instances), tv, f"{r.mean_block_efficiency:.4f}",
                      str(r.branches), f"{r.seconds:.2f}", verdict[r.status])
    return table


def _run_check(args) -> int:
    if args.vocab_size is not None and args.vocab_sizes is not None:
        print("verispec check: --vocab-size: give either --vocab-size V or --vocab-sizes V,V,..., not both",
              file=sys.stderr)
        return 2
    sizes = (args.vocab_size,) if args.vocab_size is not None else (args.vocab_sizes or DEFAULT_VOCAB_SIZES)
    names = args.method or registry.quick_check_names()
    console = Console(width=max(Console().width, 100))
    start = time.perf_counter()
    try:
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("enumerating", total=len(names))
            results = run_check(names, sizes, args.draft_length, args.num_paths, args.instances, args.seed,
                                args.num_tokens, args.rational, progress=lambda name: progress.advance(task),
                                budget=args.budget, workers=args.workers, backend=args.backend,
                                cluster=args.cluster)
    except ImportError as err:  # --workers / --backend without joblib, dask or ray installed
        print(f"verispec check: --backend: {err} (pip install verispec[prove], verispec[dask] or "
              "verispec[ray])", file=sys.stderr)
        return 2
    except (ValueError, TypeError) as err:  # a --method that does not load, or no N for it
        if isinstance(err, RuleContractError) or isinstance(err.__cause__, RuleContractError):
            # e.g. the user's module builds a Method whose verify has the wrong signature
            print(f"verispec check: rule contract error (not a lossless verdict): {err}", file=sys.stderr)
            return 3
        message = str(err)
        if message.startswith(("workers:", "backend:", "cluster:")):  # a run_check argument: name its flag
            message = "--" + message
        print(f"verispec check: {message}", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - start
    largest_n = max(r.num_tokens for r in results)
    counts: dict = {}
    for inst in plan_instances(sizes, args.instances, args.seed, args.rational, largest_n, args.budget):
        counts[inst.vocab_size] = counts.get(inst.vocab_size, 0) + 1
    console.print(_check_table(results, args, sizes, counts))
    console.print("max TV: total variation between the exact law of the first N emitted tokens and the "
                  "target's; block eff.: E\\[tokens per target call] = E\\[tau] + 1 of one iteration")
    console.print(f"total {elapsed:.1f} s")
    if args.json:
        write_json_atomic(args.json, {
            "command": "check", "version": __version__, "python": platform.python_version(),
            "vocab_sizes": list(sizes), "instances_per_vocab_size": {str(v): c for v, c in counts.items()},
            "budget": args.budget, "draft_length": args.draft_length, "num_paths": args.num_paths,
            "num_tokens": args.num_tokens, "instances": args.instances, "seed": args.seed,
            "rational": args.rational, "seconds": elapsed, "workers": args.workers,
            "backend": args.backend or "loky", "results": [asdict(r) for r in results],
        })
    return _check_verdict(console, results)


def _check_verdict(console, results) -> int:
    """Print contract errors in full and the verdict; the exit status (0 lossless, 1 a law differs,
    3 a rule contract error)."""
    for r in results:
        if r.status == "lossy":
            console.print(_lossy_line(r), highlight=False)
    broken = [r for r in results if r.status == "contract error"]
    for r in broken:
        console.print(f"[red]{r.method}: rule contract error (not a lossless verdict):[/]")
        console.print(r.contract_error, markup=False, highlight=False)
    failed = [r.method for r in results if r.status == "NOT lossless"]
    if failed:
        console.print(f"[red]NOT lossless: {', '.join(failed)}[/]")
    if broken:
        console.print(f"[red]rule contract broken: {', '.join(r.method for r in broken)}[/]")
        return 3
    if failed:
        return 1
    declared = [r.method for r in results if r.status == "lossy"]
    if len(declared) == len(results):
        console.print(f"[yellow]declared lossy: {', '.join(declared)} (exact TV above)[/]")
    else:
        console.print("[green]all methods lossless on these instances[/]"
                      + (f" but those declared lossy: {', '.join(declared)}" if declared else ""))
    return 0


def _lossy_line(r) -> str:
    """One declared-lossy rule: its largest TV in float64 and exact, and its block efficiency."""
    line = (f"{r.method}: lossy (declared): max TV {r.max_tv:.12g} (float64), block efficiency "
            f"{r.mean_block_efficiency:.6g} (mean over {r.instances} instances)")
    if r.max_tv_rational is None:
        return line + "; no exact TV (the rule's law is float64 even on exact models)"
    exact_tv = Fraction(r.max_tv_rational)
    shown = r.max_tv_rational if len(r.max_tv_rational) <= 40 else f"a Fraction of {len(r.max_tv_rational)} characters (--json)"
    return line + f"; exact TV (Fractions) {shown} = {float(exact_tv):.12g}"



def build_parser() -> argparse.ArgumentParser:
    """The `verispec` parser: `check`, then every command of `COMMANDS`, each registered by its package."""
    parser = argparse.ArgumentParser(prog="verispec", description="Verify verifiers for speculative decoding.")
    parser.add_argument("--version", action="version", version=f"verispec {__version__}")
    sub = parser.add_subparsers(dest="command")
    _add_check(sub)
    for command in COMMANDS:
        command.add_parser(sub)
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

def _runner(args):
    """The command's ``run(args) -> int``: ``args.func``, imported now when it names ``"module:attr"``.

    Raises:
        ImportError: the command's optional extra is not installed.
    """
    if not isinstance(args.func, str):
        return args.func
    module, _, attr = args.func.partition(":")
    return getattr(importlib.import_module(module), attr)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `verispec` console script; returns the exit status.

    An error a command lets out is reported in one line with the status its type maps to
    (`verispec.commandline.exit_status`: 3 a rule's contract error, 2 bad input); any other
    error raises with its traceback."""
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
        run = _runner(args)
    except ImportError as err:  # the optional extra the command needs
        print(f"verispec {args.command} needs the {args.extra} extra: {err}", file=sys.stderr)
        return 2
    try:
        return run(args)
    except BrokenPipeError:  # the reader went away (`verispec prove ... | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush raises no second error
        return 1
    except Exception as err:
        status = exit_status(err)
        if status is None:  # not a report to the user: a bug, with its traceback
            raise
        what = "rule contract error (not a lossless verdict): " if status == CONTRACT_ERROR else ""
        print(f"verispec {args.command}: {what}{err}", file=sys.stderr)
        return status


if __name__ == "__main__":
    sys.exit(main())
