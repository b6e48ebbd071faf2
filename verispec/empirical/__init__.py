"""Torch backend: the reference rules as batched tensor functions, run on real causal LMs.

    from verispec.empirical import decode, methods           # THE entry point; methods by name
    from verispec.empirical.model import CausalLM            # thin transformers wrapper (KV cache, trees)
    from verispec.empirical.adapter import torch_method      # any reference Method on real models

`decode(target, draft, prompts, method, N, T, uniforms, storage)` runs every method (drafter ->
one target tree forward -> verifier -> KV keep): single prompts and batches (storage "sequence",
"padded", "vanilla", or "packed" = EMS-SD), built by name from the registry
(`methods.get(name, ...)`, `methods.get("target_only")`) or a user's reference Method; one
`DecodeStats` holds every method's counters (method-specific ones in `stats.logs`).

Modules: engine (the loop), torch_method (`TorchMethod`), drafters/ (chains, paths, trees, lookup,
adaptive chains, phrase pools), verifiers/ (every verification rule), kv (KV storages), model,
uniforms, adapter (reference Methods), methods (by name), speedups/ (the lossless speed options).
The benchmark harness is `verispec.bench`. Needs the optional extra `torch`; `verispec.reference`
never imports this package.
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
