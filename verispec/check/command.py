"""`verispec check` on the command line: `add_parser(subparsers)` declares it, `run(args)` runs it.

    verispec check [--method NAME|pkg.module:attr ...] [--vocab-sizes 3,4,5,6 | --vocab-size V]
                   [--budget B] [--draft-length L] [--num-paths K] [--instances N] [--seed S]
                   [--num-tokens N] [--rational] [--json PATH] [--list-instances]
                   [--workers N] [--backend loky|dask|ray] [--cluster ADDRESS]

Exit status: 0 lossless (or declared lossy: TV reported), 1 a law differs, 2 bad arguments (a
ValueError or TypeError, or a missing optional backend: ImportError), 3 a rule contract error
(`RuleContractError`, or a ValueError / TypeError caused by one). The instances are those of
`verispec.testing.sweeps.Sweep.check` with the same flags, which `assert_lossless(method,
sweep=...)` checks too; ``--list-instances`` prints them, one line each, and runs nothing.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from dataclasses import asdict
from fractions import Fraction

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from .. import __version__
from ..commandline import int_list, nonnegative_int, positive_int
from ..atomic import write_json_atomic
from ..formal import command as prove_command
from ..formal.parallel import check_backend
from ..reference import methods, registry
from ..reference.contract import RuleContractError
from ..testing.sweeps import DEFAULT_BUDGET, Sweep, describe_counts
from .core import DEFAULT_VOCAB_SIZES, method_num_tokens, resolve_method, run_check

__all__ = ["add_parser", "run", "sweep_of"]


def _method_spec(text: str) -> str:
    """--method: a built-in name or 'pkg.module:attr' (loaded later, with a one-line error)."""
    if ":" in text or text in methods.names() + methods.lossy_names():
        return text
    raise argparse.ArgumentTypeError(f"unknown method {text!r}: expected a built-in name "
                                     f"({', '.join(methods.names() + methods.lossy_names())}) or 'pkg.module:attr'")


def _vocab_sizes(text: str) -> tuple:
    return tuple(sorted(set(int_list(text))))


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `check` subcommand to `subparsers` (argparse's); returns its parser."""
    p = subparsers.add_parser("check", help="check methods lossless (exact law) on seeded toy instances",
                              description="Exact enumeration of each method's output law vs the target's, on "
                                          "seeded instances: a check on those instances, not a proof for all "
                                          "distributions.")
    p.add_argument("--method", action="append", type=_method_spec, metavar="NAME|pkg.module:attr",
                   help="method to check (repeatable): a built-in name or your own Method as "
                        f"'pkg.module:attr' (default every lossless built-in but the slow ones: "
                        f"{', '.join(registry.quick_check_names())}; the rules declared lossy, "
                        f"{', '.join(methods.lossy_names())}, run when named and are reported 'lossy' with their TV)")
    p.add_argument("--vocab-size", type=positive_int, default=None,
                   help="check this one V only (shorthand for --vocab-sizes V)")
    sizes = ",".join(map(str, DEFAULT_VOCAB_SIZES))
    p.add_argument("--vocab-sizes", type=_vocab_sizes, default=None, metavar="V,V,...",
                   help=f"vocabulary sizes (default {sizes}): the smallest gets --instances random-tree "
                        "instances, each larger one fewer i.i.d. instances within --budget; a bug that needs "
                        "size s (top-k with k = s, K paths) is found only by a larger V")
    p.add_argument("--budget", type=positive_int, default=DEFAULT_BUDGET,
                   help=f"N-token outcomes (V**N) spent per larger vocabulary size (default {DEFAULT_BUDGET})")
    p.add_argument("--draft-length", type=positive_int, default=2, help="L of built-in methods (default 2)")
    p.add_argument("--num-paths", type=positive_int, default=2, help="K for multi-path methods (default 2)")
    p.add_argument("--instances", type=positive_int, default=4,
                   help="random instances at the smallest vocabulary size (default 4)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the instances (default 0)")
    p.add_argument("--num-tokens", type=positive_int, default=None,
                   help="N tokens of output law (default: each method's draft depth + 2; required for a "
                        "user method that declares no depth)")
    p.add_argument("--rational", action="store_true", help="exact Fraction models: lossless means TV == 0")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON (atomically)")
    p.add_argument("--list-instances", action="store_true",
                   help="print the planned instances, one line each (what assert_lossless(method, "
                        "sweep=Sweep.check(...)) lists for the same flags), and check nothing")
    p.add_argument("--workers", type=positive_int, default=1, metavar="N",
                   help="joblib workers enumerating the (method, instance) pairs (default 1: this process); "
                        "the results are those of a serial run")
    prove_command.add_backend_arguments(p)
    p.set_defaults(func=run)
    return p


