"""`verispec check`: check methods (built-in or a user's ``pkg.module:attr``) on seeded toy instances.

`core` enumerates each method's exact output law on the instances of one `Sweep`
(`verispec.testing.sweeps`: the same planner `assert_lossless` uses) and aggregates max TV and
block efficiency per method; `command` is the command line (`add_parser`, `run`).
"""

from __future__ import annotations

from .core import (DEFAULT_VOCAB_SIZES, FLOAT_TOLERANCE, TEMPERATURES, Instance, MethodResult, check_method,
                   make_instances, merge_results, method_num_tokens, plan_instances, resolve_method, run_check)

__all__ = ["run_check", "check_method", "merge_results", "MethodResult", "make_instances", "plan_instances",
           "resolve_method", "method_num_tokens", "Instance", "DEFAULT_VOCAB_SIZES", "FLOAT_TOLERANCE", "TEMPERATURES"]
