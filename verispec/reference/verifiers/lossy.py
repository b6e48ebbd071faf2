"""Lossy chain verifiers: published rules that trade the target's law for accepted length.

Each is a callable ``verify(target, draft_model, context, draft, rand)`` on the first path of a
chain drafted from q, written as its paper states it; randomness comes only from `rand`, so the
exact enumerator gives their exact law (Fractions on rational models).

- `TypicalAcceptance(epsilon, delta)`: Medusa's typical acceptance (Cai et al. 2024,
  arXiv 2401.10774, Section 2.3.1): accept X_i iff p_i(X_i) > min(epsilon, delta exp(-H(p_i))).
- `StaticEnsemble(ensemble_weight)`: DIVERSE's static ensemble (Wang et al. 2026,
  arXiv 2604.07622): speculative sampling against v = w p + (1 - w) q (transformers'
  ``assistant_ensemble_weight``).
- `FuzzyAcceptance(threshold, divergence)`: Fuzzy Speculative Decoding (Holsman, Huang, Dhingra
  2025, arXiv 2502.20704): accept X_i iff D(p_i, q_i) <= T, whatever X_i is.

Typical and fuzzy acceptance decide deterministically; at the first rejection (and after the
last draft token) they emit one token drawn from the target's own p at that position.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from ..probability import accept_probability, align, is_exact, positive_mass, residual

__all__ = ["TypicalAcceptance", "StaticEnsemble", "FuzzyAcceptance", "typical_threshold", "ensemble",
           "divergence", "DIVERGENCES"]

#: The divergences of `FuzzyAcceptance` (the authors' code: js_div, kl_div, tv_div; natural log).
DIVERGENCES = ("js", "kl", "tv")


def typical_threshold(p, epsilon, delta) -> float:
    """min(epsilon, delta * exp(-H(p))) with H the entropy of p [V] in nats (float64: exp and log)."""
    entropy = -sum(float(x) * math.log(float(x)) for x in p if x > 0)
    return min(epsilon, delta * math.exp(-entropy))


def ensemble(p, q, weight):
    """v = w p + (1 - w) q [V]: exact (w as the Fraction of its value) when p and q are exact."""
    w = Fraction(weight) if is_exact(p) else float(weight)
    return w * p + (1 - w) * q


def divergence(p, q, kind: str):
    """D(p, q) for `kind` in DIVERGENCES: "tv" = sum max(p - q, 0) (exact on exact input), "kl" =
    KL(q || p) (the draft's law against the target's, as the authors' kl_div; inf where q > 0 = p),
    "js" = Jensen-Shannon; kl and js in float64 nats."""
    if kind == "tv":
        return positive_mass(p, q)
    pf, qf = [float(x) for x in p], [float(x) for x in q]
    if kind == "kl":
        return _kl(qf, pf)
    m = [(a + b) / 2 for a, b in zip(pf, qf)]
    return (_kl(pf, m) + _kl(qf, m)) / 2


def _kl(a, b) -> float:
    """KL(a || b) in nats; inf when a puts mass where b has none."""
    if any(x > 0 and y == 0 for x, y in zip(a, b)):
        return math.inf
    return sum(x * math.log(x / y) for x, y in zip(a, b) if x > 0)


def _threshold_chain(accepts, target, context, draft, rand) -> tuple:
    """Accept X_1, X_2, ... while ``accepts(p_i, q_i, X_i)``; then one token ~ p at that position."""
    node = ()
    while draft.counts(node):
        x = draft.tokens(node)[0]
        p, q = align(target.probs(context + node), draft.proposal(node))  # [V], [V]
        if not accepts(p, q, x):
            break
        node = node + (x,)
    return node + (rand.categorical(target.probs(context + node)),)  # the target's own token


@dataclass(frozen=True)
class TypicalAcceptance:
    """Medusa's typical acceptance (arXiv 2401.10774, Section 2.3.1) on a chain.

    Accept X_i iff p_i(X_i) > min(epsilon, delta exp(-H(p_i))); the accepted prefix is followed
    by one token ~ p at the stop position. Medusa samples that token from the target's head (its
    code may first filter or take the argmax); here it is the target's p, so the acceptance rule
    is the only source of loss. A greedy target (one-hot p) accepts exactly its argmax: lossless.
    Medusa's defaults: epsilon = 0.09, delta = 0.3 (posterior_threshold, posterior_alpha).
    """

    epsilon: float
    delta: float

    def __call__(self, target, draft_model, context, draft, rand) -> tuple:
        return _threshold_chain(lambda p, q, x: p[x] > typical_threshold(p, self.epsilon, self.delta),
                                target, context, draft, rand)


@dataclass(frozen=True)
class StaticEnsemble:
    """DIVERSE's static ensemble verification (arXiv 2604.07622) on a chain.

    Speculative sampling (arXiv 2211.17192, Algorithm 1) against v_i = w p_i + (1 - w) q_i: accept
    X_i with min(1, v_i(X_i) / q_i(X_i)); at the first rejection emit Y ~ norm(max(v_i - q_i, 0))
    (= norm(max(p_i - q_i, 0))); if all are accepted, the bonus token ~ p_{L+1}. Each position's
    token has law v_i: one step is (1 - w) TV(p, q) from p. w = 1 is token verification.
    """

    ensemble_weight: float

    def __call__(self, target, draft_model, context, draft, rand) -> tuple:
        node = ()
        while draft.counts(node):
            x = draft.tokens(node)[0]
            p, q = align(target.probs(context + node), draft.proposal(node))  # [V], [V]
            v = ensemble(p, q, self.ensemble_weight)  # [V]
            if not rand.bernoulli(accept_probability(v[x], q[x])):
                return node + (rand.categorical(residual(v, q)),)  # correction token
            node = node + (x,)
        return node + (rand.categorical(target.probs(context + node)),)  # bonus token


@dataclass(frozen=True)
class FuzzyAcceptance:
    """Fuzzy Speculative Decoding (arXiv 2502.20704; the authors' code) on a chain.

    Accept X_i iff D(p_i, q_i) <= threshold (D = `divergence(p, q, kind)`), independently of X_i;
    at the first rejection emit one token ~ p_i. One step's law is q when D <= T, else p.
    """

    threshold: float
    divergence: str = "js"

    def __call__(self, target, draft_model, context, draft, rand) -> tuple:
        return _threshold_chain(lambda p, q, x: divergence(p, q, self.divergence) <= self.threshold,
                                target, context, draft, rand)