def _sizes(args) -> tuple:
    return (args.vocab_size,) if args.vocab_size is not None else (args.vocab_sizes or DEFAULT_VOCAB_SIZES)


def sweep_of(args, num_tokens: int) -> Sweep:
    """The `Sweep` the flags of `args` plan, at N = `num_tokens` (the largest N of the methods)."""
    return Sweep.check(_sizes(args), args.instances, args.seed, args.rational, args.budget, num_tokens)


def _fail(message: str, status: int) -> int:
    print(f"verispec check: {message}", file=sys.stderr)
    return status


def run(args) -> int:
    """Run `verispec check` from parsed arguments (`add_parser`'s); print the table and the
    verdict; return the exit status (module docstring)."""
    if args.vocab_size is not None and args.vocab_sizes is not None:
        return _fail("--vocab-size: give either --vocab-size V or --vocab-sizes V,V,..., not both", 2)
    try:
        check_backend(args.backend, args.cluster)  # its messages start with the argument's name
    except ValueError as err:
        return _fail(f"--{err}", 2)
    names = args.method or registry.quick_check_names()
    console = Console(width=max(Console().width, 100))
    try:
        if args.list_instances:
            return _list_instances(args, names)
        results, elapsed = _enumerate(console, args, names)
    except ImportError as err:  # --workers / --backend without joblib, dask or ray installed
        return _fail(f"--backend: {err} (pip install verispec[prove], verispec[dask] or verispec[ray])", 2)
    except RuleContractError as err:  # e.g. the user's module builds a Method whose verify has the wrong signature
        return _fail(f"rule contract error (not a lossless verdict): {err}", 3)
    except (ValueError, TypeError) as err:  # a --method that does not load, or no N for it
        if isinstance(err.__cause__, RuleContractError):
            return _fail(f"rule contract error (not a lossless verdict): {err}", 3)
        return _fail(str(err), 2)
    counts = dict(describe_counts(sweep_of(args, max(r.num_tokens for r in results)).instances()))
    console.print(_check_table(results, args, _sizes(args), counts))
    console.print("max TV: total variation between the exact law of the first N emitted tokens and the "
                  "target's; block eff.: E\\[tokens per target call] = E\\[tau] + 1 of one iteration")
    console.print(f"total {elapsed:.1f} s")
    if args.json:
        _write_json(args, results, counts, elapsed)
    return _check_verdict(console, results)


def _enumerate(console, args, names) -> tuple:
    """(the `MethodResult` of every method, seconds), under a progress bar."""
    start = time.perf_counter()
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("enumerating", total=len(names))
        results = run_check(names, _sizes(args), args.draft_length, args.num_paths, args.instances, args.seed,
                            num_tokens=args.num_tokens, rational=args.rational,
                            progress=lambda name: progress.advance(task), budget=args.budget,
                            workers=args.workers, backend=args.backend, cluster=args.cluster)
    return results, time.perf_counter() - start


def _list_instances(args, names) -> int:
    """--list-instances: the planned instances at the largest N of the methods, one line each."""
    largest = max(method_num_tokens(resolve_method(name, args.draft_length, args.num_paths), args.num_tokens)
                  for name in names)
    for inst in sweep_of(args, largest).instances():
        print(inst.line())
    return 0


def _write_json(args, results, counts, elapsed) -> None:
    write_json_atomic(args.json, {
        "command": "check", "version": __version__, "python": platform.python_version(),
        "vocab_sizes": list(_sizes(args)), "instances_per_vocab_size": {str(v): c for v, c in counts.items()},
        "budget": args.budget, "draft_length": args.draft_length, "num_paths": args.num_paths,
        "num_tokens": args.num_tokens, "instances": args.instances, "seed": args.seed,
        "rational": args.rational, "seconds": elapsed, "workers": args.workers,
        "backend": args.backend or "loky", "results": [asdict(r) for r in results],
    })


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
