"""Where the newer verifiers sit against the bounds: one-step acceptance against the transport
optimum, and the point-mass-draft comparison of block and token verification.

- `one_step_acceptance`: P(the emitted token is a drafted one) of a method at one position, by
  exact enumeration (draft length 1, context-free models p, q).
- `cut_bound`: the transport-LP optimum of any draft-SET law by max-flow/min-cut,
  min over token sets H of p(H) + P(some draft outside H) (SpecTr, arXiv 2310.15141; Hu et al.
  2025, arXiv 2502.18779) — by brute force over all 2^V sets, so it covers draft laws with no
  sorted-prefix shortcut (SpecHub's hub pairs).
- `hub_set_law`: the law of SpecHub's drafted pair {first, second} (arXiv 2411.05289).
- `point_mass_comparison`: token vs block verification with point-mass (q = 1) drafts, exactly.
"""

from __future__ import annotations

import itertools

from ..reference import exact, methods, models
from ..reference.models import _check_positive_int
from ..reference.probability import as_probs
from ..reference.randomness import enumerate_law


def one_step_acceptance(name: str, p, q, num_drafts: int = 2):
    """P(Y is drafted) of built-in method `name` at ONE position (draft length 1), target p and
    draft q [V] (context-free), K = num_drafts paths (ignored by methods without K). Exact for
    Fraction inputs (except spectr, float).

    Raises:
        ValueError / TypeError: unknown method, p or q not distributions, K < 1.
    """
    p, q = as_probs(p, "p"), as_probs(q, "q", None)
    K = _check_positive_int(num_drafts, "num_drafts")
    method = methods.get_compatible(name, draft_length=1, num_paths=K)
    law = exact.iteration_distribution(models.iid(p), models.iid(q), method)
    return sum(prob for tokens, prob in law.items() if len(tokens) == 2)


def cut_bound(p, set_law: dict):
    """min over all token sets H of p(H) + P(S not within H): the best one-step acceptance of any
    valid verifier whose drafted token set S has law `set_law` ({sorted token tuple: prob}).

    Exact (Fractions in, Fractions out); costs 2^V, so V <= 16.

    Raises:
        ValueError: V > 16.
    """
    p = as_probs(p, "p")
    V = len(p)
    if V > 16:
        raise ValueError(f"p: cut_bound enumerates 2^V token sets; V = {V} > 16")
    best = None
    for size in range(V + 1):
        for H in itertools.combinations(range(V), size):
            inside = set(H)
            value = sum((p[t] for t in H), p[0] * 0) + sum(
                (prob for S, prob in set_law.items() if not inside.issuperset(S)), p[0] * 0)
            best = value if best is None or value < best else best
    return best


def hub_set_law(q) -> dict:
    """The law of the SET of SpecHub's two drafts from q: {sorted token tuple: prob}, exactly."""
    from ..reference.verifiers.spechub import hub_pair

    q = as_probs(q, "q")
    return enumerate_law(lambda rand: tuple(sorted(hub_pair(q, rand)))).law


def point_mass_comparison(target, phrase, context=()) -> dict:
    """Token vs block verification of ONE point-mass draft `phrase` (q = one-hot on each drafted
    token, as n-gram / prompt-lookup drafters propose), exactly.

    Returns:
        {"token": law of tau, "block": law of tau, "expected": {name: E[tau]},
         "acceptance_rate": {name: E[tau] / L}} — both laws are {tau: prob}.
    """
    from ..reference import drafters

    phrase = tuple(int(t) for t in phrase)
    L = len(phrase)
    drafter = drafters.point_mass(lambda ctx: phrase, draft_length=L, vocab_size=target.vocab_size)
    out = {"token": None, "block": None, "expected": {}, "acceptance_rate": {}}
    for name, verify in (("token", methods.token(L).verify), ("block", methods.block(L).verify)):
        method = methods.Method(name, drafter, verify, {"draft_length": L})
        law = exact.accepted_length_distribution(target, None, method, context)
        out[name] = law
        out["expected"][name] = sum(tau * prob for tau, prob in law.items())
        out["acceptance_rate"][name] = out["expected"][name] / L
    return out
