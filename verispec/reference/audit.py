"""What `verispec prove --all-vocab` audits, declared where the code is defined.

The every-V certificate (`verispec.formal.cutoff`, docs/prove.md "For every V") watches a rule's
symbolic run and refuses any arithmetic on probabilities, read of V or numeric use of a token id
that the rule makes itself. Two kinds of code are exempt, and each says so where it is defined:

- an *audited primitive* (`primitive(kind)`): its own arithmetic is not the rule's; instead the
  watch checks its arguments against what the theorem covers, by its `Primitive` kind (a residual,
  an acceptance probability, the i.i.d. draft draw, a draw of `rand` itself);
- *plumbing* (`plumbing` on a function or class, or ``__audit__ = PLUMBING`` in a module or
  package): verispec's own bookkeeping (model caches, `Method.step`'s validation, the `Draft` /
  `Drafter` records, the prover itself), which may read V and handle token ids as numbers.

The marks are attributes of the objects themselves, so renaming or moving a function keeps what it
is; nothing is inferred from file paths or function names. A mark covers the code nested in what
it marks (a class's methods, a function's inner functions). Whatever is unmarked is rule code.
"""

from __future__ import annotations

import enum

__all__ = ["Primitive", "PLUMBING", "primitive", "plumbing", "mark_of"]


class Primitive(enum.Enum):
    """The audited primitives, by what the watch checks of their arguments."""

    #: residual(p, q, weight) / positive_mass(p, q, weight): sum_z (w p_z - q_z)+ and its normalisation.
    RESIDUAL = "residual"
    #: accept_probability(p_x, q_x, weight): min(1, w p(x) / q(x)) of one token.
    ACCEPTANCE = "acceptance"
    #: draw_counts(q, k, rand): k i.i.d. draws from q, as counts.
    IID_DRAW = "i.i.d. draw"
    #: a draw of `rand` itself (bernoulli, categorical): checked where the rule calls it.
    RANDOMNESS = "randomness"


class _Plumbing:
    """The mark of plumbing (a singleton: `PLUMBING`)."""

    def __repr__(self):
        return "PLUMBING"


#: The mark of verispec's own bookkeeping: ``__audit__ = PLUMBING`` in a module or package, or the
#: `plumbing` decorator on a function or class.
PLUMBING = _Plumbing()

_ATTRIBUTE = "__audit__"


def primitive(kind: Primitive):
    """Decorator: mark a function as an audited primitive of `kind`.

    Raises:
        TypeError: `kind` is not a `Primitive`.
    """
    if not isinstance(kind, Primitive):
        raise TypeError(f"kind: expected a Primitive, got {type(kind).__name__}")

    def mark(fn):
        setattr(fn, _ATTRIBUTE, kind)
        return fn

    return mark


def plumbing(obj):
    """Decorator: mark a function or class (and everything defined inside it) as plumbing."""
    setattr(obj, _ATTRIBUTE, PLUMBING)
    return obj


def mark_of(obj):
    """The mark of `obj` (a `Primitive`, `PLUMBING`) or None; a module's is its ``__audit__``."""
    return getattr(obj, _ATTRIBUTE, None)
