"""Torch backend: the reference rules as batched tensor functions, run on real causal LMs.

    from verispec.empirical import rules, uniforms          # pure rules on probability tensors
    from verispec.empirical.model import CausalLM            # thin transformers wrapper (KV cache, trees)
    from verispec.empirical import decode                    # THE decode entry point: drafter -> one
                                                             # target tree forward -> verifier -> KV keep
    from verispec.empirical import methods                   # built-in TorchMethods by name
    from verispec.empirical.adapter import torch_method      # any reference Method on real models

`decode(target, draft, prompts, method, N, T, uniforms, storage)` runs every method: single
prompts and batches (storage "sequence", "padded", "vanilla", or "packed" = EMS-SD), path methods
and trees (`methods.get(name, ...)`), target-only (`engine.target_only_method()`), phrase pools
(`phrases.ouroboros_method()`, `ouroboros_phrase_method()`, `lookahead_method()`); one
`DecodeStats` holds every method's counters (method-specific ones in `stats.logs`).

Modules: engine (the loop), drafters / trees / phrases (drafters), kv (KV storages: sequence,
padded, packed), rules (every verification), adapter (reference Methods), attention (per-row
attention of the packed layout), draftvocab (the draft's LM head over a token subset, FR-Spec),
linear_layout (a target's linear layers as (W @ X^T)^T for a verification forward's few rows on CPU),
bench / bench_batched (`verispec bench`).

Needs the optional extras `torch` (and `transformers` to load models); importing this
package without torch raises an ImportError naming the extra. `verispec.reference` never imports
this package.
"""

try:
    import torch  # noqa: F401
except ImportError as err:  # pragma: no cover - exercised only without torch
    raise ImportError("verispec.empirical needs torch: pip install 'verispec[torch]' "
                      "(on CPU-only machines: pip install torch==2.13.0 first)") from err

from . import uniforms, verifiers  # noqa: E402
from .engine import DecodeResult, DecodeStats, TorchMethod, decode  # noqa: E402
from .verifiers import RULES, RuleOutput, uniforms_needed, verify  # noqa: E402
from .uniforms import NumpyUniforms, ReplayUniforms, TorchUniforms, UniformSource  # noqa: E402

__all__ = ["decode", "DecodeResult", "DecodeStats", "TorchMethod", "verifiers", "uniforms", "RULES", "RuleOutput",
           "uniforms_needed", "verify", "NumpyUniforms", "ReplayUniforms", "TorchUniforms", "UniformSource"]
