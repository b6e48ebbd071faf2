"""argparse types shared by the `verispec` commands: each rejects bad text with a message argparse
prints after the option's name."""

from __future__ import annotations

import argparse

__all__ = ["int_at_least", "positive_int", "nonnegative_int", "comma_list", "int_list"]


def int_at_least(minimum: int):
    """An argparse type: an integer >= `minimum` (argparse names the option in its error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


#: An integer >= 1; an integer >= 0.
positive_int = int_at_least(1)
nonnegative_int = int_at_least(0)


def comma_list(text: str) -> tuple:
    """'a, b,c' -> ('a', 'b', 'c'); an empty list is an error."""
    items = tuple(item.strip() for item in text.split(",") if item.strip())
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return items


def int_list(text: str) -> tuple:
    """'2,3' -> (2, 3): comma-separated integers >= 1."""
    return tuple(positive_int(item) for item in comma_list(text))
