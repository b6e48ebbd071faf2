"""The i.i.d. draws of one draft node: the multiset of k draws from the draft model's q [V] as
{token: count} (`draw_counts`, the drafts of `drafters.iid_paths`), and `token_id`, a drafted token
id as an int. Exact for Fraction q; run on symbolic q by `verispec prove`, which audits
`draw_counts` as a primitive (`verispec.reference.audit`).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .audit import Primitive, plumbing, primitive
from .probability import is_symbolic

__all__ = ["draw_counts", "token_id"]


@plumbing
@functools.lru_cache(maxsize=65536)
def _binomial_pmf(r, n: int, exact: bool) -> np.ndarray:
    """Binomial(n, r) pmf -> [n + 1] (Fractions when exact); cached, as the enumerator replays
    the same draws many times. Treat the result as read-only."""
    pmf = np.array([math.comb(n, j) * r ** j * (1 - r) ** (n - j) for j in range(n + 1)],
                   dtype=object if exact else np.float64)
    return pmf if exact else pmf / pmf.sum()


@plumbing
@functools.lru_cache(maxsize=65536)
def _support(key) -> tuple[int, ...]:
    """Tokens of positive probability of a distribution given by its bytes (float64) or tuple."""
    values = np.frombuffer(key) if isinstance(key, bytes) else key
    return tuple(t for t in range(len(values)) if values[t] > 0)


@primitive(Primitive.IID_DRAW)
def draw_counts(q: np.ndarray, k: int, rand) -> dict[int, int]:
    """The multiset of k i.i.d. draws from q, as {token: count}, by sequential binomials.

    count(t) ~ Binomial(k - drawn so far, q(t) / mass left): the multinomial law, drawn with one
    categorical per token of positive probability (exact for Fractions).
    """
    counts: dict[int, int] = {}
    left, mass = k, 1
    # The caches answer comparisons once; symbolic entries (verispec.formal) must ask them on every
    # run, so only float64 and Fraction vectors are cached.
    cached = not is_symbolic(q)
    key = q.tobytes() if q.dtype != object else tuple(q)
    support = _support(key) if cached else _support.__wrapped__(key)
    pmf = _binomial_pmf if cached else _binomial_pmf.__wrapped__
    for i, t in enumerate(support):
        if left == 0:
            break
        if i == len(support) - 1:
            counts[t] = left
            break
        c = rand.categorical(pmf(min(q[t] / mass, 1), left, q.dtype == object))
        if c:
            counts[t] = c
        left -= c
        mass = mass - q[t]
    return counts


@plumbing
def token_id(t) -> int:
    """A drafted token id as an int: numpy integers converted, Python ints (and their subclasses,
    e.g. the opaque ids `verispec.formal.watch` hands out to see how a rule uses them) kept."""
    return t if isinstance(t, int) and not isinstance(t, bool) else int(t)
