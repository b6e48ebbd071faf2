"""The output layer of an int8 draft (`quantize.quantize_draft`): telling one apart, and taking its
rows over a token subset (FR-Spec's draft vocabulary, `CausalLM.with_head_subset`) without
re-rounding. Imports torch only, so the model wrapper can use it without importing `quantize`.
"""

from __future__ import annotations

import contextlib
import warnings

import torch

__all__ = ["is_quantized_linear", "subset_head", "quiet_quantization", "PrefixAndRest", "leading_run",
           "int8_linear", "PREFIX_MIN_ROWS"]

#: Ids that start with 0..k-1 for k >= this many share one packed int8 head over 0..k-1 across
#: subsets (`subset_head`): packing an int8 head into the GEMM layout costs time in its rows (the
#: 32,790 rows of a prompt's 32,768-token draft vocabulary took about 0.4 s per prompt on the real
#: pair's 2-core host), while a few hundred rows pack at once.
PREFIX_MIN_ROWS = 1024

_DEPRECATIONS = (r"torch\.ao\.quantization is deprecated", r".*quantized tensor creation functions")


@contextlib.contextmanager
def quiet_quantization():
    """Inside: torch.ao's deprecation notices ignored, every other warning as before."""
    with warnings.catch_warnings():
        for message in _DEPRECATIONS:
            warnings.filterwarnings("ignore", message=message)
        yield


def is_quantized_linear(module) -> bool:
    """True for a dynamically quantized linear layer (`torch.ao.nn.quantized.dynamic.Linear`)."""
    return isinstance(module, torch.ao.nn.quantized.dynamic.Linear)


def _unpacked(head):
    """(int8 [V, H], scales [V] or 0-dim, zero points [V] or 0-dim, bias [V] or None) of a
    dynamic int8 linear. Unpacking a vocabulary-sized head is costly, so the result is kept on the head itself (attribute ``_verispec_unpacked``): once per head, not once per
    prompt's subset, and gone with the head (no process-wide cache)."""
    cached = head.__dict__.get("_verispec_unpacked")
    if cached is None:
        weight = head.weight()  # qint8 [V, H], unpacked from the GEMM layout once
        if weight.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
            scales, zero_points = weight.q_per_channel_scales(), weight.q_per_channel_zero_points()  # [V], [V]
        else:
            scales, zero_points = torch.tensor(weight.q_scale()), torch.tensor(weight.q_zero_point())
        cached = (weight.int_repr(), scales, zero_points, head.bias())
        object.__setattr__(head, "_verispec_unpacked", cached)  # plain attribute: not a parameter or buffer
    return cached


def subset_head(head, ids: torch.Tensor):
    """The output layer over the rows `ids` of a quantized head: logits [..., |S|] equal to a
    dynamic int8 linear whose weight is rows `ids` of `head`'s int8 weight with the same scales and
    zero points (per tensor, or those rows' per-channel ones), so the logits at ids are the full
    quantized head's, and whose bias is the same rows of its bias.

    Where ids start with 0..k-1 for a k >= `PREFIX_MIN_ROWS` (FR-Spec's top-k ids plus a prompt's:
    arXiv 2502.14856), the head over 0..k-1 is packed once and kept on `head` (attribute
    ``_verispec_prefix``, the last k only, as `_unpacked` keeps its rows), and only the rest is
    packed per call: a `PrefixAndRest` with the same logits.

    Args:
        head: a `torch.ao.nn.quantized.dynamic.Linear` [V, H]. ids: int64 [|S|] row indices.

    Returns:
        a dynamic int8 linear [|S|, H], or a `PrefixAndRest` of two.

    Raises:
        TypeError: `head` is not a dynamic quantized linear.
    """
    if not is_quantized_linear(head):
        raise TypeError(f"head: expected a dynamic quantized linear, got {type(head).__name__}")
    k = leading_run(ids)
    if k < PREFIX_MIN_ROWS:
        return _rows_head(head, ids)
    k_kept, prefix = head.__dict__.get("_verispec_prefix", (0, None))
    if k_kept != k:
        prefix = _rows_head(head, ids[:k])
        object.__setattr__(head, "_verispec_prefix", (k, prefix))  # plain attribute, gone with the head
    return prefix if k == ids.numel() else PrefixAndRest(prefix, _rows_head(head, ids[k:]))


def _rows_head(head, ids: torch.Tensor):
    """A dynamic int8 linear [|S|, H] over the rows `ids` of the int8 `head` (`subset_head`)."""
    int_rows, scales, zero_points, bias = _unpacked(head)  # int8 [V, H], [V] / scalars, [V] or None
    index = ids.to(int_rows.device, torch.long)
    rows = int_rows.index_select(0, index)  # int8 [|S|, H]: the same int8 values, no re-rounding
    if scales.dim():  # per-channel: each row keeps its own scale and zero point
        scales, zero_points = scales.index_select(0, index), zero_points.index_select(0, index)
    return int8_linear(rows, scales, zero_points, None if bias is None else bias.index_select(0, index))


def int8_linear(values: torch.Tensor, scales: torch.Tensor, zero_points: torch.Tensor, bias=None):
    """A dynamic int8 linear [N, H] whose weight is exactly the int8 `values` [N, H] at the given
    scales and zero points: per row ([N] each), or one for the tensor (0-dim); float32 `bias` [N]
    or None. No value is rounded again, so rows taken from (or stacked out of) int8 layers keep
    their outputs."""
    if scales.dim():
        weight = torch._make_per_channel_quantized_tensor(values, scales, zero_points, 0)  # qint8 [N, H]
    else:
        weight = torch._make_per_tensor_quantized_tensor(values, float(scales), int(zero_points))  # qint8 [N, H]
    with quiet_quantization():
        out = torch.ao.nn.quantized.dynamic.Linear(values.shape[1], values.shape[0], bias_=bias is not None,
                                                   dtype=torch.qint8)
        out.set_weight_bias(weight, bias)
    return out


def leading_run(ids: torch.Tensor) -> int:
    """k: how many of the ids [|S|] are 0, 1, ..., k-1, in that order, before the first that is not."""
    gaps = (ids != torch.arange(ids.numel(), device=ids.device)).nonzero()
    return int(gaps[0, 0]) if gaps.numel() else ids.numel()


class PrefixAndRest(torch.nn.Module):
    """The output layer over ids 0..k-1 followed by the rest R: `prefix`'s logits over 0..k-1 and
    `rest`'s over R, concatenated [..., k + |R|] in the ids' order. Both are rows of one int8 head;
    each quantizes the same activations to the same scale, so every logit is the one the single
    head over the ids gives. Lets many subsets share one packed prefix head."""

    def __init__(self, prefix: torch.nn.Module, rest: torch.nn.Module):
        super().__init__()
        self.prefix, self.rest = prefix, rest

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.prefix(hidden), self.rest(hidden)], -1)  # [..., k + |R|]

