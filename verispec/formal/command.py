"""`verispec prove`: the command-line face of `verispec.formal.prove`.

Exit status: 0 proved, 1 counterexample (confirmed in exact arithmetic), 3 unknown (timeout, solver
'unknown', or a rule that cannot run symbolically) or a rule contract error (e.g. a division by a
value that is 0 for some pair, confirmed by the exact engine), 2 bad arguments. With --all-vocab
(`verispec.formal.cutoff`): 0 proved for every V, 1 counterexample, 3 no cutoff or unknown.
"""

from __future__ import annotations

import argparse
import platform
import sys

from .. import __version__
from ..atomic import write_json_atomic
from ..commandline import CONTRACT_ERROR, exit_status
from .cutoff import prove_all_vocab
from .parallel import BACKENDS
from .prove import prove
from .tv_bound import tv_bound_from_args

EXIT = {"proved": 0, "counterexample": 1, "unknown": 3}


def _tokens(text: str) -> tuple:
    """'0,1,0' -> (0, 1, 0); '' -> ()."""
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated token ids, got {text!r}") from None


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``verispec prove`` on `subparsers` (its ``func``: `run`); returns its parser."""
    parser = subparsers.add_parser(
        "prove", help="prove a method lossless for every target/draft pair at V, L, K (z3)",
        description="Symbolic execution of the method's own code on every target/draft pair of the closed simplex "
                    "at a fixed small size, then one SMT query per output sequence: proved, a counterexample "
                    "confirmed in exact arithmetic, or unknown.")
    add_arguments(parser)
    parser.set_defaults(func=run)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the `verispec prove` arguments to `parser`; returns it."""
    parser.add_argument("method", help="a built-in method name (token, block, gbv, ...) or 'pkg.module:attr' "
                                       "naming your own Method")
    parser.add_argument("--vocab-size", type=int, default=None, help="V >= 2 (default 2)")
    parser.add_argument("--all-vocab", action="store_true",
                        help="prove for EVERY vocabulary size: check on the run that the rule reads the tokens it "
                             "does not name only through sign-cone sums, then prove at every V up to the cutoff V* "
                             "(prints 'PROVED for every V' or 'no cutoff:' with the operation that breaks it)")
    parser.add_argument("--draft-length", type=int, default=None,
                        help="L (default: the method's own; 1 for a built-in name or a factory)")
    parser.add_argument("--num-paths", type=int, default=None,
                        help="K for multi-path methods (default: the method's own; 1 for a built-in name or a "
                             "factory); a value that differs from the method's own is refused")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds for the whole proof; running out answers 'unknown' (default 60)")
    parser.add_argument("--target-temperature", type=float, default=1, choices=(0, 1),
                        help="1: every target distribution (default); 0: every greedy (argmax) target")
    parser.add_argument("--context", type=_tokens, default=(), metavar="T,T,...",
                        help="token ids the iteration starts from (default empty); for methods that read the "
                             "prefix themselves, e.g. prompt lookup with a repeated n-gram")
    parser.add_argument("--point-trials", type=int, default=None, metavar="N",
                        help="structured pairs tried by the exact engine before the symbolic run "
                             "(default 32; 0 skips)")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="processes deciding the output queries, this one included (default: 2 where the machine "
                             "has 2 cores; each other worker explores the same rule itself and decides its share)")
    add_backend_arguments(parser, "; --workers counts this process too")
    parser.add_argument("--solvers", default=None, metavar="z3[,cvc5]",
                        help="z3 alone, or z3 raced by cvc5 on the queries z3 does not answer at once (default: "
                             "z3,cvc5 where cvc5 is installed, else z3); the report says which solver answered")
    parser.add_argument("--tv-bound", metavar="EXPR", default=None,
                        help="instead of losslessness, prove TV(law, target) <= EXPR for every pair (a lossy rule), "
                             "e.g. '(1 - w) * tv_pq': tv_pq = TV(p, q) of the first position, the method's parameters "
                             "(w, eps, delta, T), V, L, N; numbers, + - * / **, min, max, abs")
    parser.add_argument("--json", metavar="PATH", default=None, help="also write the result as JSON (atomically)")
    return parser


