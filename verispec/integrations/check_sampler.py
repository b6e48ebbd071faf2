"""``verispec check-sampler LIBRARY``: a library's own speculative sampler through the chain harness.

    verispec check-sampler transformers [--mode standard|diverse|both] [--ensemble-weight 0.5]
    verispec check-sampler vllm [--mode function|ngram|module|all]
        common: [--tv 0.05] [--alpha 1e-6] [--power 0.9] [--json PATH]

Prints each mode's verdict with alpha, power, n and time (and, when rejected, the measured TV).
Exit status: 0 when every mode that must pass passes (a DIVERSE rejection is expected: it is lossy by
design), 1 when one is rejected. The other statuses come from the error's type
(`verispec.commandline.exit_status`, in `verispec.cli`): 2 the library or what the adapter looks up
in it is missing (`IntegrationError`), or the mode does not belong to the library (ValueError); 3
the library's function raised or broke the output contract (`SamplerContractError`: a crash, not a
verdict).
"""

from __future__ import annotations

import argparse
import os
import platform

from .. import __version__
from ..atomic import write_json_atomic
from ..commandline import open_unit
from ..testing import gtest
from . import transformers as hf
from . import vllm_api, vllm_sampler

__all__ = ["add_parser", "add_arguments", "run", "LIBRARIES", "MODES"]

#: {library: (its modes, the mode that runs them all)}.
MODES = {"transformers": (("standard", "diverse"), "both"), "vllm": (tuple(vllm_sampler.MODES), "all")}
LIBRARIES = tuple(MODES)


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``verispec check-sampler`` on `subparsers` (its ``func``: `run`); returns its parser."""
    parser = subparsers.add_parser(
        "check-sampler", help="check a library's own speculative sampler (G-test, alpha and power)",
        description="Run the installed library's sampler (transformers' _speculative_sampling; vLLM's "
                    "rejection_sample and RejectionSampler) through verispec's black-box harness "
                    "(assert_sampler_lossless) and print each verdict with alpha, power and n.")
    add_arguments(parser)
    parser.set_defaults(func=run)
    return parser


def add_arguments(p) -> None:
    """Add the `verispec check-sampler` arguments to `p`."""
    choices = sorted({m for modes, every in MODES.values() for m in modes + (every,)})
    p.add_argument("library", choices=LIBRARIES, help="whose sampler to check")
    p.add_argument("--mode", choices=choices, default=None,
                   help="transformers: standard (must pass), diverse (assistant_ensemble_weight; lossy by design) "
                        "or both (default); vllm: function (rejection_sample with draft probabilities), ngram "
                        "(draft_probs=None), module (RejectionSampler.forward on engine-style mixed batches) or all "
                        "(default)")
    p.add_argument("--tv", type=open_unit, default=0.05, help="power is guaranteed at TV >= this (default 0.05)")
    p.add_argument("--alpha", type=open_unit, default=gtest.ALPHA,
                   help=f"false-alarm rate of each mode's run (default {gtest.ALPHA:g})")
    p.add_argument("--power", type=open_unit, default=gtest.POWER, help=f"power (default {gtest.POWER:g})")
    p.add_argument("--ensemble-weight", type=open_unit, default=0.5, help="transformers DIVERSE's w (default 0.5)")
    p.add_argument("--json", metavar="PATH", help="also write every mode's verdict as JSON (atomically)")


def _line(verdict, label) -> str:
    settings = (f"alpha = {verdict.alpha:g} for the run, power {verdict.power:g} at TV {verdict.tv_target:g}, "
                f"{len(verdict.report.results)} instance(s), n = {verdict.n:,} rows; {verdict.seconds:.1f} s")
    if verdict.lossless:
        exact_note = "" if verdict.exact_tv is None else f" (exact TV of the same rule {verdict.exact_tv:.4f})"
        return f"{label}: PASS (the G-test does not reject the target law){exact_note}: {settings}"
    note = f"; {verdict.note}" if verdict.note else ""
    if verdict.tv is None:  # rejected by a check beside the G-test only (vLLM's greedy rows)
        return f"{label}: NOT lossless: {verdict.note}; {settings}"
    failing = verdict.report.results[-1]
    beside = "" if verdict.exact_tv is None else f" (exact TV of the same rule on this instance {verdict.exact_tv:.4f})"
    word = "LOSSY" if verdict.exact_tv is not None else "NOT lossless"
    return (f"{label}: {word}: rejected on {failing.instance.label} (V = {failing.instance.vocab_size}), "
            f"measured TV {verdict.tv:.4f}{beside}{note}; {settings}")


def _record(verdict, label) -> dict:
    return {"mode": verdict.mode, "label": label, "lossless": verdict.lossless, "measured_tv": verdict.tv,
            "exact_tv_of_the_same_rule": verdict.exact_tv, "alpha": verdict.alpha, "power": verdict.power,
            "tv_target": verdict.tv_target, "n": verdict.n, "instances": len(verdict.report.results),
            "seconds": round(verdict.seconds, 2), "message": verdict.message, "note": verdict.note}


def _transformers(args, modes):
    """[(verdict, label, must pass)] for transformers' modes; the version line first."""
    fn = hf.speculative_sampling_function()  # IntegrationError when transformers or the function is missing
    import transformers  # optional dependency (speculative_sampling_function imported it already)

    print(f"transformers {transformers.__version__}: {hf.FUNCTION}")
    out = []
    if "standard" in modes:
        out.append((hf.check_speculative_sampling("standard", tv=args.tv, alpha=args.alpha, power=args.power),
                    "standard", True))
    if "diverse" in modes:
        label = f"diverse ({hf.ENSEMBLE_ARGUMENT}={args.ensemble_weight:g}, lossy by design)"
        if not hf.supports_ensemble(fn):
            print(f"{label}: not available: the installed function has no {hf.ENSEMBLE_ARGUMENT} argument")
        else:
            out.append((hf.check_speculative_sampling("diverse", args.ensemble_weight, tv=args.tv, alpha=args.alpha,
                                                      power=args.power), label, False))
    return out, {"transformers": transformers.__version__}


