"""Symbolic reals: numbers a rule computes with when it is executed for EVERY target/draft pair.

A `Sym` wraps a z3 real expression over the models' probability variables. Arithmetic with other
`Sym`s, ints, Fractions (and finite floats, read as the exact binary rationals they denote) builds
new expressions; the rule's code runs unchanged on numpy object arrays of them (no
``__array_priority__``, so numpy broadcasts element by element).

A comparison (``<``, ``==``, ``min``, ``max``, ``sorted``, ``if total > 0``) has no single answer for
all pairs. It is handed to the active replay (`current_replay`), which answers it under the current
path condition and forks the run only when both outcomes are feasible (`verispec.formal.replay`).
``float(sym)`` raises `SymbolicError`: a rule that leaves exact arithmetic cannot be run
symbolically. Syms hash by identity, so caches keyed on them never mix two different values.

Each Sym also carries `reads`: the (model, prefix, token) entries it was computed from, and every
operation on one is shown to the active observer (``with observing(watch)``), so that
`verispec.formal.watch` can tell which vocabulary-wide computations a rule performs.

State: the active replay, `Expressions` table and observer live in context variables
(`contextvars`, so each thread and each run sees its own), set by the ``with replaying(replay)``,
``with building()`` and ``with observing()`` blocks; nothing here is a module-level container
mutated at run time.
"""

from __future__ import annotations

import enum
import math
from contextlib import contextmanager
from contextvars import ContextVar
from fractions import Fraction
from numbers import Rational

import numpy as np
import z3

from .rho import rho_symbol

class SymbolicError(TypeError):
    """The rule did something that has no exact symbolic meaning (float(), a log, a non-integer
    power of a symbolic value, ...): it cannot be run symbolically as written."""


class SymbolicZeroDivision(ZeroDivisionError):
    """The rule divides by a symbolic value that is 0 for some pair on a branch of positive
    probability: the concrete rule raises there (`verispec check` reports it as a contract error).

    Attributes:
        divisor: the z3 expression of the divisor.
        witness: a z3 model of the path condition with divisor == 0 (a pair where it happens).
        trace: the choices of the branch (decisions and random outcomes) up to the division.
    """

    def __init__(self, divisor, witness, trace):
        text = str(divisor)
        super().__init__(f"division by a symbolic value that is 0 on a branch of positive probability: "
                         f"{text if len(text) <= 120 else text[:117] + '...'}")
        self.divisor, self.witness, self.trace = divisor, witness, tuple(trace)


_ZERO = Fraction(0)

#: The replay answering comparisons of symbolic values now (`replaying`), or None.
_REPLAY: ContextVar = ContextVar("verispec_formal_replay", default=None)

#: The table of expressions built in this proof (`building`), or None (build without reuse).
_EXPRESSIONS: ContextVar = ContextVar("verispec_formal_expressions", default=None)

#: The observer shown every operation on a Sym (`observing`), or None.
_OBSERVER: ContextVar = ContextVar("verispec_formal_observer", default=None)

_NO_READS = frozenset()


class Operation(enum.Enum):
    """What an observer (`observing`) is shown: an arithmetic operation or a comparison on a Sym,
    or a fixed point (a quantity defined as the root of an equation over its operands, given with
    a label naming it)."""

    ARITHMETIC = "arithmetic"
    COMPARISON = "comparison"
    FIXED_POINT = "fixed point"


@contextmanager
def observing(observer):
    """Show `observer.operation(kind, operands)` (an `Operation`) every arithmetic operation and
    comparison on a Sym inside the block, and `observer.operation(Operation.FIXED_POINT, operands,
    label)` every fixed point computed from Syms."""
    token = _OBSERVER.set(observer)
    try:
        yield observer
    finally:
        _OBSERVER.reset(token)


def _observe(kind, *operands, label=None):
    observer = _OBSERVER.get()
    if observer is not None:
        if label is None:
            observer.operation(kind, operands)
        else:
            observer.operation(kind, operands, label)


def reads_of(value) -> frozenset:
    """The (model, prefix, token) entries a Sym was computed from (empty for a concrete number)."""
    return value.reads if isinstance(value, Sym) else _NO_READS


def current_replay():
    """The replay answering comparisons now; SymbolicError outside a symbolic run."""
    replay = _REPLAY.get()
    if replay is None:
        raise SymbolicError("a symbolic value was compared outside a symbolic replay")
    return replay


def active_replay():
    """The replay answering comparisons now, or None outside a symbolic run."""
    return _REPLAY.get()


@contextmanager
def replaying(replay):
    """Make `replay` answer the comparisons of symbolic values inside the block (nests)."""
    token = _REPLAY.set(replay)
    try:
        yield replay
    finally:
        _REPLAY.reset(token)


