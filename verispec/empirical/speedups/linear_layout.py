"""The GEMM layout of a model's linear layers for a verification forward's few rows (CPU).

torch computes `torch.nn.Linear` as ``X @ W^T`` (``xw``: X [rows, in], W [out, in]). A verifying
forward feeds 2-20 rows, and on some CPUs the BLAS kernel is much cheaper for that product laid
out as ``(W @ X^T)^T`` (``wx``), or with X's rows zero-padded to the next power of two (``wxpad``:
the padding columns of the output are dropped), as CUDA engines pad a step's token count to their
graph sizes. Both compute the same sums in another order, so logits differ by float rounding only,
as they already do between forwards of different row counts: the target's law is unchanged. The
best layout is a per-host, per-dtype choice measured by `benchmarks/bench_rows.py`
(docs/linear_layout.md), not a default.

``packed`` hands a bfloat16 layer's weight to oneDNN once, reordered into oneDNN's own blocked
format (``torch.ops.mkldnn._reorder_linear_weight``, as torch's inductor does for CPU linears),
and multiplies through it (``torch.ops.mkldnn._linear_pointwise``). torch's own bfloat16 linear
also calls oneDNN at a real model's sizes, but on the plain weight, which for a few rows can cost
several times the packed product (docs/linear_layout.md gives the measured hosts). Where both call
oneDNN the outputs are equal bit for bit; where torch sends a tiny product to another kernel they
differ by float rounding, as the other layouts' do. The packed copy is made on a layer's first
call and kept on the layer (one more copy of its weight) until the weight changes. Only where
oneDNN has bfloat16 (``torch.ops.mkldnn._is_mkldnn_bf16_supported()``) and for bfloat16 inputs;
elsewhere the layer runs as torch's own.

``with linear_layout(target.model, "wx"):`` runs every plain `torch.nn.Linear` inside the module
(subclasses and int8 linears keep their own forward) in that layout for 2..max_rows rows on CPU
(``packed``: every row count), and as torch's own otherwise; `model_layout(target, ...)` also
reaches a lean forward's layers. The bench gives it to one method's target by ``lin=wx`` /
``lin=wxpad`` / ``lin=packed``, the peer included, so a speedup splits into what the layout and
the drafting give.
"""

from __future__ import annotations

import contextlib

import torch

__all__ = ["LAYOUTS", "MAX_ROWS", "DESCRIPTIONS", "linear_layout", "model_layout", "padded_rows",
           "weight_major_linear", "packed_available"]

#: ``xw``: torch's own ``X @ W^T``; ``wx``: ``(W @ X^T)^T`` for 2..max_rows rows; ``wxpad``: ``wx``
#: with the rows zero-padded to the next power of two; ``packed``: bfloat16 weights reordered once
#: for oneDNN (module docstring).
LAYOUTS = ("xw", "wx", "wxpad", "packed")
#: `linear_layout`'s default max_rows: the most rows `benchmarks/bench_rows.py` times.
MAX_ROWS = 32
#: What ``lin=wx`` / ``lin=wxpad`` mean, for the bench JSON's environment.
DESCRIPTIONS = {
    "wx": (f"the target's plain torch.nn.Linear layers computed as (W @ X^T)^T for inputs of 2..{MAX_ROWS} rows "
           "on CPU, torch's X @ W^T otherwise; the same sums up to float rounding"),
    "wxpad": (f"as wx, X's 2..{MAX_ROWS} rows zero-padded to the next power of two and the padding columns of "
              "the output dropped; the same sums up to float rounding"),
    "packed": ("the target's plain torch.nn.Linear layers, in bfloat16 on CPU, multiplied through a copy of each "
               "weight reordered once into oneDNN's blocked format (torch.ops.mkldnn._reorder_linear_weight / "
               "_linear_pointwise); torch's own bfloat16 linear calls oneDNN on the plain weight, and where both call "
               "oneDNN the outputs are equal bit for bit")}


def padded_rows(rows: int) -> int:
    """The row count ``wxpad`` computes for `rows` >= 1 real rows: the next power of two.

    Raises:
        ValueError: `rows` is not an int >= 1.
    """
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise ValueError(f"rows: expected an int >= 1, got {rows!r}")
    return 1 << (rows - 1).bit_length()