def _vllm(args, modes):
    api = vllm_api.load()
    vllm_api.ensure_cpu_kernels(api)
    print(f"vLLM {api.version}: {vllm_api.ENTRY_POINTS['rejection_sample']}, "
          f"{vllm_api.ENTRY_POINTS['RejectionSampler']}.forward")
    out = []
    for mode in modes:
        verdict = vllm_sampler.check_rejection_sampler(mode, tv=args.tv, alpha=args.alpha, power=args.power, api=api)
        out.append((verdict, f"{mode} ({vllm_sampler.MODES[mode]})", True))
    return out, {"vllm": api.version}


def run(args) -> int:
    """Run the modes `args` asks for; print one verdict line each; return the exit status (0 or 1).

    Raises:
        ValueError: --mode is not a mode of the library. IntegrationError: the library or an entry
            point is missing. SamplerContractError: the library's function raised or broke the
            output contract. (`verispec.cli` maps each to its exit status.)
    """
    modes, every = MODES[args.library]
    mode = args.mode or every
    if mode != every and mode not in modes:
        raise ValueError(f"--mode: {mode!r} is not a mode of {args.library} (choose from {', '.join(modes + (every,))})")
    runner = {"transformers": _transformers, "vllm": _vllm}[args.library]
    found, versions = runner(args, modes if mode == every else (mode,))
    for verdict, label, must in found:
        print(_line(verdict, label) + ("" if must or not verdict.lossless else " (not detected at this TV)"))
    if args.json:
        command = (f"verispec check-sampler {args.library} --mode {mode} --tv {args.tv:g} --alpha {args.alpha:g} "
                   f"--power {args.power:g}")
        write_json_atomic(args.json, {"command": command,
                                      "library": args.library, "verispec": __version__, **versions,
                                      "platform": platform.platform(), "cpu_count": os.cpu_count(),
                                      "modes": [_record(v, label) for v, label, _ in found]})
    return 0 if all(v.lossless for v, _, must in found if must) else 1