def add_backend_arguments(parser: argparse.ArgumentParser, cluster_note: str = "") -> None:
    """--backend and --cluster: where the joblib workers run (`verispec.formal.parallel`); shared
    by `verispec prove` and `verispec check`. `cluster_note` ends the --cluster help."""
    parser.add_argument("--backend", default=None, choices=BACKENDS,
                        help="joblib backend of the workers: loky (default; processes on this machine), "
                             "dask or ray (a cluster: see --cluster)")
    parser.add_argument("--cluster", default=None, metavar="ADDRESS",
                        help="the cluster of --backend dask (scheduler address, e.g. tcp://10.0.0.5:8786; default: "
                             "a local cluster) or ray (default: $RAY_ADDRESS)" + cluster_note)


#: `prove`'s argument names as the flags that set them (its errors start with the argument's name).
FLAGS = {"vocab_size": "--vocab-size", "draft_length": "--draft-length", "num_paths": "--num-paths",
         "timeout": "--timeout", "target_temperature": "--target-temperature", "context": "--context",
         "point_trials": "--point-trials", "workers": "--workers", "solvers": "--solvers",
         "backend": "--backend", "cluster": "--cluster"}


def _as_flag(message: str) -> str:
    """An error of `prove` ("num_paths: 3 differs ...") as the flag that set it ("--num-paths: 3 ...")."""
    name, sep, rest = message.partition(":")
    return f"{FLAGS[name]}:{rest}" if sep and name in FLAGS else message


def _all_vocab(args) -> int:
    """`--all-vocab`: the cutoff certificate; prints its verdict line first."""
    for flag, value, default in (("--vocab-size", args.vocab_size, None), ("--context", args.context, ()),
                                 ("--target-temperature", args.target_temperature, 1)):
        if value != default:
            print(f"verispec prove: {flag}: --all-vocab proves every V at temperature 1 from the empty context; "
                  f"leave {flag} out", file=sys.stderr)
            return 2
    extra = {} if args.point_trials is None else {"point_trials": args.point_trials}
    try:
        result = prove_all_vocab(args.method, args.draft_length, args.num_paths, timeout=args.timeout,
                                 solvers=args.solvers, **extra)
    except (TypeError, ValueError) as err:
        return _error(err)
    _report(result, args, "prove --all-vocab")
    return 0 if result.proved else 1 if result.verdict == "counterexample" else 3


def _error(err) -> int:
    """Print a `prove` error (a TypeError or ValueError); its exit status by its type
    (`verispec.commandline.exit_status`: 3 a rule's contract error, 2 bad arguments)."""
    status = exit_status(err)
    if status == CONTRACT_ERROR:
        # e.g. a division by a value that is 0 for some pair: no law to prove anything about
        print(f"verispec prove: rule contract error (not a lossless verdict): {err}", file=sys.stderr)
    else:
        print(f"verispec prove: {_as_flag(str(err))}", file=sys.stderr)
    return status


def _report(result, args, command) -> None:
    """Print the result; write it as JSON where --json asks."""
    print(result.summary())
    if args.json:
        write_json_atomic(args.json, {"command": command, "version": __version__,
                                      "python": platform.python_version(), **result.to_json()})


def run(args) -> int:
    """Run one proof from parsed arguments (--all-vocab: the cutoff certificate; --tv-bound: a
    TV-bound proof); print the verdict; return the exit status."""
    tv_bound = getattr(args, "tv_bound", None) is not None
    if args.all_vocab and tv_bound:
        print("verispec prove: --tv-bound: proved at one vocabulary size; leave out --all-vocab", file=sys.stderr)
        return 2
    if args.all_vocab:
        return _all_vocab(args)
    result = tv_bound_from_args(args) if tv_bound else _prove(args)
    if isinstance(result, int):  # bad arguments or a rule contract error, already reported
        return result
    _report(result, args, "prove --tv-bound" if tv_bound else "prove")
    return EXIT[result.verdict]


def _prove(args):
    """The `ProofResult` of the arguments, or the exit status of an error it printed."""
    temperature = int(args.target_temperature)
    try:
        extra = {} if args.point_trials is None else {"point_trials": args.point_trials}
        vocab_size = 2 if args.vocab_size is None else args.vocab_size
        return prove(args.method, vocab_size, args.draft_length, args.num_paths, timeout=args.timeout,
                     target_temperature=temperature, context=args.context, workers=args.workers,
                     solvers=args.solvers, backend=args.backend, cluster=args.cluster, **extra)
    except (TypeError, ValueError) as err:
        return _error(err)
