"""Injectable sources of U[0, 1) uniforms, and the two draws every rule is built from.

The conventions are exactly those of `verispec.reference.randomness.Sampler`:

- ``bernoulli(p)`` is ``u < p`` (one uniform, whatever p is, 0 and 1 included);
- ``categorical(probs)`` is the inverse CDF at one uniform: ``searchsorted(cumsum(probs),
  u * sum(probs), right=True)``, clamped to the last id and stepped back onto the support when
  round-off lands on a token of probability 0.

So a torch rule fed the same uniform stream as a reference rule, on the same probability tables
and the same draft, consumes the uniforms in the same order and emits the same tokens.

Sources (float64 tensors): `TorchUniforms` (fresh, from a seeded `torch.Generator`) and two
*streams*, `NumpyUniforms` (the stream a reference `Sampler(seed)` reads) and `ReplayUniforms` (a
fixed list): ``peek`` then ``advance`` by the uniforms a rule consumed keeps the reference's order.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

__all__ = ["UniformSource", "TorchUniforms", "NumpyUniforms", "ReplayUniforms", "bernoulli",
           "categorical", "as_uniform_source"]


def bernoulli(p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """``u < p`` elementwise (module docstring): p probabilities of any shape, clipped to [0, 1] as
    the reference does; u uniforms in [0, 1) broadcastable to p -> bool, the broadcast shape."""
    return u < p.clamp(0.0, 1.0)


def categorical(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw along the last axis (module docstring): probs [..., V] non-negative rows with
    positive sum (not necessarily normalised: u is scaled by the row sum, as in the reference), u
    [...] uniforms in [0, 1), one per row -> int64 [...] token ids, never one of probability 0.
    Reads no value back (no host synchronisation)."""
    cdf = probs.cumsum(-1)  # [..., V]
    target = (u.to(cdf.dtype) * cdf[..., -1]).unsqueeze(-1)  # [..., 1]
    index = torch.searchsorted(cdf.contiguous(), target.contiguous(), right=True)  # [..., 1]
    V = probs.shape[-1]
    # The first id whose cdf exceeds the target has positive probability (the cdf rose there)
    # unless the search ran off the end (round-off: u * sum rounded up to sum); then the draw is
    # stepped back onto the support, to the last id of positive probability.
    return torch.where(index[..., 0] < V, index[..., 0], _last_positive(probs))


def _last_positive(probs: torch.Tensor) -> torch.Tensor:
    """The largest id with positive probability in probs [..., V] (0 if none) -> [...]."""
    V = probs.shape[-1]
    ids = torch.arange(V, device=probs.device)  # [V]
    return torch.where(probs > 0, ids, -1).amax(-1).clamp(min=0)


class UniformSource:
    """Where the empirical backend gets its uniforms.

    `peek(rows, n)` returns a float64 tensor [rows, n] of uniforms in [0, 1); `advance(used)`
    tells the source how many of each row's uniforms were consumed (a stream source keeps the rest
    for the next call; a fresh source ignores it). `take(rows, n)` = peek then advance by n.
    """

    #: True when unused uniforms are kept (the order of consumption then mirrors the reference).
    is_stream = False

    def peek(self, rows: int, n: int, device=None) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def advance(self, used) -> None:
        """Consume `used` uniforms (int, or [rows] tensor) of the last `peek`."""

    def take(self, rows: int, n: int, device=None) -> torch.Tensor:
        """`n` uniforms per row, all consumed -> float64 [rows, n]."""
        out = self.peek(rows, n, device)
        self.advance(n)
        return out


def _check_count(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name}: must be >= 0, got {value}")
    return int(value)


class TorchUniforms(UniformSource):
    """Fresh uniforms from a `torch.Generator` on `device` ("cpu", "cuda", ...) seeded with the int
    `seed` (None: nondeterministic). Unused uniforms are discarded, which keeps every law exact:
    each uniform is read by at most one draw."""

    def __init__(self, seed: int | None = None, device="cpu"):
        self.device = torch.device(device)
        self.generator = torch.Generator(device=self.device)
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(_check_count(seed, "seed"))

    def peek(self, rows: int, n: int, device=None) -> torch.Tensor:
        rows, n = _check_count(rows, "rows"), _check_count(n, "n")
        out = torch.rand((rows, n), generator=self.generator, device=self.device, dtype=torch.float64)
        return out if device is None else out.to(device)


