"""`RuleContractError`: a user's rule broke the interface, which is not the same as "not lossless".

A Method is a drafter ``draft(draft_model, context, rand) -> Draft`` and a verifier
``verify(target, draft_model, context, draft, rand) -> accepted draft prefix + one correction/bonus
token``. When a rule breaks that contract — it raises, returns no token, a token outside the
vocabulary or a path that was not drafted, has the wrong signature, emits more tokens than its
declared draft depth allows, or reads a draft proposal that is not the law its tokens were drawn
from — verispec raises `RuleContractError` instead of a `LosslessnessError`: the rule has no output
law to compare yet. Only a well-formed rule whose law differs from the target's is "not lossless".

Under the exact enumerator the error names the branch: the iteration's prefix, the branch's
probability, and the draws (every ``rand.bernoulli`` / ``rand.categorical`` with its outcome) that
led there, so the failing case can be replayed by hand. A branch that has a draw of probability
<= `ROUNDING_PROBABILITY` in float64 exists only through rounding (e.g. ``min(1, p/q)`` computed as
``1 - 2**-53`` where p == q); the report says so and what a sampling kernel does there.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..commandline import CONTRACT_ERROR

__all__ = ["RuleContractError", "Draw", "ROUNDING_PROBABILITY", "check_signature"]

#: A float64 draw whose probability is at most this (64 units in the last place of 1) exists only
#: through rounding: no probability a rule computes on purpose is that small in float64.
ROUNDING_PROBABILITY = 64 * 2.0 ** -53

_MAX_SHOWN_DRAWS = 12


@dataclass(frozen=True)
class Draw:
    """One random draw on the failing branch.

    Attributes:
        kind: "bernoulli" or "categorical".
        argument: p (bernoulli) or the probability vector [V] (categorical).
        outcome: True/False or the token id drawn.
        probability: the probability of that outcome (float or Fraction).
    """

    kind: str
    argument: object
    outcome: object
    probability: object

    @property
    def from_rounding(self) -> bool:
        """True for a float64 draw of probability in (0, ROUNDING_PROBABILITY]."""
        p = self.probability
        return not isinstance(p, (Fraction, int)) and 0 < float(p) <= ROUNDING_PROBABILITY

    def __str__(self):
        if self.kind == "bernoulli":
            return f"bernoulli({_num(self.argument)}) -> {self.outcome}  (probability {_num(self.probability)})"
        probs = list(self.argument)
        shown = ", ".join(_num(x) for x in probs[:8]) + (", ..." if len(probs) > 8 else "")
        return f"categorical([{shown}]) -> {self.outcome}  (probability {_num(self.probability)})"


def _num(x) -> str:
    if isinstance(x, Fraction):
        return str(x)
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x))
    text = f"{float(x):.6g}"
    # 1 - 2**-53 must not print as "1": the difference is the point of a rounding report
    return repr(float(x)) if text in ("0", "1") and float(x) not in (0.0, 1.0) else text


_KERNEL_NOTE = (
    "  This branch exists only through float64 rounding (a draw of probability {p} <= 64 ulp, e.g. "
    "min(1, p/q) computed as 1 - 2**-53 where p == q,\n"
    "  or a residual max(p - q, 0) of total mass ~1e-17). A sampling kernel with a uniform "
    "u ~ U[0, 1) takes it about once in {inv:.1g} draws\n"
    "  (never with float32 uniforms, whose resolution is 2**-24); when it does, a zero residual makes "
    "torch.multinomial raise and\n"
    "  argmax-style kernels emit token 0. Guard the rule (e.g. accept when p(x) >= q(x), or fall back "
    "to p when the residual mass\n"
    "  is <= 1e-12), or check it on rational models (exact=True / --rational), where this branch does "
    "not exist.")


class RuleContractError(TypeError, ValueError):
    """A rule (drafter or verifier) broke the Method contract; not a verdict on losslessness.

    It subclasses TypeError and ValueError, which `Method.step` raised for malformed results before
    this class existed, so code catching those keeps working; it is NOT an AssertionError, so a
    test expecting `LosslessnessError` does not mistake a broken rule for a lossy one.

    Attributes:
        method: repr of the Method (or None).
        problem: one line saying what broke.
        prefix: context + emitted tokens of the iteration where it broke (None outside `exact`).
        probability: the branch's probability within that iteration (None outside `exact`).
        prefix_probability: the probability that the loop reaches ``prefix`` (None if unknown).
        draws: the `Draw`s that led to the branch, in order.
        instance: the `verispec.testing.Instance` being checked (set by assert_lossless / check).
        from_rounding: True when the branch exists only through float64 rounding.
    """

    #: The `verispec` commands' exit status for it (`verispec.commandline.exit_status`): not a verdict.
    exit_status = CONTRACT_ERROR

    def __init__(self, problem: str, *, method=None, prefix=None, probability=None, draws=(),
                 prefix_probability=None, instance=None, detail: str = ""):
        self.problem, self.method, self.prefix = problem, method, prefix
        self.probability, self.draws = probability, tuple(draws)
        self.prefix_probability, self.instance, self.detail = prefix_probability, instance, detail
        super().__init__(self._message())

    @property
    def from_rounding(self) -> bool:
        return any(d.from_rounding for d in self.draws)

    def _message(self) -> str:
        head = f"{self.method} broke the rule contract: {self.problem}" if self.method else self.problem
        lines = [head + ("" if self.detail == "" else "\n  " + self.detail)]
        if self.prefix is not None:
            lines.append(f"  in the iteration from prefix {self.prefix!r}"
                         + ("" if self.prefix_probability is None
                            else f" (reached with probability {_num(self.prefix_probability)})"))
        if self.probability is not None:
            lines.append(f"  on a branch of probability {_num(self.probability)} within that iteration, "
                         f"after {len(self.draws)} draw(s):")
            shown = self.draws[-_MAX_SHOWN_DRAWS:]
            if len(self.draws) > len(shown):
                lines.append(f"    ... {len(self.draws) - len(shown)} earlier draws")
            start = len(self.draws) - len(shown) + 1
            lines += [f"    {i}. {d}" + ("   <- rounding" if d.from_rounding else "")
                      for i, d in enumerate(shown, start)]
            if self.draws:
                lines.append("    (verispec's drafters draw K i.i.d. tokens as counts: a categorical over a "
                             "Binomial pmf -> how many paths take the next token)")
        if self.from_rounding:
            p = min(float(d.probability) for d in self.draws if d.from_rounding)
            lines.append(_KERNEL_NOTE.format(p=f"{p:.3g}", inv=1 / p))
        if self.instance is not None:
            lines.append("  instance:")
            lines += ["    " + line for line in self.instance.describe().splitlines()]
        return "\n".join(lines)

    def with_context(self, **updates) -> "RuleContractError":
        """A copy with more context (instance, prefix_probability, method), the same cause."""
        fields = dict(problem=self.problem, method=self.method, prefix=self.prefix,
                      probability=self.probability, draws=self.draws,
                      prefix_probability=self.prefix_probability, instance=self.instance,
                      detail=self.detail)
        fields.update(updates)
        new = RuleContractError(**fields)
        new.__cause__ = self.__cause__
        return new


def check_signature(function, names: tuple[str, ...], role: str, method_name: str) -> None:
    """Raise RuleContractError when ``function`` cannot be called with ``len(names)`` positional
    arguments (the drafter's or verifier's calling convention). Callables whose signature Python
    cannot inspect are let through."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*names)
    except TypeError as err:
        raise RuleContractError(
            f"{role}: method {method_name!r}'s {role} has signature {signature}, but it is called as "
            f"{role}({', '.join(names)}) ({err})") from None
