"""Count the host synchronisations a piece of torch code makes: the ops after which the host must
wait for the device before it can go on.

On a GPU the host queues kernels ahead of the device; reading a value back (`.item()`, `int(t)`,
`bool(t)`, `.tolist()`, `.cpu()`), an op whose output shape depends on the data (`nonzero`, boolean
indexing, `unique`, `repeat_interleave` without `output_size`), or a tensor made from host data
(`torch.tensor([...], device=...)`: a blocking host-to-device copy) drains that queue. The same code
on a CPU runs these ops too, so counting them on a CPU tells how often the code would stop a GPU.

    with SyncCounter() as counter:
        ...                      # any torch code
    counter.total, counter.by_kind    # e.g. 3, {"scalar": 2, "to_host": 1}

`counter.mark()` closes a span (an engine iteration) and starts the next: `counter.spans` is the list
of per-span counts. It intercepts at two levels: a `TorchFunctionMode` for the tensor methods that
read values out (`tolist`, `cpu`, `numpy`, `to("cpu")`: on a CPU tensor they dispatch nothing) and a
`TorchDispatchMode` for the aten ops (`aten._local_scalar_dense` is what `.item()`, `int(t)` and
`bool(t)` run; under inference mode they dispatch `aten.item` / `aten.is_nonzero`); an op inside a
method already counted is not counted twice.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["SyncCounter", "SYNC_KINDS", "SYNC_OPS", "from_host"]

#: kind -> what it is.
SYNC_KINDS = {
    "scalar": "a value read by the host: .item(), int(t), float(t), bool(t) (aten._local_scalar_dense), torch.equal",
    "data_shape": "an op whose output shape depends on the data: nonzero, boolean indexing, unique, "
                  "repeat_interleave without output_size, masked_select",
    "to_host": "a copy to the host: .cpu(), .tolist(), .numpy(), .to(\"cpu\")",
    "from_host": "a tensor made from host data (torch.tensor / as_tensor of a Python list, a copy of a host "
                 "tensor to the device): a blocking copy (a Python scalar used as a fill value is not one)",
}

_ATEN = torch.ops.aten
#: Under inference mode `bool(t)` and `int(t)` dispatch the composite aten.is_nonzero / aten.item
#: (the `_local_scalar_dense` inside them does not reach a dispatch mode again).
_SCALAR = {_ATEN._local_scalar_dense.default, _ATEN.item.default, _ATEN.is_nonzero.default, _ATEN.equal.default,
           _ATEN.allclose.default}
_DATA_SHAPE = {_ATEN.nonzero.default, _ATEN.nonzero_static.default, _ATEN._unique2.default,
               _ATEN.unique_dim.default, _ATEN.unique_consecutive.default, _ATEN.masked_select.default,
               _ATEN.repeat_interleave.Tensor, _ATEN.repeat_interleave.self_Tensor}
_COPIES = {_ATEN._to_copy.default, _ATEN.copy_.default}
#: Every aten op that reads a value back or sizes its output by the data (a captured step may hold none).
SYNC_OPS = frozenset(_SCALAR | _DATA_SHAPE)
_TO_HOST_METHODS = {"tolist", "cpu", "numpy"}


def from_host(func, args, out) -> bool:
    """Host data entering a tensor: `torch.tensor` of a list (aten.lift_fresh of more than a scalar:
    on a GPU, a blocking copy follows), or a copy from a host tensor to a device tensor."""
    if func is _ATEN.lift_fresh.default:
        return isinstance(out, torch.Tensor) and out.dim() > 0
    if func in _COPIES and args and isinstance(args[0], torch.Tensor):
        source = args[1] if func is _ATEN.copy_.default else args[0]
        target = args[0] if func is _ATEN.copy_.default else out
        return (isinstance(source, torch.Tensor) and isinstance(target, torch.Tensor)
                and source.device.type == "cpu" and target.device.type != "cpu")
    return False


def _bool_index(func, args) -> bool:
    """aten.index / index_put with a boolean index (a nonzero inside)."""
    if func not in (_ATEN.index.Tensor, _ATEN.index_put.default, _ATEN.index_put_.default,
                    _ATEN._index_put_impl_.default):
        return False
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or ())


def _to_host_call(func, args, kwargs) -> bool:
    """A tensor method reading values out to the host (counted on CPU tensors too: the count is what
    the same code does on a GPU)."""
    name = getattr(func, "__name__", "")
    if name in _TO_HOST_METHODS:
        return bool(args) and isinstance(args[0], torch.Tensor)
    if name == "to" and args and isinstance(args[0], torch.Tensor):
        target = kwargs.get("device", args[1] if len(args) > 1 else None)
        # only the literal "cpu": `.to(model.device)` is device-agnostic code (a no-op on a GPU run)
        return isinstance(target, str) and target.split(":")[0] == "cpu"
    return False


class _Functions(TorchFunctionMode):
    def __init__(self, owner: "SyncCounter"):
        super().__init__()
        self.owner = owner

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.owner.inside or not _to_host_call(func, args, kwargs):
            return func(*args, **kwargs)
        self.owner.add("to_host", getattr(func, "__name__", str(func)))
        self.owner.inside = True
        try:
            return func(*args, **kwargs)
        finally:
            self.owner.inside = False


class _Dispatch(TorchDispatchMode):
    def __init__(self, owner: "SyncCounter"):
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not self.owner.inside:
            kind = ("scalar" if func in _SCALAR else "data_shape" if func in _DATA_SHAPE or _bool_index(func, args)
                    else "from_host" if from_host(func, args, out) else None)
            if kind is not None:
                self.owner.add(kind, str(func.overloadpacket.__name__))
        return out


class SyncCounter:
    """A context manager counting host synchronisations (module docstring).

    Attributes:
        total: syncs counted so far. by_kind: {kind: count} (`SYNC_KINDS`). by_op: {op name: count}.
        spans: counts of the spans closed by `mark()`.
    """

    def __init__(self):
        self.total, self.by_kind, self.by_op, self.spans = 0, Counter(), Counter(), []
        self.inside, self._span = False, 0
        self._modes = (_Functions(self), _Dispatch(self))

    def add(self, kind: str, op: str) -> None:
        self.total += 1
        self._span += 1
        self.by_kind[kind] += 1
        self.by_op[op] += 1

    def mark(self) -> int:
        """Close the current span; returns its count."""
        self.spans.append(self._span)
        self._span = 0
        return self.spans[-1]

    def __enter__(self) -> "SyncCounter":
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc) -> bool:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)
        return False
