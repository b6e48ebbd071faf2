"""``verispec check-sampler LIBRARY``: a library's own speculative sampler through the chain harness.

    verispec check-sampler transformers [--mode standard|diverse|both] [--tv 0.05] [--alpha 1e-6]
                                        [--power 0.9] [--ensemble-weight 0.5]

Prints each mode's verdict with alpha, power, n and (when rejected) the measured TV. Exit status:
0 when the standard mode passes (a DIVERSE rejection is expected: it is lossy by design), 1 when
the standard mode is rejected, 2 when the library or the function is missing.
"""

from __future__ import annotations

import argparse
import sys

from ..testing import gtest
from . import transformers as hf

__all__ = ["add_parser", "add_arguments", "run", "LIBRARIES"]

LIBRARIES = ("transformers",)


def _open_unit(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {value}")
    return value


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``verispec check-sampler`` on `subparsers` (its ``func``: `run`); returns its parser."""
    parser = subparsers.add_parser(
        "check-sampler", help="check a library's own speculative sampler (G-test, alpha and power)",
        description="Run the installed library's sampler through verispec's black-box harness "
                    "(assert_sampler_lossless) and print the verdict with alpha, power and n.")
    add_arguments(parser)
    parser.set_defaults(func=run)
    return parser


def add_arguments(p) -> None:
    """Add the `verispec check-sampler` arguments to `p`."""
    p.add_argument("library", choices=LIBRARIES, help="whose sampler to check")
    p.add_argument("--mode", choices=("standard", "diverse", "both"), default="both",
                   help="standard speculative sampling (must pass), DIVERSE ensemble verification "
                        "(assistant_ensemble_weight; lossy by design), or both (default)")
    p.add_argument("--tv", type=_open_unit, default=0.05, help="power is guaranteed at TV >= this (default 0.05)")
    p.add_argument("--alpha", type=_open_unit, default=gtest.ALPHA,
                   help=f"false-alarm rate of each mode's run (default {gtest.ALPHA:g})")
    p.add_argument("--power", type=_open_unit, default=gtest.POWER, help=f"power (default {gtest.POWER:g})")
    p.add_argument("--ensemble-weight", type=_open_unit, default=0.5, help="DIVERSE's w (default 0.5)")


def _line(verdict, label) -> str:
    settings = (f"alpha = {verdict.alpha:g} for the run, power {verdict.power:g} at TV {verdict.tv_target:g}, "
                f"{len(verdict.report.results)} instance(s), n = {verdict.n:,} rows; {verdict.seconds:.1f} s")
    if verdict.lossless:
        exact_note = "" if verdict.exact_tv is None else f" (exact TV of the same rule {verdict.exact_tv:.4f})"
        return f"{label}: PASS (the G-test does not reject the target law){exact_note}: {settings}"
    failing = verdict.report.results[-1]
    beside = "" if verdict.exact_tv is None else f" (exact TV of the same rule on this instance {verdict.exact_tv:.4f})"
    return (f"{label}: LOSSY: rejected on {failing.instance.label} (V = {failing.instance.vocab_size}), "
            f"measured TV {verdict.tv:.4f}{beside}; {settings}")


def run(args) -> int:
    """Run the modes `args` asks for; print one verdict line each; return the exit status."""
    try:
        fn = hf.speculative_sampling_function()
        import transformers  # optional dependency (speculative_sampling_function imported it already)
    except (hf.IntegrationError, ImportError) as err:
        print(f"verispec check-sampler: {err}", file=sys.stderr)
        return 2
    print(f"transformers {transformers.__version__}: {hf.FUNCTION}")
    status = 0
    if args.mode in ("standard", "both"):
        verdict = hf.check_speculative_sampling("standard", tv=args.tv, alpha=args.alpha, power=args.power)
        print(_line(verdict, "standard"))
        status = 0 if verdict.lossless else 1
    if args.mode in ("diverse", "both"):
        label = f"diverse ({hf.ENSEMBLE_ARGUMENT}={args.ensemble_weight:g}, lossy by design)"
        if not hf.supports_ensemble(fn):
            print(f"{label}: not available: the installed function has no {hf.ENSEMBLE_ARGUMENT} argument")
        else:
            verdict = hf.check_speculative_sampling("diverse", args.ensemble_weight, tv=args.tv, alpha=args.alpha,
                                                    power=args.power)
            print(_line(verdict, label) + ("" if not verdict.lossless else " (not detected at this TV)"))
    return status
