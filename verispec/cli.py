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
    verispec check-sampler transformers|vllm [--mode M] ...; verispec check-engine transformers|vllm ...
                   (a library's own sampler; an engine's whole speculative decoding: G-tests; exit 0 passes)
    verispec bench [--prompts N] [--max-new-tokens N] [--methods a,b:K=3] [--temperatures 0,1] ...
                           (real models; needs the torch extra; first use downloads ~1.6 GB)
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from . import __version__
from .bench import arguments as bench_arguments
from .check import command as check_command
from .commandline import CONTRACT_ERROR, exit_status
from .formal import command as prove_command
from .integrations import check_engine, check_sampler
from .theory import certify

#: The subcommands, in --help order (`check` first: the default). Each lives in its package and registers itself:
#: ``add_parser(subparsers)`` adds its options and sets ``func`` to its ``run(args) -> int``, or to
#: ``"module:attr"`` for a command whose package needs an optional extra (imported when it runs;
#: ``extra`` names the extra). A new command is one module with `add_parser` and one entry here.
COMMANDS = (check_command, certify, prove_command, check_sampler, check_engine, bench_arguments)


def build_parser() -> argparse.ArgumentParser:
    """The `verispec` parser: every command of `COMMANDS`, each registered by its package."""
    parser = argparse.ArgumentParser(prog="verispec", description="Verify verifiers for speculative decoding.")
    parser.add_argument("--version", action="version", version=f"verispec {__version__}")
    sub = parser.add_subparsers(dest="command")
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
