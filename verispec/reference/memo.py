"""One memo for the per-node solutions of the reference rules (selection LPs, resolutions).

The exact enumerator asks a rule for the same node many times (every branch that reaches it), and
some rules solve an LP or a convex construction there. `by_value` memoises such a solution on the
*values* of its probability vectors, so equal vectors share one solution whatever array holds them:
the function is called on arrays rebuilt from the values (float64, or dtype=object for exact
Fractions), never on the caller's own arrays, so the first caller cannot leak into later ones.

Symbolic vectors (`verispec.formal`) are never memoised: the prover must see every comparison a
rule makes on every run. Vocabularies above `MEMO_VOCAB` (real models) are computed afresh per
node; each caller tests that bound itself (reading the vocabulary size is part of what the rule
does, which `verispec prove --all-vocab` reports where the rule does it).
"""

from __future__ import annotations

import functools

import numpy as np

from .probability import is_symbolic

__all__ = ["by_value", "MEMO_VOCAB", "MEMO_SIZE"]

#: Vocabularies up to this size have their per-node solutions memoised.
MEMO_VOCAB = 256

#: Solutions kept per memoised function (least recently used dropped first).
MEMO_SIZE = 4096


def _key(array: np.ndarray) -> tuple:
    """(values, dtype): the values of a probability vector as a hashable tuple (Fractions kept
    exact for dtype=object, Python floats otherwise) and the dtype it is rebuilt with."""
    if array.dtype == object:
        return tuple(array.tolist()), object
    return tuple(float(v) for v in array), np.float64


def by_value(fn):
    """Decorator: ``fn(*arrays, *params)`` memoised on the values of its leading numpy arrays and on
    its (hashable) other arguments. Returns the memoised function; its result is shared by every
    caller with equal values, so treat it as read-only. Symbolic arrays bypass the memo.

    Raises:
        TypeError: an argument after the arrays is not hashable (from `functools.lru_cache`).
    """
    @functools.lru_cache(maxsize=MEMO_SIZE)
    def cached(keys: tuple, params: tuple):
        return fn(*(np.array(values, dtype=dtype) for values, dtype in keys), *params)

    @functools.wraps(fn)
    def memoised(*args):
        split = next((i for i, a in enumerate(args) if not isinstance(a, np.ndarray)), len(args))
        arrays, params = args[:split], args[split:]
        if any(is_symbolic(a) for a in arrays):
            return fn(*args)
        return cached(tuple(_key(a) for a in arrays), params)

    memoised.cache_clear = cached.cache_clear
    return memoised
