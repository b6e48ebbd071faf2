"""Int8 draft weights: a cheaper draft forward that leaves every lossless rule's output law fixed.

`quantize_draft(draft)` returns an int8-weight copy of a DRAFT model: every `torch.nn.Linear` (the
LM head included) becomes a dynamically quantized linear (int8 weights, one scale per output row;
activations quantized per call; int32 accumulation; float32 out), as torch's `quantize_dynamic`
(Jacob et al. 2018, arXiv 1712.05877, Sec. 2). Per-channel scales keep the draft closer to its
float self than one scale per tensor, so more drafts are accepted (docs/draft_quant.md).

Why it is lossless: a verifier reads the q the drafted tokens were actually drawn from, and the
output law is the target's p whatever q is (Leviathan et al. 2023, arXiv 2211.17192, Thm. 1). An
int8 draft changes q, hence acceptance and speed, never the output law. The TARGET is never
quantized (that would change p).

Draft vocabularies compose (FR-Spec, `CausalLM.with_head_subset`): `int8_head.subset_head` takes
the quantized head's rows over S at the same scales (no re-quantization). torch marks
`torch.ao.quantization` deprecated in favour of torchao; its notices are silenced around that one
call (`int8_head.quiet_quantization`); the torch API needs no extra package.
"""

from __future__ import annotations

import copy

import torch

from ..model import CausalLM
from .int8_head import is_quantized_linear, quiet_quantization, subset_head

__all__ = ["quantize_draft", "quantize_weights", "is_quantized_linear", "subset_head", "DESCRIPTION"]

#: What ``dq=8`` means, for reports (the bench's JSON).
DESCRIPTION = ("draft weights int8: every Linear of the draft (LM head included) replaced by "
               "torch.ao dynamic int8 quantization (per-channel weight scales, activations quantized "
               "per call, int32 accumulation); the rest of the draft (embedding, norms, attention, "
               "KV cache) in float32; the target untouched")

# The deprecation notices torch 2.10+ prints for torch.ao's eager quantization API (matched by
# message, so any other warning of that call still shows).

def quantize_draft(draft: CausalLM, bits: int = 8) -> CausalLM:
    """An int8-weight copy of a draft model (the original is left as it is): `quantize_weights`.

    Args:
        draft: a `CausalLM` on CPU (any float dtype), without a head subset (quantize the full
            model, then take `with_head_subset` of the copy).
        bits: 8 (the only width torch's dynamic quantization runs on CPU).

    Returns:
        a new `CausalLM` (dtype float32) around a deep copy of `draft.model` whose
        `torch.nn.Linear` layers are int8 dynamic linears; `forward`/`chain`/`tree`/`prefill`
        return logits float32 [B, q, V] as before, its KV caches are float32. The module is still
        the same transformers `PreTrainedModel` class with its config, so
        ``generate(assistant_model=...)`` takes it. Building it costs seconds on a 0.5B model:
        build once and reuse.

    Raises:
        TypeError: `draft` is not a `CausalLM`.
        ValueError: bits other than 8, a model off the CPU (torch's int8 dynamic kernels are
            CPU kernels), a head-subset view, or a model already quantized.
    """
    return quantize_weights(draft, bits, role="draft")


def quantize_weights(model: CausalLM, bits: int = 8, role: str = "model") -> CausalLM:
    """An int8-weight copy of any `CausalLM`, as `quantize_draft` describes (same arguments,
    result and errors; `role` only names the argument in error messages).

    Not for a TARGET: besides changing p, the copy's logits for a position depend on the other
    rows of the same forward (one activation scale per call), so a verifying forward of L + 1
    tokens and a one-token forward give that position different laws, and no verifier can be
    lossless with respect to a law that depends on how tokens are grouped into forwards
    (`benchmarks/bench_rows.py --model` still times it, for reference).
    """
    if not isinstance(model, CausalLM):
        raise TypeError(f"{role}: expected a CausalLM, got {type(model).__name__}")
    if isinstance(bits, bool) or bits != 8:
        raise ValueError(f"bits: only 8 (int8 dynamic quantization) is supported, got {bits!r}")
    if model.device.type != "cpu":
        raise ValueError(f"{role}: int8 dynamic quantization runs on CPU only, the model is on {model.device}")
    if model.head_subset is not None:
        raise ValueError(f"{role}: a head-subset view; quantize the full model, then call with_head_subset")
    if any(is_quantized_linear(m) for m in model.model.modules()):
        raise ValueError(f"{role}: already quantized")
    module = copy.deepcopy(model.model).float()  # quantize_dynamic takes float32 weights and activations
    with quiet_quantization():
        spec = {torch.nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig}  # one scale per output row
        module = torch.ao.quantization.quantize_dynamic(module, spec, dtype=torch.qint8, inplace=True)
    return CausalLM(module, name=f"{model.name} [int8 weights]")
