"""Probability vectors in two number systems: float64 arrays and exact `Fraction` arrays.

Every rule in `verispec.reference` is written once against these helpers, so the same code
runs in float64 (sampling, fast enumeration) and in rational arithmetic (dtype=object arrays of
`fractions.Fraction`), where "lossless" is an exact equality.
"""

from __future__ import annotations

import math
from fractions import Fraction
from numbers import Rational

import numpy as np

from .audit import Primitive, primitive

#: Tolerance on sum(probs) == 1 for float64 input (docs/architecture.md, "Bad input").
SUM_TOLERANCE = 1e-9


def is_exact(probs: np.ndarray) -> bool:
    """True when `probs` holds exact rationals (dtype=object of Fraction/int)."""
    return probs.dtype == object


def is_symbolic(probs) -> bool:
    """True for a dtype=object array holding a non-rational entry: the symbolic reals of
    `verispec.formal`, whose comparisons the prover's replay answers on every run (so results
    computed from them must not be cached, and they never go through float64)."""
    probs = np.asarray(probs)
    return probs.dtype == object and not all(isinstance(x, Rational) for x in probs.flat)


def as_probs(probs, name: str = "probs", vocab_size: int | None = None) -> np.ndarray:
    """Validate and return a probability vector.

    Args:
        probs: array-like of shape [V]; floats give a float64 array, `Fraction`/int entries an
            exact dtype=object array.
        name: the argument name used in error messages.
        vocab_size: if given, the required length V.

    Returns:
        np.ndarray [V], float64 or object (Fraction).

    Raises:
        TypeError: entries that are neither real numbers nor Fractions.
        ValueError: wrong shape/length, empty, NaN/inf, negative entries, or a sum that is not 1
            (within 1e-9 for float64, exactly for Fractions).
    """
    if np.ndim(probs) == 0 and not isinstance(probs, (list, tuple)):
        raise TypeError(f"{name}: expected a vector of probabilities [vocab_size], got {type(probs).__name__}")
    if isinstance(probs, np.ndarray) and probs.dtype == object or (
        not isinstance(probs, np.ndarray)
        and len(probs) > 0
        and all(isinstance(x, Rational) for x in probs)
        and any(isinstance(x, Fraction) for x in probs)
    ):
        items = list(probs)
        if not all(isinstance(x, Rational) for x in items):
            raise TypeError(f"{name}: exact probabilities must all be Fraction or int")
        arr = np.array([Fraction(x) for x in items], dtype=object)
        exact = True
    else:
        try:
            arr = np.asarray(probs, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise TypeError(f"{name}: expected a vector of real numbers ({err})") from None
        exact = False
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected shape [vocab_size], got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name}: empty probability vector")
    if vocab_size is not None and arr.shape[0] != vocab_size:
        raise ValueError(f"{name}: expected length {vocab_size} (vocab_size), got {arr.shape[0]}")
    if exact:
        if any(x < 0 for x in arr):
            raise ValueError(f"{name}: negative probability")
        if sum(arr) != 1:
            raise ValueError(f"{name}: exact probabilities sum to {sum(arr)}, not 1")
        return arr
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or inf")
    if np.any(arr < 0):
        raise ValueError(f"{name}: negative probability {arr.min()!r}")
    total = float(arr.sum())
    if abs(total - 1.0) > SUM_TOLERANCE:
        raise ValueError(f"{name}: probabilities sum to {total!r}, not 1 (tolerance 1e-9)")
    return arr


def normalize(weights: np.ndarray) -> np.ndarray:
    """weights / sum(weights) for a non-negative [V] vector with positive sum."""
    return weights / weights.sum()


@primitive(Primitive.RESIDUAL)
def residual(p: np.ndarray, q: np.ndarray, weight=1) -> np.ndarray:
    """The residual distribution norm(max(weight * p - q, 0)) -> [V].

    This is the correction law of speculative sampling (Leviathan et al. 2023, arXiv 2211.17192,
    Algorithm 1) with weight 1, and of block verification (arXiv 2403.10444) with weight w_tau.
    When the positive part has zero mass the residual is never sampled in exact arithmetic (its
    branch has probability 0); float64 round-off can still reach it, so we fall back to `p`.
    """
    excess = np.maximum(weight * p - q, 0)  # [V]
    total = excess.sum()
    if total <= 0:
        return p
    return excess / total


@primitive(Primitive.RESIDUAL)
def positive_mass(p: np.ndarray, q: np.ndarray, weight=1):
    """sum_x max(weight * p(x) - q(x), 0): the un-normalised residual mass."""
    return np.maximum(weight * p - q, 0).sum()


def ratio(p_x, q_x):
    """p(x) / q(x) for a drafted token (q(x) > 0); +inf when q(x) == 0 (never drafted)."""
    if q_x == 0:
        return math.inf
    return p_x / q_x


@primitive(Primitive.ACCEPTANCE)
def accept_probability(p_x, q_x, weight=1):
    """min(1, weight * p(x) / q(x)), the acceptance probability of a drafted token."""
    if q_x == 0:
        return 1 if p_x > 0 else 0
    return min(1, weight * p_x / q_x)


def one_hot(index: int, vocab_size: int, exact: bool) -> np.ndarray:
    """A point mass on `index` -> [V] (Fraction entries when `exact`)."""
    if exact:
        out = np.array([Fraction(0)] * vocab_size, dtype=object)
        out[index] = Fraction(1)
        return out
    out = np.zeros(vocab_size)
    out[index] = 1.0
    return out


def argmax(probs: np.ndarray) -> int:
    """The most probable token; ties go to the lowest token id (the greedy convention)."""
    best = 0
    for i in range(1, len(probs)):
        if probs[i] > probs[best]:
            best = i
    return best


def to_rational(probs, denominator: int = 64) -> np.ndarray:
    """Round a float distribution to exact Fractions k/denominator that sum to exactly 1.

    Largest-remainder rounding, so each entry moves by < 1/denominator; small entries may become
    0 (useful edge cases for exact tests).
    """
    arr = as_probs(probs)
    if is_exact(arr):
        return arr
    scaled = arr * denominator
    counts = np.floor(scaled).astype(int)
    short = denominator - int(counts.sum())
    order = np.argsort(-(scaled - counts), kind="stable")
    counts[order[:short]] += 1
    return np.array([Fraction(int(c), denominator) for c in counts], dtype=object)


def as_float(probs: np.ndarray) -> np.ndarray:
    """float64 copy of a probability vector (exact or not)."""
    return np.asarray(probs, dtype=np.float64)


def align(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Put p and q in one number system: exact only when both are exact, else both float64."""
    if is_exact(p) == is_exact(q):
        return p, q
    return as_float(p), as_float(q)