def weight_major_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                        pad: bool = False) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` computed as ``(bias[:, None] + weight @ x^T)^T``.

    Args:
        x: [..., in] activations, any float dtype.
        weight: [out, in], the dtype of `x`.
        bias: [out] or None.
        pad: compute on x's rows zero-padded to `padded_rows` of their count (``wxpad``).

    Returns:
        [..., out], equal to ``F.linear`` up to float rounding (another summation order).
    """
    rows = x.reshape(-1, x.shape[-1])  # [r, in]
    r = rows.shape[0]
    extra = padded_rows(r) - r if pad else 0
    if extra:
        rows = torch.cat([rows, rows.new_zeros(extra, rows.shape[1])])  # [r', in]
    if bias is None:
        out = weight @ rows.t()  # [out, r']
    else:
        out = torch.addmm(bias.unsqueeze(1), weight, rows.t())  # [out, r']
    return out[:, :r].t().reshape(*x.shape[:-1], weight.shape[0])  # [..., out]


class _WeightMajorLinear(torch.nn.Linear):
    """A `torch.nn.Linear` whose forward takes the ``wx`` layout (rows padded when _layout_pad) for
    2.._layout_max_rows rows on CPU (`linear_layout` swaps a layer's class in and back; the weights
    are untouched)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // max(x.shape[-1], 1)
        if x.device.type == "cpu" and 2 <= rows <= self._layout_max_rows:
            return weight_major_linear(x, self.weight, self.bias, self._layout_pad)
        return super().forward(x)


def packed_available() -> bool:
    """Whether ``packed`` runs here: torch has oneDNN with bfloat16 support on this CPU."""
    return torch.backends.mkldnn.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


class _PackedLinear(torch.nn.Linear):
    """A `torch.nn.Linear` whose bfloat16 CPU forward multiplies through its weight reordered for
    oneDNN (``packed``; `linear_layout` swaps the class in and back). The reordered copy is kept in
    the layer's ``_layout_packed`` as (weight version, data pointer, copy) across blocks, and made
    again once the weight changes."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if x.device.type != "cpu" or x.dtype != torch.bfloat16 or weight.dtype != torch.bfloat16:
            return super().forward(x)
        stamp = (weight._version, weight.data_ptr())
        kept = self.__dict__.get("_layout_packed")
        if kept is None or kept[:2] != stamp:
            kept = (*stamp, torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None))
            self.__dict__["_layout_packed"] = kept
        # a strided x would take another oneDNN path than torch's own linear, which copies it first
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), kept[2], self.bias, "none", [], "")


@contextlib.contextmanager
def linear_layout(module: torch.nn.Module, layout: str = "wx", max_rows: int = MAX_ROWS):
    """Inside the block, the plain `torch.nn.Linear` layers of `module` run in `layout`.

    Args:
        module: a torch module (e.g. ``target.model`` of a `CausalLM`).
        layout: ``"wx"`` (``(W @ X^T)^T`` for 2..max_rows rows on CPU), ``"wxpad"`` (``wx`` on
            the rows zero-padded to the next power of two), ``"packed"`` (bfloat16 weights reordered
            once for oneDNN, every row count; torch's own where `packed_available` is False) or
            ``"xw"`` (torch's own: the block changes nothing).
        max_rows: the largest row count (batch x new tokens) run as ``wx``; default 32, the
            most rows `benchmarks/bench_rows.py` times (the target's MLP GEMM at 32 rows: 3.83x
            one row as ``wx`` against 5.90x as ``xw``, float32, AVX2 host).

    Raises:
        TypeError: `module` is not a `torch.nn.Module`.
        ValueError: `layout` not in `LAYOUTS`, or `max_rows` not an int >= 2.

    The layers' classes are restored when the block exits, on an exception too. Not thread-safe:
    another thread calling the same module inside the block gets the layout too.
    """
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module: expected a torch.nn.Module, got {type(module).__name__}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {', '.join(LAYOUTS)}, got {layout!r}")
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 2:
        raise ValueError(f"max_rows: expected an int >= 2, got {max_rows!r}")
    runs = layout in ("wx", "wxpad") or (layout == "packed" and packed_available())
    layers = [m for m in module.modules() if type(m) is torch.nn.Linear] if runs else []
    try:
        for layer in layers:
            layer._layout_max_rows, layer._layout_pad = max_rows, layout == "wxpad"
            layer.__class__ = _PackedLinear if layout == "packed" else _WeightMajorLinear
        yield module
    finally:
        for layer in layers:
            layer.__class__ = torch.nn.Linear
            layer.__dict__.pop("_layout_max_rows", None)
            layer.__dict__.pop("_layout_pad", None)


@contextlib.contextmanager
def model_layout(lm, layout: str = "wx"):
    """`linear_layout` over a `CausalLM`'s module and, where it runs a lean forward
    (`verispec.empirical.speedups.lean_forward.lean_view`), over that forward's stacked layers too
    (its ``runner.module``), so both forwards get the layout. Raises as `linear_layout`."""
    with contextlib.ExitStack() as stack:
        for module in (lm.model, getattr(getattr(lm, "runner", None), "module", None)):
            if module is not None:
                stack.enter_context(linear_layout(module, layout))
        yield lm
