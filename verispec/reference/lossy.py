"""Closed forms of the lossy verifiers' one-step law: output law, acceptance rate and TV from p.

One step = a chain of L = 1 draft token X ~ q verified against the target p. Each function below
is derived from its paper's rule by hand (not by running the rule), so the exact enumeration of
the rule (`verispec.reference.verifiers.lossy`) can be held to it:

- typical acceptance (Medusa, arXiv 2401.10774): with A = {x : p(x) > min(eps, delta e^{-H(p)})},
  the first token is X when X in A, else a fresh draw from p:  r = q 1_A + (1 - q(A)) p,
  acceptance q(A), TV(r, p) = 1/2 sum_x |q(x) 1_A(x) - q(A) p(x)|.
- static ensemble (DIVERSE, arXiv 2604.07622): speculative sampling against v = w p + (1 - w) q
  has law v:  r = v, acceptance 1 - w TV(p, q), TV(r, p) = (1 - w) TV(p, q).
- fuzzy acceptance (FSD, arXiv 2502.20704): r = q when D(p, q) <= T, else p:  acceptance
  1[D <= T], TV(r, p) = 1[D <= T] TV(p, q).

All three are exact (Fractions) on exact p, q, except where the rule itself compares a float64
quantity (typical's threshold, the js / kl divergences): the comparison is float, the law exact.
"""

from __future__ import annotations

from fractions import Fraction
from typing import NamedTuple

import numpy as np

from . import registry
from .probability import as_probs, is_exact
from .verifiers.lossy import divergence, typical_threshold

__all__ = ["OneStep", "total_variation", "typical_acceptance_step", "static_ensemble_step", "fuzzy_step",
           "one_step"]


class OneStep(NamedTuple):
    """A lossy rule's one-step closed form: its output law [V], its acceptance rate (E[tau] at
    L = 1, so block efficiency 1 + acceptance) and TV(law, p)."""

    law: np.ndarray
    acceptance: object
    tv: object


def total_variation(a, b):
    """1/2 sum |a - b| of two [V] vectors (a Fraction when both are exact)."""
    return sum(abs(x - y) for x, y in zip(a, b)) / 2


def _pair(p, q):
    p, q = as_probs(p, "p"), as_probs(q, "q", len(as_probs(p, "p")))
    if is_exact(p) != is_exact(q):
        raise TypeError("p, q: give both as Fractions or both as floats")
    return p, q


def typical_acceptance_step(p, q, epsilon: float, delta: float) -> OneStep:
    """Medusa's typical acceptance at L = 1: r = q 1_A + (1 - q(A)) p, A = {p > threshold}.

    Args: p, q: target and draft distributions [V] (floats or Fractions). epsilon, delta > 0.
    Raises: ValueError / TypeError: bad distributions, naming p or q.
    """
    p, q = _pair(p, q)
    t = typical_threshold(p, epsilon, delta)
    accepted = np.array([x > t for x in p])  # [V] bool: A
    q_a = sum(q[accepted]) if accepted.any() else 0 * q[0]
    law = np.where(accepted, q, 0 * q) + (1 - q_a) * p
    return OneStep(law, q_a, total_variation(law, p))


def static_ensemble_step(p, q, ensemble_weight) -> OneStep:
    """DIVERSE's static ensemble at L = 1: r = v = w p + (1 - w) q, acceptance 1 - w TV(p, q),
    TV = (1 - w) TV(p, q) (w as the Fraction of its value on exact input)."""
    p, q = _pair(p, q)
    w = Fraction(ensemble_weight) if is_exact(p) else float(ensemble_weight)
    v = w * p + (1 - w) * q  # [V]
    tv_pq = total_variation(p, q)
    return OneStep(v, 1 - w * tv_pq, (1 - w) * tv_pq)


def fuzzy_step(p, q, threshold: float, divergence_kind: str = "js") -> OneStep:
    """FSD at L = 1: r = q if D(p, q) <= threshold else p; acceptance 1[D <= T]; TV 1[D <= T] TV(p, q)."""
    p, q = _pair(p, q)
    accepted = divergence(p, q, divergence_kind) <= threshold
    tv_pq = total_variation(p, q)
    return OneStep(q if accepted else p, int(accepted), tv_pq if accepted else 0 * tv_pq)


def one_step(name: str, p, q, **params) -> OneStep:
    """The closed form of the registered lossy method `name` with its parameters (as
    `verispec.reference.methods.get` takes them; draft_length ignored: one step is L = 1).

    Raises: ValueError: `name` is not a lossy method with a closed form.
    """
    params.pop("draft_length", None)
    if name in registry.REGISTRY:
        params = registry.renamed_params(name, params, registry.spec(name).defaults("reference"))
    forms = {"typical": lambda: typical_acceptance_step(p, q, params["epsilon"], params["delta"]),
             "static_ensemble": lambda: static_ensemble_step(p, q, params["ensemble_weight"]),
             "fsd": lambda: fuzzy_step(p, q, params["divergence_threshold"], params.get("divergence", "js"))}
    if name not in forms:
        raise ValueError(f"name: no one-step closed form for {name!r}; known: {', '.join(forms)}")
    return forms[name]()
