"""``verispec check-engine ENGINE``: an engine's whole speculative decoding against the exact target law.

    verispec check-engine transformers|vllm [--modes a,b] [--tv 0.05] [--alpha 1e-3] [--power 0.9]
        [--num-tokens 4] [--draft-length 2] [--temperature 1] [--seed 0] [--num-samples N]
        [--pair-dir DIR] [--json PATH]

Builds verispec's tiny seeded pair (`verispec.testing.tiny_pair`; in a temporary folder unless
``--pair-dir``), then runs each mode of the engine (`ENGINE_MODES`: its speculative generation with
the draft's sampled and, where the engine has one, greedy mode, and the same engine without
speculation as a control) through `verispec.testing.assert_engine_lossless`, and prints each report:
the G-test verdict, per-position TVs, and the engine's acceptance counters beside the exact
expectation of the rule it claims. alpha is the false-alarm rate of the whole command, split
(Bonferroni) over every test it runs (one per mode, plus one acceptance test per speculative mode).

Exit status: 0 every mode passes and every acceptance count is consistent; 1 a law is rejected or an
acceptance count differs; otherwise by the error's type (`verispec.commandline.exit_status`): 2 the
engine (or what the adapter looks up in it) is missing (`IntegrationError`), or bad arguments
(ValueError); 3 the engine failed to start or broke the generate contract (it raised or returned
malformed tokens: `EngineContractError`): a crash is not a verdict.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from dataclasses import asdict

from .. import __version__
from ..atomic import write_json_atomic
from ..commandline import exit_status, nonnegative_int, open_unit, positive_float, positive_int
from ..testing import gtest
from ..testing.engine import (EngineCheckSettings, EngineContractError, EngineLosslessnessError, PairLaw,
                              assert_engine_lossless)
from ..testing.tiny_pair import PAIR_FILE, build_tiny_pair, load_tiny_pair
from .engines import TransformersEngine, VllmEngine
from .verdict import IntegrationError

__all__ = ["add_parser", "add_arguments", "run", "ENGINE_MODES", "ENGINES"]

#: {engine: {mode: (what it runs, the adapter's keyword arguments)}}.
ENGINE_MODES = {
    "transformers": {
        "speculative": ("assisted generation, do_sample=True (the assistant samples its drafts)",
                        {"speculative": True}),
        "control": ("generate(do_sample=True) without an assistant", {"speculative": False}),
    },
    "vllm": {
        "probabilistic": ("draft_model speculation, draft_sample_method='probabilistic'",
                          {"speculative": True, "greedy_draft": False}),
        "greedy": ("draft_model speculation, draft_sample_method='greedy'",
                   {"speculative": True, "greedy_draft": True}),
        "control": ("the same LLM without speculative_config", {"speculative": False}),
    },
}
#: {engine: its adapter class}.
ENGINES = {"transformers": TransformersEngine, "vllm": VllmEngine}


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``verispec check-engine`` on `subparsers` (its ``func``: `run`); returns its parser."""
    parser = subparsers.add_parser(
        "check-engine", help="check an engine's whole speculative decoding against the exact law",
        description="Serve verispec's tiny seeded target/draft pair with the engine's own speculative "
                    "generation (and without it, as a control), G-test the first N tokens against the exact "
                    "target law (float64), and compare the engine's acceptance counters with the exact "
                    "expectation of the rule it claims.")
    add_arguments(parser)
    parser.set_defaults(func=run)
    return parser