def _constant(value):
    """An exact rational for a concrete number, None for anything else (-> NotImplemented)."""
    if isinstance(value, (bool, np.bool_)):
        return Fraction(int(value))
    if isinstance(value, Rational):
        return Fraction(value)
    if isinstance(value, np.integer):
        return Fraction(int(value))
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            raise SymbolicError(f"{value!r} in arithmetic with a symbolic value")
        return Fraction(float(value))
    return None


def to_z3(value):
    """The z3 real expression of a Sym or a concrete number."""
    if isinstance(value, Sym):
        return value.expr
    constant = _constant(value)
    if constant is None:
        raise SymbolicError(f"cannot read {type(value).__name__} {value!r} as a real")
    return z3.RealVal(constant)


def is_symbolic(value) -> bool:
    """True for a Sym (and for a numpy object array holding one)."""
    if isinstance(value, np.ndarray):
        return value.dtype == object and any(isinstance(x, Sym) for x in value.flat)
    return isinstance(value, Sym)


def _operand(other):
    """The other operand of a Sym operation: its z3 expression (a Sym), an exact Fraction (a
    concrete number), or None (anything else: the operation returns NotImplemented)."""
    return other.expr if isinstance(other, Sym) else _constant(other)


def _arithmetic(name):
    """Sym's operator `name` ("add", "sub", "mul", "div") and its reflected form, both through
    `Sym._binary` (``__add__`` and ``__radd__``, ...)."""
    def forward(self, other):
        return self._binary(other, name)

    def reflected(self, other):
        return self._binary(other, name, True)

    return forward, reflected


def _comparison(op, infinite):
    """Sym's comparison `op` ("lt", ...) through `Sym._compare`; ``infinite(positive)`` is its
    answer against a float infinity of that sign."""
    def compare(self, other):
        return self._compare(other, op, infinite)

    return compare


class Sym:
    """A real number given by a z3 expression over the models' probability variables."""

    __slots__ = ("expr", "reads", "__weakref__")

    def __init__(self, expr, reads=_NO_READS):
        self.expr = expr
        self.reads = reads  # frozenset of (model name, prefix, token) this value was computed from

    # -- arithmetic ------------------------------------------------------------------------
    def _binary(self, other, name, reflected=False):
        o = _operand(other)
        if o is None:
            return NotImplemented
        _observe(Operation.ARITHMETIC, self, other)
        if isinstance(o, Fraction):
            shortcut = _shortcut(self, o, name, reflected)
            if shortcut is not None:
                return shortcut
            o = real(o)
        a, b = (o, self.expr) if reflected else (self.expr, o)
        if name == "div":
            _check_divisor(b)
        return Sym(build(name, a, b), self.reads | reads_of(other))

    __add__, __radd__ = _arithmetic("add")
    __sub__, __rsub__ = _arithmetic("sub")
    __mul__, __rmul__ = _arithmetic("mul")
    __truediv__, __rtruediv__ = _arithmetic("div")

    def __pow__(self, exponent):
        _observe(Operation.ARITHMETIC, self)
        if isinstance(exponent, (int, np.integer)) and not isinstance(exponent, bool):
            n = int(exponent)
            if n == 0:
                return Fraction(1)
            if n == 1:
                return self
            if n < 0:
                _check_divisor(self.expr)
            power = self.expr ** abs(n) if n > 0 else 1 / self.expr ** abs(n)
            return Sym(power, self.reads)
        if isinstance(exponent, Fraction) and exponent.denominator == 1:
            return self ** int(exponent)
        raise SymbolicError(f"symbolic value to the power {exponent!r}: only integer powers are exact")

    def __rpow__(self, base):
        raise SymbolicError("a symbolic exponent has no exact symbolic meaning")

    def __neg__(self):
        _observe(Operation.ARITHMETIC, self)
        return Sym(-self.expr, self.reads)

    def __pos__(self):
        return self

    def __abs__(self):
        return self if self >= 0 else -self

    # -- comparisons: each one is a decision of the replay ----------------------------------
    def _compare(self, other, op, infinite):
        if isinstance(other, (float, np.floating)) and math.isinf(other):
            return infinite(other > 0)
        o = _operand(other)
        if o is None:
            return NotImplemented
        _observe(Operation.COMPARISON, self, other)
        if isinstance(o, Fraction):
            o = real(o)
        return current_replay().decide(build(op, self.expr, o))

    __lt__ = _comparison("lt", lambda pos: pos)
    __le__ = _comparison("le", lambda pos: pos)
    __gt__ = _comparison("gt", lambda pos: not pos)
    __ge__ = _comparison("ge", lambda pos: not pos)
    __eq__ = _comparison("eq", lambda pos: False)
    __ne__ = _comparison("ne", lambda pos: True)

    def __bool__(self):
        _observe(Operation.COMPARISON, self)
        return current_replay().decide(self.expr != 0)

    __hash__ = object.__hash__

    # -- conversions that have no exact meaning ---------------------------------------------
    def __float__(self):
        raise SymbolicError("float() of a symbolic probability: the rule leaves exact arithmetic here "
                            "(e.g. a float bisection or np.log) and cannot be run symbolically")

    def __int__(self):
        raise SymbolicError("int() of a symbolic probability")

    def __index__(self):
        raise SymbolicError("a symbolic probability used as an index")

    def __floor__(self):
        raise SymbolicError("floor() of a symbolic probability")

    def __ceil__(self):
        raise SymbolicError("ceil() of a symbolic probability")

    def __round__(self, ndigits=None):
        raise SymbolicError("round() of a symbolic probability")

    def __repr__(self):
        text = str(self.expr)
        return f"Sym({text if len(text) <= 60 else text[:57] + '...'})"

    # -- operations the reference asks a symbolic value's type for ---------------------------
    @staticmethod
    def spectr_rho(p, q, num_paths: int):
        """SpecTr's rho for symbolic p, q ([V] numpy object arrays of `Sym`/numbers).

        The hook `verispec.reference.verifiers.multidraft.spectr_rho` calls instead of its float64
        bisection, which has no symbolic meaning. Returns Fraction(1) when K = 1, else a `Sym` over
        the z3 real of `verispec.formal.rho.rho_symbol` (its defining constraints join the
        exploration). Raises SymbolicError outside a replay.
        """
        K = int(num_paths)
        if K == 1:
            return Fraction(1)
        explorer = current_replay().explorer
        reads = frozenset().union(*(reads_of(x) for x in (*p, *q)))
        _observe(Operation.FIXED_POINT, *p, *q, label="SpecTr's rho")
        return Sym(rho_symbol(explorer, [to_z3(x) for x in p], [to_z3(x) for x in q], K), reads)


