"""What a bench run measures, with its defaults, defined once and without torch.

`BenchSettings` and `BatchedBenchSettings` are the fields (and defaults) of `run.BenchConfig` and
`batched.BatchedBenchConfig`, which add the methods that need the torch extra. `verispec bench`'s
options read their defaults here, so `verispec --help` and `verispec bench --help` need no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_TARGET", "DEFAULT_DRAFT", "DEFAULT_METHODS", "BenchSettings", "BatchedBenchSettings"]

#: The default model pair: built-in names of `verispec.bench.weights.BUILTIN_MODELS`.
DEFAULT_TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m"
DEFAULT_DRAFT = "qwen2.5-coder-0.5b-instruct-q4_k_m"
#: The methods `verispec bench` runs by default (target-only always runs as the baseline).
DEFAULT_METHODS = ("hf", "token", "block", "gbv:K=3")


@dataclass
class BenchSettings:
    """What `run_bench` measures. Field names are the CLI's long options."""

    target: str = DEFAULT_TARGET
    draft: str = DEFAULT_DRAFT
    prompts: int = 10
    max_new_tokens: int = 128
    methods: tuple = DEFAULT_METHODS
    first_prompt: int = 0  # HumanEval prompts skipped before the `prompts` run (held-out prompts)
    temperatures: tuple = (0.0, 1.0)
    draft_length: int = 4
    num_paths: int = 3
    dtype: str = "auto"
    device: str = "cpu"
    threads: int = 0
    seed: int = 0
    device_map: str | None = None
    stop_at_eos: bool = False  # every method (the hf peers too) stops at the tokenizer's EOS


@dataclass
class BatchedBenchSettings:
    """What `run_batched_bench` measures (CLI: `verispec bench --batch-size ...`)."""

    target: str = DEFAULT_TARGET
    draft: str = DEFAULT_DRAFT
    prompts: int = 8
    max_new_tokens: int = 64
    batch_sizes: tuple = (1, 2, 4, 8)
    methods: tuple = ("block",)
    temperatures: tuple = (0.0,)
    draft_length: int = 3
    batches: int = 0
    dtype: str = "auto"
    device: str = "cpu"
    threads: int = 0
    seed: int = 0
    device_map: str | None = None
