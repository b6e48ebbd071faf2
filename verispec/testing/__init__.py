"""What researchers import in their own pytest suites.

    from verispec.testing import assert_lossless, strategies, planted

- `assert_lossless(method, ...)`: exact check (by enumeration) that a method's output law equals the
  target's, on one instance or a deterministic sweep; reports the smallest counterexample. The sweep
  is a `Sweep` (`verispec.testing.sweeps`), the one planner `verispec check` uses too.
- `assert_not_worse(method, baseline, ...)`: exact E[tau] comparison (catches lossless-but-slower).
- `assert_proved(method, vocab_size=V, draft_length=L, num_paths=K)`: a proof that the method is
  lossless for every target/draft pair at that size (symbolic execution + the z3 SMT solver).
- `RuleContractError`: a rule that raises or returns a malformed result (not a lossless verdict);
  `LosslessnessError`: a well-formed rule whose law differs from the target's.
- `strategies`: hypothesis strategies (distributions, toy LMs, target/draft pairs, temperatures,
  instances).
- `planted`: the planted bugs of docs/testing.md, to show that a check can fail.
- `assert_sampler_lossless(fn, ...)`: a statistical check (G-test, stated false-alarm rate and power)
  of a batched torch/numpy sampler with its own RNG; `gtest`: the test, its sample size and power.
- `assert_tree_sampler_lossless(fn, drafter=...)`: the same check for a batched tree (multi-draft)
  sampler, in the parents (EAGLE, vLLM) or next-sibling (SGLang) layout; `tree_layout` converts
  between them; `TreeRejectionSampler` / `reference_tree_sampler`: an SGLang-style tree sampler;
  `planted_trees`: three planted tree-sampler bugs.
- `assert_engine_lossless(generate, pair, settings)`: a whole engine's speculative decoding on
  verispec's tiny seeded HF pair (`tiny_pair.build_tiny_pair`), G-tested against the exact float64
  target law of the first N tokens, with per-position TVs and the engine's acceptance counters beside
  the exact expectation of the rule it claims (`SpeculationClaim`); `exact_generate`: a lossless
  baseline engine.
- A pytest plugin (entry point ``verispec``) registers hypothesis profiles "verispec-ci" and
  "verispec-dev" and the fixtures ``assert_lossless`` and ``assert_not_worse``.
"""

from . import gtest, planted, planted_trees, strategies, tree_layout
from .assertions import (LosslessnessError, LosslessReport, NotWorseError, RuleContractError, assert_lossless,
                         assert_not_worse, default_num_tokens, sweep)
from .engine import (EngineCheckSettings, EngineContractError, EngineCounters, EngineLosslessnessError, EngineReport,
                     EngineSample, PairLaw, SpeculationClaim, assert_engine_lossless, exact_generate)
from .proofs import ProofError, assert_proved
from .sampler import (SamplerContractError, SamplerLosslessnessError, SamplerReport, assert_sampler_lossless,
                      reference_sampler)
from .sweeps import Instance, Sweep
from .tree_reference import TreeRejectionSampler, parents_tree_sampler, reference_tree_sampler
from .tree_sampler import TreeSamplerReport, assert_tree_sampler_lossless

__all__ = ["assert_lossless", "assert_not_worse", "sweep", "Sweep", "default_num_tokens", "strategies", "planted",
           "Instance", "LosslessnessError", "LosslessReport", "NotWorseError", "RuleContractError",
           # black-box samplers (batched torch/numpy code with its own RNG): a G-test of the emitted law
           "assert_sampler_lossless", "reference_sampler", "SamplerReport", "SamplerLosslessnessError",
           "SamplerContractError", "gtest",
           # black-box tree samplers (flattened node layouts of EAGLE / vLLM / SGLang)
           "assert_tree_sampler_lossless", "TreeSamplerReport", "TreeRejectionSampler", "reference_tree_sampler",
           "parents_tree_sampler", "tree_layout", "planted_trees",
           # a whole engine (generate callable) on a tiny seeded HF pair against the exact law
           "assert_engine_lossless", "EngineCheckSettings", "EngineReport", "EngineCounters", "EngineSample",
           "EngineLosslessnessError", "EngineContractError", "PairLaw", "SpeculationClaim", "exact_generate",
           # a proof for every target/draft pair at a fixed small size
           "assert_proved", "ProofError"]
