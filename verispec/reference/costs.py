"""The cost model of a draft-verify iteration: seconds of a draft or target forward as a function of
its token rows and of the cache length it attends to.

A speculative decoder's throughput is E[tokens per iteration] / E[seconds per iteration]
(Leviathan et al. 2023, arXiv 2211.17192, Section 3.4: the expected improvement factor with a cost
coefficient c per draft forward). That paper takes one draft forward to cost c target forwards and
a verifying forward of any width to cost one target forward; on a CPU neither holds (a forward of
q rows costs up to q times one row where the kernels are bound by compute, and less where they are
bound by reading the weights). So the costs here are measured per host (`verispec.bench.costs`
measures them) and kept as data:

- `ForwardCost`: one model's forward seconds t(r, n) for r token rows over a cache of n positions,
  piecewise-linear in r between the measured row counts (not monotone where the measurement is
  not: a padded GEMM can be cheaper at 16 rows than at 15) and linear in n,
  t(r, n) = base(r) + per_position(r) n, each fitted by least squares at the measured row counts.
- `CostModel`: the draft's and the target's `ForwardCost`, a per-iteration overhead (seconds
  besides the forwards), the raw measurements it was fitted from and the key it was measured
  for (model pair, device, dtype, speed levers); `chain_seconds`, `paths_seconds` and
  `tree_seconds` price one iteration of each draft shape.

Pure Python/numpy. Values may be Fractions (then every price is exact, so the drafting policy of
`verispec.reference.policy` can run under `verispec prove`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from numbers import Real

import numpy as np

__all__ = ["ForwardCost", "CostModel", "fit_forward_cost"]


def _check_knots(rows, base, per_position) -> None:
    if not rows or len(rows) != len(base) or len(rows) != len(per_position):
        raise ValueError("rows: expected the same number (>= 1) of rows, base and per_position values")
    if any(isinstance(r, bool) or not isinstance(r, int) or r < 1 for r in rows) or list(rows) != sorted(set(rows)):
        raise ValueError(f"rows: expected increasing ints >= 1, got {rows!r}")
    for name, values in (("base", base), ("per_position", per_position)):
        if any(isinstance(v, bool) or not isinstance(v, Real) or not v >= 0 for v in values):
            raise ValueError(f"{name}: expected numbers >= 0, got {values!r}")


@dataclass(frozen=True)
class ForwardCost:
    """Seconds of one forward of r token rows over n cached positions (module docstring).

    Attributes:
        rows: the measured row counts r_1 < ... < r_m (ints >= 1).
        base: seconds at n = 0 per measured row count (>= 0).
        per_position: seconds per cached position per measured row count (>= 0).

    Raises:
        ValueError: mismatched lengths, rows not increasing ints >= 1, negative values.
    """

    rows: tuple
    base: tuple
    per_position: tuple

    def __post_init__(self):
        _check_knots(self.rows, self.base, self.per_position)

    def seconds(self, rows: int, cache_length=0):
        """t(rows, cache_length): linear between the two measured row counts around `rows`, the
        last segment's slope past the largest (floored at the largest's value), the smallest's
        value below it. Exact for Fraction knots.

        Raises:
            ValueError: rows < 1 or a negative cache_length.
        """
        if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows < 1:
            raise ValueError(f"rows: expected an int >= 1, got {rows!r}")
        if not cache_length >= 0:
            raise ValueError(f"cache_length: expected a number >= 0, got {cache_length!r}")
        at = [b + s * cache_length for b, s in zip(self.base, self.per_position)]
        knots = self.rows
        if rows <= knots[0] or len(knots) == 1:
            return at[0] if rows <= knots[0] else at[-1]
        i = next((k for k in range(1, len(knots)) if rows <= knots[k]), len(knots) - 1)
        r0, r1, t0, t1 = knots[i - 1], knots[i], at[i - 1], at[i]
        value = t0 + (t1 - t0) * Fraction(rows - r0, r1 - r0) if _exact(t0, t1) else \
            t0 + (t1 - t0) * (rows - r0) / (r1 - r0)
        return value if rows <= knots[-1] else max(value, at[-1])

    def table(self, max_rows: int) -> tuple[np.ndarray, np.ndarray]:
        """(base [max_rows], per_position [max_rows]) in float64: t(r, n) = base[r - 1] +
        per_position[r - 1] n for r = 1..max_rows (the engine prices a batch of cache lengths
        with one multiply-add)."""
        base = np.array([float(self.seconds(r, 0)) for r in range(1, max_rows + 1)])
        at_one = np.array([float(self.seconds(r, 1)) for r in range(1, max_rows + 1)])
        return base, at_one - base

    def to_dict(self) -> dict:
        return {"rows": list(self.rows), "base": [float(v) for v in self.base],
                "per_position": [float(v) for v in self.per_position]}

    @classmethod
    def from_dict(cls, data: dict) -> "ForwardCost":
        return cls(tuple(int(r) for r in data["rows"]), tuple(float(v) for v in data["base"]),
                   tuple(float(v) for v in data["per_position"]))


def _exact(*values) -> bool:
    return all(isinstance(v, (int, Fraction)) and not isinstance(v, bool) for v in values)


def fit_forward_cost(samples) -> ForwardCost:
    """The `ForwardCost` fitted to measured forwards.

    Per measured row count r: the median seconds at each cache length, then the least-squares
    line t = base + per_position n through those medians (per_position 0 with one cache length),
    both floored at 0 (a noisy negative slope is no cost saving).

    Args:
        samples: iterable of (rows, cache_length, seconds), one per timed forward.

    Raises:
        ValueError: no samples, or a sample with rows < 1, cache_length < 0 or seconds < 0.
    """
    by_rows: dict[int, dict[int, list[float]]] = {}
    for rows, n, seconds in samples:
        if int(rows) < 1 or n < 0 or not seconds >= 0:
            raise ValueError(f"samples: bad sample (rows {rows}, cache length {n}, seconds {seconds})")
        by_rows.setdefault(int(rows), {}).setdefault(int(n), []).append(float(seconds))
    if not by_rows:
        raise ValueError("samples: no measured forward to fit")
    rows, base, slope = [], [], []
    for r in sorted(by_rows):
        lengths = np.array(sorted(by_rows[r]), dtype=np.float64)  # [k] cache lengths
        medians = np.array([np.median(by_rows[r][int(n)]) for n in lengths])  # [k] seconds
        b = 0.0 if len(lengths) == 1 else float(np.polyfit(lengths, medians, 1)[0])
        b = max(b, 0.0)
        rows.append(r)
        slope.append(b)
        base.append(max(float(np.mean(medians - b * lengths)), 0.0))
    return ForwardCost(tuple(rows), tuple(base), tuple(slope))


@dataclass(frozen=True)
class CostModel:
    """What one draft-verify iteration costs on one host, for one model pair and set of levers.

    Attributes:
        draft, target: `ForwardCost` of a draft and of a target forward.
        overhead_s: seconds per iteration besides the forwards (sampling, verification,
            bookkeeping); set by the caller, 0 by default (the bench does not measure it).
        key: ((name, value), ...): what the costs were measured for (model pair, device, dtype,
            draft quantisation, draft vocabulary, linear layout, threads, library versions).
        samples: the raw measurements ((model, rows, cache_length, seconds), ...), model
            "draft" or "target": kept so that a fit can be redone or checked.
    """

    draft: ForwardCost
    target: ForwardCost
    overhead_s: float = 0
    key: tuple = ()
    samples: tuple = field(default=(), repr=False)

    def __post_init__(self):
        for name in ("draft", "target"):
            if not isinstance(getattr(self, name), ForwardCost):
                raise TypeError(f"{name}: expected a ForwardCost, got {type(getattr(self, name)).__name__}")
        if isinstance(self.overhead_s, bool) or not isinstance(self.overhead_s, Real) or not self.overhead_s >= 0:
            raise ValueError(f"overhead_s: expected a number >= 0, got {self.overhead_s!r}")

    @classmethod
    def fitted(cls, samples, key=(), overhead_s: float = 0) -> "CostModel":
        """Fit both models' `ForwardCost` (`fit_forward_cost`) to samples ((model, rows,
        cache_length, seconds), ...), model "draft" or "target".

        Raises:
            ValueError: a model name other than "draft" / "target", or a model with no sample.
        """
        samples = tuple((str(m), int(r), int(n), float(s)) for m, r, n, s in samples)
        unknown = {m for m, *_ in samples} - {"draft", "target"}
        if unknown:
            raise ValueError(f"samples: unknown model {sorted(unknown)} (expected 'draft' or 'target')")
        fits = {m: fit_forward_cost((r, n, s) for mm, r, n, s in samples if mm == m) for m in ("draft", "target")}
        return cls(fits["draft"], fits["target"], overhead_s, tuple(key), samples)

    def chain_seconds(self, length: int, cache_length=0, paths: int = 1):
        """One iteration drafting `paths` paths of `length` tokens (no shared prefix): `length`
        draft forwards of `paths` rows (the first feeds the last emitted token instead; priced
        alike), then one target forward of 1 + paths * length rows, plus the overhead."""
        draft = self.draft.seconds(paths, cache_length) * length if length else 0
        return draft + self.target.seconds(1 + paths * length, cache_length) + self.overhead_s

    def tree_seconds(self, layer_rows, nodes: int, cache_length=0):
        """One iteration drafting a tree: one draft forward per entry of `layer_rows` (its rows),
        then one target forward of 1 + nodes rows, plus the overhead."""
        draft = sum((self.draft.seconds(r, cache_length) for r in layer_rows), 0)
        return draft + self.target.seconds(1 + nodes, cache_length) + self.overhead_s

    def to_dict(self) -> dict:
        """JSON-ready: both fits, the overhead, the key and the raw samples."""
        return {"draft": self.draft.to_dict(), "target": self.target.to_dict(), "overhead_s": float(self.overhead_s),
                "key": {k: v for k, v in self.key}, "samples": [list(s) for s in self.samples]}

    @classmethod
    def from_dict(cls, data: dict) -> "CostModel":
        """The model `to_dict` wrote (raises KeyError / ValueError on a malformed dict)."""
        return cls(ForwardCost.from_dict(data["draft"]), ForwardCost.from_dict(data["target"]),
                   float(data.get("overhead_s", 0.0)), tuple(sorted(data.get("key", {}).items())),
                   tuple(tuple(s) for s in data.get("samples", ())))