class _StreamSource(UniformSource):
    """A single stream (one row): peeked uniforms are kept until consumed."""

    is_stream = True

    def __init__(self):
        self._buffer: list[float] = []

    def _more(self, n: int) -> list[float]:  # pragma: no cover - abstract
        raise NotImplementedError

    def peek(self, rows: int, n: int, device=None) -> torch.Tensor:
        if _check_count(rows, "rows") != 1:
            raise ValueError(f"rows: a stream source serves one row at a time, got rows={rows}")
        n = _check_count(n, "n")
        if len(self._buffer) < n:
            self._buffer += self._more(n - len(self._buffer))
        return torch.tensor([self._buffer[:n]], dtype=torch.float64, device=device)

    def advance(self, used) -> None:
        used = int(used.reshape(-1)[0]) if isinstance(used, torch.Tensor) else int(used)
        if not 0 <= used <= len(self._buffer):
            raise ValueError(f"used: {used} uniforms consumed but only {len(self._buffer)} were peeked")
        del self._buffer[:used]


class NumpyUniforms(_StreamSource):
    """The uniform stream of `numpy.random.default_rng(seed).random()`: the very stream a reference
    `Sampler(seed)` reads, so torch and numpy runs can be compared draw for draw.

    Args:
        seed: int, `numpy.random.SeedSequence`, or a `numpy.random.Generator` (shared, not copied).
    """

    def __init__(self, seed=None):
        super().__init__()
        if isinstance(seed, np.random.Generator):
            self.generator = seed
        elif seed is None or isinstance(seed, (int, np.integer, np.random.SeedSequence)):
            self.generator = np.random.default_rng(seed)
        else:
            raise TypeError(f"seed: expected int, SeedSequence or numpy Generator, got {type(seed).__name__}")

    def _more(self, n):
        return [float(self.generator.random()) for _ in range(n)]


class ReplayUniforms(_StreamSource):
    """Replays `values`, a fixed list of uniforms in [0, 1) (ValueError for one outside it or NaN);
    raises `IndexError` when more are consumed than it holds."""

    def __init__(self, values: Sequence[float]):
        super().__init__()
        values = [float(v) for v in values]
        if not all(0.0 <= v < 1.0 for v in values):
            raise ValueError("values: uniforms must lie in [0, 1)")
        self._values = values
        self._next = 0  # values handed to the peek buffer, the zero padding past the end included

    def _more(self, n):
        # Zeros pad past the end: they are only ever peeked, never consumed, unless the caller
        # consumes more than it replayed (checked in `advance`).
        out = self._values[self._next:self._next + n]
        out = out + [0.0] * (n - len(out))
        self._next += n
        return out

    @property
    def consumed(self) -> int:
        """How many values have been consumed so far (more than given once a consumer read into
        the padding; `advance` then raises)."""
        return self._next - len(self._buffer)

    def advance(self, used) -> None:
        super().advance(used)
        if self.consumed > len(self._values):
            raise IndexError(f"ReplayUniforms ran out: {self.consumed} consumed, {len(self._values)} given")


def as_uniform_source(uniforms, device=None) -> UniformSource:
    """A `UniformSource` from None (fresh, unseeded), an int seed (`TorchUniforms`), or a source."""
    if uniforms is None:
        return TorchUniforms(None, device or "cpu")
    if isinstance(uniforms, UniformSource):
        return uniforms
    if isinstance(uniforms, (int, np.integer)) and not isinstance(uniforms, bool):
        return TorchUniforms(int(uniforms), device or "cpu")
    raise TypeError(f"uniforms: expected None, an int seed or a UniformSource, got {type(uniforms).__name__}")
