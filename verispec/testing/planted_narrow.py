"""Planted bugs that are wrong only on a narrow or measure-zero part of the probability simplex.

Each is token-level speculative sampling (Leviathan et al. 2023, arXiv 2211.17192) with one special
case mishandled. The default `assert_lossless` sweep (seeded rational models with denominators 64,
at T = 1, 0, 0.5) passes all three: its instances never land on the bad set. `verispec prove`
(`verispec.formal.prove`) refutes each with a counterexample pair, because it covers every point of
the closed simplex, the boundary and the ties included.

- ``tie_half``: accepts with probability 1/2 when p(x) == q(x) exactly. At V = 2 this is lossless
  (p(x) = q(x) forces p = q there); at V = 3 it is refuted, e.g. p = (1/2, 1/2, 0), q = (1/2, 0, 1/2).
- ``tiny_q_accept``: accepts outright when q(x) < 2**-20 (a kernel that skips the ratio to avoid
  dividing by a tiny number): wrong whenever p(x) < q(x) < 2**-20.
- ``near_tie_accept``: accepts outright when p(x) >= q(x) - 1e-9 (a round-off tolerance):
  wrong on the band q(x) - 1e-9 <= p(x) < q(x).
- ``point_mass_draft_trusted``: a one-hot draft (q(x) = 1) is accepted whenever p(x) > 0: wrong
  when the draft is a point mass and the target is not (the sweep's greedy instances make both
  greedy at once).

``tie_half`` is the exception to "the sweep passes": the sweep's rational models (multiples of 1/64)
tie often enough at V = 3 to catch it. It is here because it shows what a proof at V = 2 means: it is
lossless there, and only V = 3 refutes it.
"""

from __future__ import annotations

from fractions import Fraction

from ..reference import drafters
from ..reference.methods import Method
from ..reference.models import check_positive_int
from ..reference.probability import accept_probability, align, residual

__all__ = ["BUGS", "SWEEP_PASSES", "tie_half", "tiny_q_accept", "near_tie_accept", "point_mass_draft_trusted"]

#: The draft probability below which `tiny_q_accept` skips the rejection test.
TINY = Fraction(1, 2 ** 20)

#: The tolerance of `near_tie_accept`'s comparison.
NEAR = 1e-9


def _token_rule(accept, correction):
    def verify(target, draft_model, context, draft, rand):
        node = ()
        while draft.counts(node):
            x = draft.tokens(node)[0]
            p, q = align(target.probs(context + node), draft.proposal(node))  # [V], [V]
            if not accept(p, q, x, rand):
                return node + (rand.categorical(correction(p, q)),)  # correction token
            node = node + (x,)
        return node + (rand.categorical(target.probs(context + node)),)  # bonus token

    return verify


def _method(name, verify, draft_length):
    L = check_positive_int(draft_length, "draft_length")
    return Method(f"planted.{name}", drafters.chain(L), verify, {"draft_length": L}, model_state_only=True)


def _standard_accept(p, q, x, rand):
    return rand.bernoulli(accept_probability(p[x], q[x]))


def _tie_half_accept(p, q, x, rand):
    if p[x] == q[x]:
        return rand.bernoulli(Fraction(1, 2))  # BUG: a tie is an acceptance with probability 1
    return _standard_accept(p, q, x, rand)


def tie_half(draft_length: int) -> Method:
    """Token verification that accepts a drafted token with probability 1/2 on an exact tie
    p(x) == q(x) (should be 1). Lossless at V = 2, lossy from V = 3."""
    return _method("tie_half", _token_rule(_tie_half_accept, residual), draft_length)


def _tiny_q_accept(p, q, x, rand):
    if q[x] < TINY:
        return True  # BUG: skips the test p(x)/q(x) when q(x) is tiny
    return _standard_accept(p, q, x, rand)


def tiny_q_accept(draft_length: int) -> Method:
    """Token verification that accepts a drafted token outright when q(x) < 2**-20."""
    return _method("tiny_q_accept", _token_rule(_tiny_q_accept, residual), draft_length)


def _near_tie_accept(p, q, x, rand):
    if p[x] >= q[x] - NEAR:
        return True  # BUG: a tolerance meant for round-off accepts when q(x) - 1e-9 <= p(x) < q(x)
    return _standard_accept(p, q, x, rand)


def near_tie_accept(draft_length: int) -> Method:
    """Token verification that accepts outright when p(x) >= q(x) - 1e-9 (a round-off tolerance
    in the comparison): wrong on the band q(x) - 1e-9 <= p(x) < q(x)."""
    return _method("near_tie_accept", _token_rule(_near_tie_accept, residual), draft_length)


def _point_mass_accept(p, q, x, rand):
    if q[x] == 1:
        return p[x] > 0  # BUG: a greedy (one-hot) draft is kept whenever the target allows it
    return _standard_accept(p, q, x, rand)


def point_mass_draft_trusted(draft_length: int) -> Method:
    """Token verification that, when the draft is a point mass (q(x) = 1, e.g. a greedy draft),
    accepts x whenever p(x) > 0 instead of with probability p(x): wrong when the draft has zeros
    everywhere but x and the target does not."""
    return _method("point_mass_draft_trusted", _token_rule(_point_mass_accept, residual), draft_length)


#: {name: factory(draft_length) -> Method}.
BUGS = {"tie_half": tie_half, "tiny_q_accept": tiny_q_accept, "near_tie_accept": near_tie_accept,
        "point_mass_draft_trusted": point_mass_draft_trusted}

#: The bugs the default `assert_lossless` sweep passes (only a proof refutes them).
SWEEP_PASSES = frozenset(BUGS) - {"tie_half"}
