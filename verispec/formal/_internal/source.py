"""The Python that builds the proved method, for the reproducing code of a counterexample.

`prove` accepts a built-in name, ``"pkg.module:attr"`` (a Method or a factory) or a Method object.
The printed reproduction must run as printed, so it builds the method the way it was named: a
built-in through `methods.get`, a user's rule imported from its own module (a factory called with
the parameters `prove` passed it). A Method object carries no record of where it was built: the
code then names it in a comment and expects a variable ``method`` holding it.
"""

from __future__ import annotations

import importlib
import inspect

from ...reference import methods
from ...reference.methods import Method

__all__ = ["MethodSource", "method_source"]


class MethodSource:
    """How a proved method was named: `label` (for the report) and `lines` (Python that assigns it
    to ``method``, or a comment for a Method object)."""

    def __init__(self, label: str, lines: list, runnable: bool):
        self.label = label
        self.lines = lines
        self.runnable = runnable

    def __repr__(self):
        return f"MethodSource({self.label!r})"


def method_source(spec, method: Method, params: dict) -> MethodSource:
    """The `MethodSource` of `method`, resolved from `spec` with `params` (what `prove` passed to
    `methods.resolve`: draft_length, num_paths)."""
    if isinstance(spec, str) and ":" in spec:
        return _user_source(spec, params)
    builtin = _builtin_call(method)
    if builtin is not None:
        return MethodSource(repr(method), ["from verispec.reference import methods", f"method = {builtin}"], True)
    return MethodSource(repr(method), [f"# method: the Method given to prove, {method!r}"], False)


def _builtin_call(method: Method) -> str | None:
    """``methods.get(name, ...)`` when that rebuilds `method` (a built-in), else None."""
    if method.name not in methods.names() + methods.lossy_names():
        return None
    accepted = set(methods.parameters(method.name))
    given = {k: v for k, v in method.params.items() if k in accepted}
    try:
        rebuilt = methods.get(method.name, **given)
    except (TypeError, ValueError):
        return None
    if repr(rebuilt) != repr(method) or rebuilt.verify != method.verify:  # a rule object compares by value
        return None  # a user's Method that borrowed a built-in's name
    return f"methods.get({method.name!r}{''.join(f', {k}={v!r}' for k, v in given.items())})"


def _user_source(spec: str, params: dict) -> MethodSource:
    """``from module import head`` then the attribute, or the factory called as `methods.load` calls
    it (with the `params` its signature names)."""
    module_name, attr = spec.split(":")
    obj = importlib.import_module(module_name)  # already imported by `methods.load`
    for part in attr.split("."):
        obj = getattr(obj, part)
    expr = attr
    if callable(obj) and not isinstance(obj, Method):
        given = _factory_arguments(obj, params)
        expr = f"{attr}({', '.join(f'{k}={v!r}' for k, v in given.items())})"
    lines = [f"from {module_name} import {attr.split('.')[0]}", f"method = {expr}"]
    return MethodSource(spec if expr == attr else f"{module_name}:{expr}", lines, True)


def _factory_arguments(factory, params: dict) -> dict:
    """The `params` a factory's signature names (all for ``**kwargs``), as `methods.load` passes them."""
    try:
        signature = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return {}
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.values())
    return {name: value for name, value in params.items() if open_ended or name in signature}
