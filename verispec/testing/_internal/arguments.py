"""The shared reading of a sequence argument (vocabulary sizes, temperatures, families)."""

from __future__ import annotations


def as_tuple(value, name: str, is_scalar, expected: str, empty: str) -> tuple:
    """`value` as a non-empty tuple; a lone item (``is_scalar(value)``) becomes a 1-tuple.

    Raises:
        TypeError: `value` is not iterable ("{name}: expected {expected}, got {type}").
        ValueError: it is empty ("{name}: {empty}").
    """
    if is_scalar(value):
        value = (value,)
    try:
        out = tuple(value)
    except TypeError:
        raise TypeError(f"{name}: expected {expected}, got {type(value).__name__}") from None
    if not out:
        raise ValueError(f"{name}: {empty}")
    return out
