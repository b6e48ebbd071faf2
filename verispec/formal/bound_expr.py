"""A bound expression such as ``(1 - w) * tv_pq``, parsed without eval: a small arithmetic grammar.

`parse_bound(text, names)` reads EXPR with Python's own parser (`ast.parse(mode="eval")`) and keeps
only numbers, the whitelisted `names`, + - * /, ** with an integer exponent, parentheses and
min / max / abs calls; anything else (attributes, other calls, comparisons, strings) raises
ValueError naming ``--tv-bound``. The parsed `Bound` is evaluated twice over one tree: as a z3 real
term for the solver (`Bound.z3`) and in Fractions to confirm a counterexample (`Bound.exact`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from fractions import Fraction

import z3

__all__ = ["Bound", "parse_bound"]

_BINARY = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.Div: lambda a, b: a / b}
_CALLS = ("min", "max", "abs")


@dataclass(frozen=True)
class Bound:
    """A parsed bound: its text, its tree (`ast.Expression`) and the names it reads."""

    text: str
    tree: ast.Expression
    names: frozenset

    def z3(self, env: dict):
        """The bound as a z3 real term; `env`: {name: z3 term or Fraction}."""
        return _evaluate(self.tree.body, env, _Z3)

    def exact(self, env: dict) -> Fraction:
        """The bound in exact arithmetic; `env`: {name: Fraction}."""
        return Fraction(_evaluate(self.tree.body, env, _EXACT))


class _Z3:
    number = staticmethod(z3.RealVal)
    min = staticmethod(lambda a, b: z3.If(a <= b, a, b))
    max = staticmethod(lambda a, b: z3.If(a >= b, a, b))
    abs = staticmethod(lambda a: z3.If(a >= 0, a, -a))


class _EXACT:
    number = staticmethod(Fraction)
    min = staticmethod(min)
    max = staticmethod(max)
    abs = staticmethod(abs)


def _evaluate(node, env, algebra):
    if isinstance(node, ast.Constant):
        return algebra.number(Fraction(str(node.value)))  # 0.1 is 1/10, not its binary float
    if isinstance(node, ast.Name):
        value = env[node.id]
        return algebra.number(value) if isinstance(value, (int, Fraction)) else value
    if isinstance(node, ast.UnaryOp):
        value = _evaluate(node.operand, env, algebra)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        base = _evaluate(node.left, env, algebra)
        result = algebra.number(1)
        for _ in range(node.right.value):
            result = result * base
        return result
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_evaluate(node.left, env, algebra), _evaluate(node.right, env, algebra))
    args = [_evaluate(arg, env, algebra) for arg in node.args]  # a whitelisted call
    if node.func.id == "abs":
        return algebra.abs(*args)
    combine = algebra.min if node.func.id == "min" else algebra.max
    out = args[0]
    for arg in args[1:]:
        out = combine(out, arg)
    return out


def parse_bound(text: str, names) -> Bound:
    """Parse `text` as a bound over `names` (see the module doc).

    Raises:
        ValueError: a syntax error, a name not in `names`, a construct outside the grammar
            (the message names --tv-bound and lists the names allowed).
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("--tv-bound: expected an expression such as '(1 - w) * tv_pq'")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise ValueError(f"--tv-bound: cannot parse {text!r}: {err.msg}") from None
    used = set()
    for node in ast.walk(tree):
        _check_node(node, text, set(names), used)
    return Bound(text.strip(), tree, frozenset(used))


def _check_node(node, text, names, used) -> None:
    allowed = f"names: {', '.join(sorted(names))}; numbers, + - * / **, min, max, abs"
    if isinstance(node, ast.Name):
        if node.id not in names and node.id not in _CALLS:
            raise ValueError(f"--tv-bound: unknown name {node.id!r} in {text!r} ({allowed})")
        if node.id in names:
            used.add(node.id)
    elif isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ValueError(f"--tv-bound: {node.value!r} is not a number ({allowed})")
    elif isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Pow):
            if not (isinstance(node.right, ast.Constant) and type(node.right.value) is int and 0 <= node.right.value <= 8):
                raise ValueError(f"--tv-bound: ** takes an integer exponent 0..8 in {text!r}")
        elif type(node.op) not in _BINARY:
            raise ValueError(f"--tv-bound: operator {type(node.op).__name__} is not allowed ({allowed})")
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.USub, ast.UAdd)):
            raise ValueError(f"--tv-bound: operator {type(node.op).__name__} is not allowed ({allowed})")
    elif isinstance(node, ast.Call):
        if not (isinstance(node.func, ast.Name) and node.func.id in _CALLS and node.args and not node.keywords
                and (node.func.id != "abs" or len(node.args) == 1)):
            raise ValueError(f"--tv-bound: only min(...), max(...) and abs(x) may be called ({allowed})")
    elif not isinstance(node, (ast.Expression, ast.operator, ast.unaryop, ast.Load)):
        raise ValueError(f"--tv-bound: {type(node).__name__} is not allowed in {text!r} ({allowed})")
