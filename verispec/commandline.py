"""What every `verispec` command shares: argparse value types, and the exit status of an error by
its type.

Each command lives in its package and registers itself on the `verispec` parser with
``add_parser(subparsers)``, which sets ``func`` to its ``run(args) -> int`` (`verispec.cli`
dispatches). A command reports a bad argument or a broken rule either itself or by letting the
error out to `verispec.cli`; either way the status comes from `exit_status`, by the error's type:

- 3: the error, or an error it was raised from, carries ``exit_status = 3``: a user's rule broke
  its contract (`verispec.reference.contract.RuleContractError`), which is not a verdict;
- 2: any other ValueError or TypeError: bad input (the library names the argument in the message);
  or a library the command drives is missing, or lacks what its adapter looks up (the error class
  carries ``exit_status = 2``: `verispec.integrations.verdict.IntegrationError`).

This module imports nothing of verispec, so every layer's command can use it.
"""

from __future__ import annotations

import argparse

__all__ = ["int_at_least", "positive_int", "nonnegative_int", "number_where", "open_unit", "positive_float",
           "comma_list", "int_list", "exit_status", "BAD_INPUT", "MISSING_LIBRARY", "CONTRACT_ERROR"]

#: The exit status of bad input (a ValueError or TypeError without an `exit_status` of its own).
BAD_INPUT = 2
#: The exit status of a library the command drives that is missing or lacks an entry point.
MISSING_LIBRARY = 2
#: The exit status of a rule that broke its contract (the `exit_status` of `RuleContractError`).
CONTRACT_ERROR = 3


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


positive_int = int_at_least(1)
nonnegative_int = int_at_least(0)


def number_where(accept, rule: str):
    """An argparse type: a number (float) that ``accept(value)`` holds for, else an error naming `rule`."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"must be {rule}, got {value}")
        return value

    return parse


#: An argparse type: a number in (0, 1) (a TV, a false-alarm rate, a power).
open_unit = number_where(lambda value: 0 < value < 1, "in (0, 1)")
#: An argparse type: a number > 0 (a temperature).
positive_float = number_where(lambda value: value > 0, "> 0")


def comma_list(text: str) -> tuple:
    """An argparse type: the non-empty items of a comma-separated list, stripped."""
    items = tuple(item.strip() for item in text.split(",") if item.strip())
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return items


def int_list(text: str) -> tuple:
    """An argparse type: a comma-separated list of integers >= 1."""
    return tuple(positive_int(item) for item in comma_list(text))


def exit_status(err: BaseException) -> int | None:
    """The exit status of a command stopped by `err` (module docstring), or None for an error that
    is not a report to the user (a bug: let it raise with its traceback).

    The ``exit_status`` a class carries wins, on `err` or on the error it was raised from
    (``__cause__``: a loader's ValueError wrapping the contract error of the user's module).
    """
    seen: BaseException | None = err
    while seen is not None:
        status = getattr(type(seen), "exit_status", None)
        if isinstance(status, int):
            return status
        seen = seen.__cause__
    return BAD_INPUT if isinstance(err, (ValueError, TypeError)) else None