def add_arguments(p) -> None:
    """Add the `verispec check-engine` arguments to `p`."""
    p.add_argument("engine", choices=tuple(ENGINE_MODES), help="whose speculative decoding to check")
    p.add_argument("--modes", default=None, metavar="A,B",
                   help="transformers: speculative,control; vllm: probabilistic,greedy,control (default: all)")
    p.add_argument("--tv", type=open_unit, default=0.05, help="power is guaranteed at TV >= this (default 0.05)")
    p.add_argument("--alpha", type=open_unit, default=1e-3,
                   help="false-alarm rate of the whole command, split over its tests (default 0.001)")
    p.add_argument("--power", type=open_unit, default=gtest.POWER, help=f"power (default {gtest.POWER:g})")
    p.add_argument("--num-tokens", type=positive_int, default=4, help="N tokens per request compared (default 4)")
    p.add_argument("--draft-length", type=positive_int, default=2, help="draft tokens per iteration (default 2)")
    p.add_argument("--temperature", type=positive_float, default=1.0, help="sampling temperature T > 0 (default 1)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="seed handed to generate (default 0)")
    p.add_argument("--num-samples", type=positive_int, default=None,
                   help="requests per mode (default: the least n with the stated power)")
    p.add_argument("--pair-dir", default=None, help="build (or reuse) the tiny pair here (default: a temporary folder)")
    p.add_argument("--json", metavar="PATH", help="also write every report as JSON (atomically)")


def _modes(args) -> tuple:
    known = ENGINE_MODES[args.engine]
    if args.modes is None:
        return tuple(known)
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    unknown = [m for m in modes if m not in known]
    if unknown or not modes:
        raise ValueError(f"--modes: {', '.join(unknown) or '(none)'}: the modes of {args.engine} are "
                         f"{', '.join(known)}")
    return modes


def _pair(folder: str):
    return load_tiny_pair(folder) if os.path.exists(os.path.join(folder, PAIR_FILE)) else build_tiny_pair(folder)


def _run_mode(args, mode, pair, settings, law):
    """One mode -> (report, status): 0 passed, 1 rejected (law or acceptance), or the status of the
    `EngineContractError` it printed (the engine failed to start or broke the generate contract)."""
    description, options = ENGINE_MODES[args.engine][mode]
    label = f"{args.engine} {mode} ({description})"
    try:
        engine = ENGINES[args.engine](pair, draft_length=args.draft_length, temperature=args.temperature, **options)
    except (IntegrationError, ImportError):
        raise  # the library or an entry point is missing: not this mode's crash
    except Exception as err:  # the engine itself failed to start (vLLM #46069 crashed every CPU run so)
        crash = EngineContractError(f"the engine failed to start: {type(err).__name__}: {err}")
        print(f"{label}: CONTRACT: {crash}")
        return None, exit_status(crash)
    try:
        report = assert_engine_lossless(engine.generate, pair, settings, claim=engine.claim, label=label, law=law)
    except EngineLosslessnessError as err:
        report = err.report
    except EngineContractError as err:
        print(f"{label}: CONTRACT: {err}")
        return None, exit_status(err)
    finally:
        getattr(engine, "close", lambda: None)()
    consistent = report.acceptance is None or report.acceptance.consistent
    return report, 0 if report.passed and consistent else 1


def _versions(engine: str) -> dict:
    import torch  # optional dependency
    import transformers  # optional dependency

    found = {"verispec": __version__, "torch": torch.__version__, "transformers": transformers.__version__,
             "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    if engine == "vllm":
        import vllm  # optional dependency (the vllm extra)

        found["vllm"] = vllm.__version__
    return found


def _check(args, modes, folder) -> tuple:
    pair = _pair(folder)
    specs = sum(bool(ENGINE_MODES[args.engine][m][1]["speculative"]) for m in modes)
    settings = EngineCheckSettings(num_tokens=args.num_tokens, temperature=args.temperature, tv=args.tv,
                                   alpha=args.alpha / (len(modes) + specs), power=args.power, seed=args.seed,
                                   num_samples=args.num_samples)
    law = PairLaw(pair, settings)
    reports, status = [], 0
    for mode in modes:
        report, code = _run_mode(args, mode, pair, settings, law)
        status = max(status, code)
        if report is not None:
            print(report)
            reports.append(report)
    return reports, status, pair


def run(args) -> int:
    """Run the modes `args` asks for; print each report; return the exit status (module docstring).

    Raises:
        ValueError: bad --modes or settings. IntegrationError: the engine, torch or transformers is
            missing, or an entry point the adapter looks up. (`verispec.cli` maps each to its exit
            status.)
    """
    start = time.perf_counter()
    modes = _modes(args)
    try:
        with tempfile.TemporaryDirectory(prefix="verispec-pair-") as scratch:
            reports, status, pair = _check(args, modes, args.pair_dir or scratch)
        versions = _versions(args.engine)
    except ImportError as err:  # torch or transformers (the pair, the adapter) or the engine
        raise IntegrationError(f"{args.engine}: {err} (pip install 'verispec[torch]', or 'verispec[vllm]' "
                               "in a venv of its own)") from err
    seconds = time.perf_counter() - start
    print(f"check-engine {args.engine}: {'PASS' if status == 0 else 'FAIL'} ({seconds:.1f} s in all; "
          f"alpha = {args.alpha:g} for the command, split over {len(modes)} law test(s) and the acceptance tests)")
    if args.json:
        write_json_atomic(args.json, {
            "command": (f"verispec check-engine {args.engine} --modes {','.join(modes)} --tv {args.tv:g} --alpha "
                        f"{args.alpha:g} --power {args.power:g} --num-tokens {args.num_tokens} --draft-length "
                        f"{args.draft_length} --temperature {args.temperature:g} --seed {args.seed}"),
            "engine": args.engine, **versions, "pair": asdict(pair.config),
            "platform": platform.platform(), "cpu_count": os.cpu_count(), "status": status,
            "seconds": round(seconds, 2), "reports": [r.as_dict() for r in reports]})
    return status
