"""The shared check of a user's list of `Instance`s (`assert_lossless` and the sampler harnesses)."""

from __future__ import annotations

from ..sweeps import Instance


def instance_items(todo):
    """Yield (index, instance) of `todo`, a list, checking as it goes that it is not empty and
    that every item is an `Instance`; the caller checks the rest of each item in its loop body.

    Raises:
        ValueError: `todo` is empty ("instances: empty").
        TypeError: an item is not an `Instance`, naming its index.
    """
    if not todo:
        raise ValueError("instances: empty")
    for i, inst in enumerate(todo):
        if not isinstance(inst, Instance):
            raise TypeError(f"instances: item {i} is a {type(inst).__name__}, not an Instance")
        yield i, inst
