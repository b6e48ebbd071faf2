"""Every built-in method is lossless, by exact enumeration of the whole draft-verify loop.

The joint law of the first N = L + 2 emitted tokens (at least two iterations) must equal the
target's joint law: TV <= 1e-12 in float64, and TV == 0 exactly (the laws are equal dicts of
Fractions) for rational models with every method but spectr (whose rho is a float bisection).
Instances are random toy pairs (V 2..4, L 1..3, K 1..3, temperatures 0/0.5/1/2 in float64 and
0/1 in rational arithmetic, nonempty contexts, zeros from low concentration and coarse rational
rounding, draft == target, drafts at T = 0); hypothesis only draws integers, so every model is
seeded from drawn seeds. Explicit examples pin the extreme values of V, L, K and T.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given

from verispec.reference import drafters, exact, methods, models
from verispec.reference.randomness import law_is_exact

from ._instances import (EXACT_METHODS, MAX_BRANCHES, Spec, build_method, build_models, law_sum,
                         specs)

TOLERANCE = 1e-12

# Explicit instances so that the extreme values occur for every method whatever hypothesis draws:
# V = 4 with K = 3, L = 3 with K = 3, K = 1, target and draft at T = 0, nonempty contexts.
FLOAT_EXAMPLES = [
    Spec(V=4, L=1, K=3, family="iid", target_seed=1, draft_seed=2, target_T=0, draft_T=2,
         context=(3,)),
    Spec(V=2, L=3, K=3, family="iid", target_seed=3, draft_seed=4, target_T=0.5, draft_T=0,
         context=(1, 0)),
    Spec(V=3, L=2, K=2, family="markov", target_seed=5, draft_seed=6, concentration=0.3,
         target_T=2, draft_T=1, overlap=0.5, context=(2, 0, 2)),
    Spec(V=2, L=2, K=1, family="tree", target_seed=7, draft_seed=8, target_T=1, draft_T=0.5),
]
EXACT_EXAMPLES = [
    Spec(V=4, L=1, K=3, family="iid", target_seed=1, draft_seed=2, rational=True, denominator=16,
         target_T=0, draft_T=1, context=(3,)),
    Spec(V=2, L=3, K=3, family="iid", target_seed=3, draft_seed=4, rational=True, target_T=1,
         draft_T=0, context=(1, 0)),
    Spec(V=3, L=2, K=2, family="markov", target_seed=5, draft_seed=6, concentration=0.3,
         rational=True, denominator=8, overlap=Fraction(1, 2), context=(2, 0, 2)),
    Spec(V=2, L=2, K=1, family="tree", target_seed=7, draft_seed=8, rational=True,
         target_T=1, draft_T=1, overlap=Fraction(0)),
]


def _laws(name: str, spec: Spec):
    target, draft = build_models(spec)
    method = build_method(name, spec)
    result = exact.output_enumeration(target, draft, method, spec.context, spec.num_tokens,
                                      max_branches=MAX_BRANCHES)
    reference = exact.target_distribution(target, spec.context, spec.num_tokens)
    return target, draft, result, reference


def _check_outcomes(law: dict, spec: Spec) -> None:
    for outcome in law:
        assert isinstance(outcome, tuple) and len(outcome) == spec.num_tokens
        assert all(isinstance(t, int) and 0 <= t < spec.V for t in outcome)


def _float_test(name):
    @given(spec=specs(name=name, rational=False))
    def run(spec):
        target, draft, result, reference = _laws(name, spec)
        _check_outcomes(result.law, spec)
        assert abs(law_sum(result.law) - 1) <= TOLERANCE
        tv = exact.total_variation(result.law, reference)
        assert tv <= TOLERANCE, f"{name}: TV {tv!r} on {spec} ({target!r} vs {draft!r})"

    for spec in FLOAT_EXAMPLES:
        run = example(spec=spec)(run)
    return run


def _exact_test(name):
    @given(spec=specs(name=name, rational=True))
    def run(spec):
        target, draft, result, reference = _laws(name, spec)
        assert target.exact and draft.exact
        assert law_is_exact(result.law) and law_is_exact(reference)
        _check_outcomes(result.law, spec)
        assert law_sum(result.law) == 1
        assert exact.total_variation(result.law, reference) == 0, f"{name} on {spec}"
        # Stronger than TV == 0: the very same outcomes with the very same Fractions.
        assert result.law == reference

    for spec in EXACT_EXAMPLES:
        run = example(spec=spec)(run)
    return run


_FLOAT_TESTS = {name: _float_test(name) for name in methods.names()}
_EXACT_TESTS = {name: _exact_test(name) for name in EXACT_METHODS}


@pytest.mark.parametrize("name", methods.names())
def test_lossless_float64(name):
    """TV(loop law, target law) <= 1e-12 over N = L + 2 tokens, float64 models."""
    _FLOAT_TESTS[name]()


@pytest.mark.parametrize("name", EXACT_METHODS)
def test_lossless_exact(name):
    """The loop law equals the target law exactly (Fractions) for rational models."""
    _EXACT_TESTS[name]()


def test_spectr_is_float_only_but_lossless_on_rational_models():
    """spectr reads rational models through float64 (bisection for rho): its law is float, and
    still within 1e-12 of the exact target law."""
    spec = EXACT_EXAMPLES[2]
    target, draft, result, reference = _laws("spectr", spec)
    assert not law_is_exact(result.law)
    assert exact.total_variation(result.law, reference) <= TOLERANCE


def test_loop_law_is_nontrivial():
    """The instances are not degenerate: the drafts really get rejected (E[tau] < L) and accepted
    (E[tau] > 0) on an example pair, so equality with the target law says something."""
    target, draft = build_models(EXACT_EXAMPLES[1])
    tau = exact.expected_accepted_length(target, draft, methods.get("rrs", draft_length=3, num_paths=3),
                                         (1, 0))
    assert 0 < tau < 3


def _always_accept(target, draft_model, context, draft, rand):
    """A planted bug: accept the whole first path, then a bonus token from the target."""
    path = draft.paths[0]
    return path + (rand.categorical(target.probs(context + path)),)


def _residual_is_p(target, draft_model, context, draft, rand):
    """A planted bug: token verification that corrects from p instead of norm(max(p - q, 0))."""
    node = ()
    while draft.counts(node):
        x = draft.tokens(node)[0]
        p, q = target.probs(context + node), draft.proposal(node)
        if not rand.bernoulli(min(1, p[x] / q[x])):
            return node + (rand.categorical(p),)
        node = node + (x,)
    return node + (rand.categorical(target.probs(context + node)),)


@pytest.mark.parametrize("verify", [_always_accept, _residual_is_p])
def test_lossless_check_catches_planted_bugs(verify):
    """The same comparison flags a broken rule: TV is clearly positive (and exact)."""
    q = [Fraction(1, 3), Fraction(2, 3)]
    p = [Fraction(2, 3), Fraction(1, 3)]
    target, draft = models.iid(p), models.iid(q)
    broken = methods.Method("broken", drafters.chain(2), verify)
    law = exact.output_distribution(target, draft, broken, (), 3)
    tv = exact.total_variation(law, exact.target_distribution(target, (), 3))
    assert isinstance(tv, Fraction) and tv > Fraction(1, 100)


def test_float_and_exact_laws_agree():
    """The float64 run of a rational instance gives the exact law up to round-off (one rule, two
    number systems)."""
    spec = EXACT_EXAMPLES[2]
    target, draft = build_models(spec)
    float_target = models.temperature(models.markov(np.asarray(target.base.initial, dtype=float),
                                                    np.asarray(target.base.transition, dtype=float)), 1)
    method = build_method("traversal", spec)
    exact_law = exact.output_distribution(target, draft, method, spec.context, spec.num_tokens)
    mixed_law = exact.output_distribution(float_target, draft, method, spec.context, spec.num_tokens)
    assert not law_is_exact(mixed_law)
    assert set(exact_law) == set(mixed_law)
    assert max(abs(float(exact_law[k]) - mixed_law[k]) for k in exact_law) <= TOLERANCE


@pytest.mark.parametrize("family, max_iterations", [("iid", 1), ("markov", 4)])
@pytest.mark.parametrize("name", ["block", "gbv", "rrsw"])
def test_state_memoisation_is_sound(family, max_iterations, name):
    """exact shares an iteration law between prefixes with the same model state: at most one law
    for i.i.d. models and V + 1 for Markov ones, and the same law as enumerating every prefix."""
    spec = Spec(V=3, L=2, K=2, family=family, target_seed=21, draft_seed=22, concentration=0.5,
                rational=True, denominator=16, draft_T=0 if name == "block" else 1, context=(2,))
    target, draft = build_models(spec)
    method = build_method(name, spec)
    shared = exact.output_enumeration(target, draft, method, spec.context, spec.num_tokens)
    unshared_method = methods.Method(method.name, method.draft, method.verify, method.params,
                                     model_state_only=False)
    unshared = exact.output_enumeration(target, draft, unshared_method, spec.context, spec.num_tokens)
    assert shared.num_iterations <= max_iterations < unshared.num_iterations
    assert shared.law == unshared.law == exact.target_distribution(target, spec.context, spec.num_tokens)
