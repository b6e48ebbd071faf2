"""Deprecated names (issue 45: one term per idea): the one helper every public rename goes through.

    @renamed_keywords(num_drafts="num_paths")    # the old keyword still works, with a DeprecationWarning
    def spectr_rho(p, q, num_paths): ...

    deprecated("'ems'", "'packed'")               # any other old spelling a user passes (a string, a key)

The renames kept as aliases (old -> new): keyword num_drafts -> num_paths (the closed forms, the
multi-draft rules, the LPs), k -> num_paths (the selection laws), threshold -> gain_threshold
(OPT-Tree), confidence_threshold (the adaptive chain) or divergence_threshold (FSD); the torch
`Verdict` / `RuleOutput` field num_accepted -> tau; the bench's KV implementation "ems" -> "packed";
the phrase pools' bench key K (num_candidates) -> C.
"""

from __future__ import annotations

import functools
import warnings

__all__ = ["deprecated", "renamed_keywords"]


def deprecated(old: str, new: str, stacklevel: int = 3) -> None:
    """Warn (DeprecationWarning, pointing at the caller's caller by default) that `old` is now `new`."""
    warnings.warn(f"{old} is deprecated; use {new}", DeprecationWarning, stacklevel=stacklevel)


def renamed_keywords(**renames: str):
    """Decorator: the function also takes each old keyword of `renames` (old="new"), passes it on
    as the new one and warns; both at once is a TypeError. Positional calls are untouched."""
    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            if kwargs and not renames.keys().isdisjoint(kwargs):
                for old, new in renames.items():
                    if old in kwargs:
                        if new in kwargs:
                            raise TypeError(f"{fn.__qualname__}() got both {old}= (deprecated) and {new}=")
                        deprecated(f"{fn.__qualname__}({old}=...)", f"{new}=")
                        kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        inner.renamed_keywords = dict(renames)
        return inner
    return wrap
