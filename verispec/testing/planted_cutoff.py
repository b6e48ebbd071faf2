"""Planted rules that are lossless at every small vocabulary and lossy from V = 5 on.

Each is token-level speculative sampling (Leviathan et al. 2023, arXiv 2211.17192) at L = 1 with
one extra shortcut: the drafted token x is accepted outright when a condition holds that no pair
with V <= 4 tokens meets. So `verispec prove` proves each at V = 2, 3 and 4 (and at the cutoff
V* = 4 of token verification), and only V >= 5 shows the bug. A cutoff certificate that trusted
the small sizes without checking what the rule reads would wrongly claim them lossless for every
V; `verispec prove --all-vocab` (`verispec.formal.cutoff`) refuses each and names what it read:

- ``count_accept``: accepts outright when at least 4 tokens have p(z) > q(z) (a count over the
  vocabulary; at V <= 4 at most V - 1 tokens can, since both sum to 1);
- ``argmax_accept``: accepts outright when x is the argmax of p and p(x) < 1/4 (an argmax; at
  V <= 4 the largest p(z) is at least 1/4);
- ``vocab_accept``: accepts outright when V >= 5 (V itself);
- ``token_id_accept``: accepts outright when x >= 4 (a token id used as a number).

At V = 5 each is refuted by p = (1/5, ..., 1/5), q = (1/10, 1/10, 1/10, 1/10, 3/5) (token 0 for
``argmax_accept``: q = (3/5, 1/10, ..., 1/10)): the shortcut gives the accepted token mass at least
3/5 > 1/5. `relabel_accept` is the planted bug of the symmetry reduction: token verification that
accepts token 1 outright, which tells token 1 from the others (lossy at V = 2).
"""

from __future__ import annotations

from fractions import Fraction

from ..reference import drafters
from ..reference.methods import Method
from ..reference.probability import accept_probability, align, argmax, residual

__all__ = ["count_accept", "argmax_accept", "vocab_accept", "token_id_accept", "relabel_accept", "CUTOFF_BUGS",
           "REFUTING_PAIRS"]

#: The smallest vocabulary where each shortcut can fire.
FIRES_FROM = 5


def _shortcut_rule(shortcut):
    """Token verification at L = 1, accepting x outright when `shortcut(p, q, x)` holds."""

    def verify(target, draft_model, context, draft, rand):
        x = draft.tokens(())[0]
        p, q = align(target.probs(context), draft.proposal(()))  # [V], [V]
        if shortcut(p, q, x) or rand.bernoulli(accept_probability(p[x], q[x])):
            return (x, rand.categorical(target.probs(context + (x,))))  # accepted, bonus token
        return (rand.categorical(residual(p, q)),)  # correction token

    return verify


def _method(name, shortcut):
    return Method(f"planted_cutoff.{name}", drafters.chain(1), _shortcut_rule(shortcut), {"draft_length": 1},
                  model_state_only=True)


def count_accept() -> Method:
    """Accept x outright when at least 4 tokens have p(z) > q(z) (a count)."""
    return _method("count_accept", lambda p, q, x: sum(1 for z in range(len(p)) if p[z] > q[z]) >= 4)


def argmax_accept() -> Method:
    """Accept x outright when x is the argmax of p and p(x) < 1/4 (an argmax)."""
    return _method("argmax_accept", lambda p, q, x: argmax(p) == x and p[x] < Fraction(1, 4))


def vocab_accept() -> Method:
    """Accept x outright when the vocabulary has at least 5 tokens (V itself)."""
    return _method("vocab_accept", lambda p, q, x: len(p) >= FIRES_FROM)


def token_id_accept() -> Method:
    """Accept x outright when its id is at least 4 (a token id read as a number)."""
    return _method("token_id_accept", lambda p, q, x: x >= FIRES_FROM - 1)


def relabel_accept() -> Method:
    """Accept token 1 outright (tells token 1 from the others: not relabeling-invariant)."""
    return _method("relabel_accept", lambda p, q, x: x == 1)


#: The rules lossless at V <= 4 and lossy from V = 5 on, each with what the certificate must name.
CUTOFF_BUGS = {"count_accept": (count_accept, "the probability of token"),
               "argmax_accept": (argmax_accept, "comparison between the probabilities of two tokens"),
               "vocab_accept": (vocab_accept, "V itself"),
               "token_id_accept": (token_id_accept, "token id")}

#: (target, draft) root distributions at V = 5 where each shortcut fires and the rule is lossy.
REFUTING_PAIRS = {
    "count_accept": ([Fraction(1, 5)] * 5, [Fraction(1, 10)] * 4 + [Fraction(3, 5)]),
    "argmax_accept": ([Fraction(1, 5)] * 5, [Fraction(3, 5)] + [Fraction(1, 10)] * 4),
    "vocab_accept": ([Fraction(1, 5)] * 5, [Fraction(1, 10)] * 4 + [Fraction(3, 5)]),
    "token_id_accept": ([Fraction(1, 5)] * 5, [Fraction(1, 10)] * 4 + [Fraction(3, 5)]),
}