class Expressions:
    """The z3 expressions built in one proof, each built once (`build`, `real`).

    A replay re-runs the rule once per leaf and rebuilds the same expressions; z3 hash-conses them,
    so a live operand's AST id names it uniquely (the operands are kept alive with the result for
    that reason). Memory only: results never depend on the table. Made current by `building`.
    """

    def __init__(self):
        self.built: dict = {}  # (op, operand AST ids) -> (result, operands)
        self.reals: dict = {}  # Fraction -> z3.RealVal

    def build(self, name, a, b):
        """`OPS`[name](a, b), built once."""
        key = (name, a.ast.value, b.ast.value)  # the AST pointers: unique while the operands live
        hit = self.built.get(key)
        if hit is None:
            hit = self.built[key] = (OPS[name](a, b), a, b)
        return hit[0]

    def real(self, constant: Fraction):
        """z3.RealVal(constant), built once."""
        value = self.reals.get(constant)
        if value is None:
            value = self.reals[constant] = z3.RealVal(constant)
        return value


@contextmanager
def building(expressions: Expressions | None = None):
    """Reuse the expressions built inside the block (a fresh `Expressions` table by default);
    the table is dropped with the block (`verispec.formal.prove` opens one per proof)."""
    token = _EXPRESSIONS.set(Expressions() if expressions is None else expressions)
    try:
        yield _EXPRESSIONS.get()
    finally:
        _EXPRESSIONS.reset(token)


def build(name, a, b):
    """The z3 term `OPS`[name](a, b) of two z3 terms, from the current `Expressions` table when
    one is open (`building`)."""
    table = _EXPRESSIONS.get()
    return OPS[name](a, b) if table is None else table.build(name, a, b)


def simplify(expr):
    """z3.simplify(expr), computed once per expression."""
    return build("simplify", expr, expr)


def negate(expr):
    """z3.Not(expr), built once."""
    return build("not", expr, expr)


def real(constant: Fraction):
    """z3.RealVal(constant), built once."""
    table = _EXPRESSIONS.get()
    return z3.RealVal(constant) if table is None else table.real(constant)


def _check_divisor(expr) -> None:
    """Inside a replay: SymbolicZeroDivision when the divisor can be 0 on the current branch."""
    replay = _REPLAY.get()
    if replay is not None:
        replay.check_divisor(expr)


#: The operations `build` knows: name -> function of two z3 terms (unary ones ignore the second).
OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
        "div": lambda a, b: a / b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
        "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b,
        "ne": lambda a, b: a != b, "not": lambda a, _: z3.Not(a), "simplify": lambda a, _: z3.simplify(a)}


def _shortcut(sym, constant: Fraction, name: str, reflected: bool):
    """x + 0, x - 0, x * 1, x * 0, x / 1, 0 / x without a new expression (keeps concrete zeros
    concrete, so a categorical never branches on a token that cannot be drawn)."""
    if name in ("add", "sub") and constant == 0:
        return sym if name == "add" or not reflected else -sym
    if name == "mul":
        return _ZERO if constant == 0 else sym if constant == 1 else None
    if name == "div":
        if not reflected and constant == 0:
            raise ZeroDivisionError("symbolic value divided by zero")
        if reflected and constant == 0:
            _check_divisor(sym.expr)  # 0 / x raises where x = 0, as the concrete rule does
            return _ZERO
        if not reflected and constant == 1:
            return sym
    return None
