"""The ``check-sampler`` and ``check-engine`` commands' parsers, for `verispec.cli` to register.

`add_check_sampler_parser(sub)` and `add_check_engine_parser(sub)` add each command to an argparse
subparsers object, with its ``func`` (`check_sampler.run`, `check_engine.run`: each returns the exit
status).
"""

from __future__ import annotations

from . import check_engine, check_sampler

__all__ = ["add_check_sampler_parser", "add_check_engine_parser"]


def add_check_sampler_parser(sub) -> None:
    p = sub.add_parser("check-sampler", help="check a library's own speculative sampler (G-test, alpha and power)",
                       description="Run the installed library's sampler (transformers' _speculative_sampling; "
                                   "vLLM's rejection_sample and RejectionSampler) through verispec's black-box "
                                   "harness (assert_sampler_lossless) and print each verdict with alpha, power and n.")
    check_sampler.add_arguments(p)
    p.set_defaults(func=check_sampler.run)


def add_check_engine_parser(sub) -> None:
    p = sub.add_parser("check-engine", help="check an engine's whole speculative decoding against the exact law",
                       description="Serve verispec's tiny seeded target/draft pair with the engine's own speculative "
                                   "generation (and without it, as a control), G-test the first N tokens against "
                                   "the exact target law (float64), and compare the engine's acceptance counters "
                                   "with the exact expectation of the rule it claims.")
    check_engine.add_arguments(p)
    p.set_defaults(func=check_engine.run)
