"""The lossy reference rules (typical, static_ensemble, fsd): their exact law against the closed forms
derived by hand in `verispec.reference.lossy`, in Fractions where the rule is rational."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pytest

from verispec.reference import exact, lossy, methods, models
from verispec.reference.methods import Method
from verispec.reference.probability import to_rational
from verispec.reference.verifiers.lossy import StaticEnsemble, divergence, typical_threshold

SEEDS = range(12)


def _pair(seed: int, V: int = 4, rational: bool = True):
    """A seeded target/draft pair [V] (Dirichlet(0.7): some near-zero entries; rational: k/48)."""
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(0.7 * np.ones(V)), rng.dirichlet(0.7 * np.ones(V))
    return (to_rational(p, 48), to_rational(q, 48)) if rational else (p, q)


def _one_step(method, p, q):
    """(law [V] of the first token, block efficiency) by exact enumeration at L = 1."""
    target, draft = models.iid(p), models.iid(q)
    law = exact.output_distribution(target, draft, method, (), 1)
    return np.array([law.get((x,), 0 * p[0]) for x in range(len(p))], dtype=p.dtype), \
        exact.block_efficiency(target, draft, method)


RATIONAL_CASES = [("static_ensemble", {"ensemble_weight": Fraction(1, 3)}),
                  ("static_ensemble", {"ensemble_weight": Fraction(3, 4)}),
                  ("fsd", {"divergence_threshold": Fraction(1, 4), "divergence": "tv"}),
                  ("fsd", {"divergence_threshold": 0.05, "divergence": "js"}),
                  ("fsd", {"divergence_threshold": 0.2, "divergence": "kl"}),
                  ("typical", {"epsilon": 0.09, "delta": 0.3}),
                  ("typical", {"epsilon": 0.3, "delta": 0.6})]


@pytest.mark.parametrize("name, params", RATIONAL_CASES)
def test_exact_law_tv_and_efficiency_equal_the_closed_form_in_fractions(name, params):
    method = methods.get(name, draft_length=1, **params)
    assert method.lossy
    seen_lossy = False
    for seed in SEEDS:
        p, q = _pair(seed)
        law, efficiency = _one_step(method, p, q)
        form = lossy.one_step(name, p, q, **params)
        assert list(law) == list(form.law), (seed, law, form.law)  # Fractions: equal, not close
        assert lossy.total_variation(law, p) == form.tv
        assert efficiency == 1 + form.acceptance
        seen_lossy |= form.tv > 0
    assert seen_lossy, "the seeds never make the rule lossy: the test would not see a wrong closed form"


def test_static_ensemble_tv_is_one_minus_w_times_tv_pq():
    for seed in SEEDS:
        p, q = _pair(seed)
        for w in (Fraction(0), Fraction(1, 5), Fraction(1, 2), Fraction(1)):
            law, efficiency = _one_step(methods.get("static_ensemble", draft_length=1, ensemble_weight=w), p, q)
            tv_pq = lossy.total_variation(p, q)
            assert lossy.total_variation(law, p) == (1 - w) * tv_pq
            assert efficiency == 2 - w * tv_pq  # 1 + acceptance, acceptance = 1 - w TV(p, q)


@pytest.mark.parametrize("name, params", [("typical", {"epsilon": 0.09, "delta": 0.3}),
                                          ("typical", {"epsilon": 0.2, "delta": 0.5}),
                                          ("fsd", {"divergence_threshold": 0.1, "divergence": "js"}),
                                          ("static_ensemble", {"ensemble_weight": 0.3})])
def test_float64_tv_matches_the_closed_form_to_1e_12(name, params):
    for seed in SEEDS:
        p, q = _pair(seed, V=5, rational=False)
        law, efficiency = _one_step(methods.get(name, draft_length=1, **params), p, q)
        form = lossy.one_step(name, p, q, **params)
        assert abs(lossy.total_variation(law, p) - form.tv) <= 1e-12
        assert abs(efficiency - 1 - form.acceptance) <= 1e-12


def test_typical_threshold_and_divergences_by_hand():
    uniform = [Fraction(1, 4)] * 4
    assert typical_threshold(uniform, 0.09, 0.3) == pytest.approx(min(0.09, 0.3 / 4))  # e^-ln 4 = 1/4
    p, q = [Fraction(1, 2), Fraction(1, 2), 0], [Fraction(1, 4), Fraction(1, 4), Fraction(1, 2)]
    assert divergence(np.array(p, dtype=object), np.array(q, dtype=object), "tv") == Fraction(1, 2)
    assert divergence(np.array(p), np.array(q), "kl") == float("inf")  # q puts mass where p has none
    js = divergence(np.array(p, dtype=float), np.array(q, dtype=float), "js")
    assert js == pytest.approx(0.5 * (np.log(4 / 3) + 0.5 * np.log(2 / 3) + 0.5 * np.log(2)), abs=1e-15)


def test_typical_acceptance_is_lossless_for_a_greedy_target_and_lossy_otherwise():
    method = methods.get("typical", draft_length=2)
    base, draft = models.random_tree(3, 5, rational=True), models.random_tree(3, 6, rational=True)
    greedy = models.temperature(base, 0)
    assert exact.total_variation(exact.output_distribution(greedy, draft, method, (), 3),
                                 exact.target_distribution(greedy, (), 3)) == 0
    assert exact.total_variation(exact.output_distribution(base, draft, method, (), 3),
                                 exact.target_distribution(base, (), 3)) > 0


def test_static_ensemble_at_w_1_is_token_verification():
    target, draft = models.random_tree(3, 1, rational=True), models.random_tree(3, 2, rational=True)
    ensemble = exact.output_distribution(target, draft, methods.get("static_ensemble", draft_length=2,
                                                                    ensemble_weight=1), (), 3)
    token = exact.output_distribution(target, draft, methods.get("token", draft_length=2), (), 3)
    assert ensemble == token


@dataclass(frozen=True)
class _SwappedWeight(StaticEnsemble):
    """Planted bug: the ensemble weight on the draft, v = (1 - w) p + w q."""

    def __call__(self, target, draft_model, context, draft, rand):
        return StaticEnsemble(1 - self.ensemble_weight)(target, draft_model, context, draft, rand)


def test_a_planted_swapped_weight_breaks_the_closed_form():
    w = Fraction(1, 3)
    good = methods.get("static_ensemble", draft_length=1, ensemble_weight=w)
    planted = Method("swapped", good.draft, _SwappedWeight(w), lossy=True)
    p, q = _pair(0)
    law, _ = _one_step(planted, p, q)
    assert list(law) != list(lossy.one_step("static_ensemble", p, q, ensemble_weight=w).law)


def test_chain_rules_keep_their_declared_lossy_flag_and_draft_length():
    for name in methods.lossy_names():
        method = methods.get(name, draft_length=3)
        assert method.lossy and method.draft_length == 3 and name not in methods.names()
    assert not methods.get("token", draft_length=2).lossy


@pytest.mark.parametrize("call, exc, match", [
    (lambda: methods.get("typical", draft_length=1, epsilon=0), ValueError, "epsilon"),
    (lambda: methods.get("typical", draft_length=1, delta="x"), TypeError, "delta"),
    (lambda: methods.get("static_ensemble", draft_length=1, ensemble_weight=1.5), ValueError, "ensemble_weight"),
    (lambda: methods.get("fsd", draft_length=1, divergence="hellinger"), ValueError, "divergence"),
    (lambda: methods.get("fsd", draft_length=0), ValueError, "draft_length"),
    (lambda: Method("mine", methods.get("token", draft_length=1).draft, methods.get("token", draft_length=1).verify,
                    lossy="yes"), TypeError, "lossy"),
    (lambda: lossy.one_step("token", [1.0], [1.0]), ValueError, "name"),
])
def test_bad_parameters_are_named(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_a_draft_vocabulary_keeps_the_lossy_declaration():
    from verispec.reference.draftvocab import draft_vocab

    assert draft_vocab(methods.get("static_ensemble", draft_length=2), [0, 1]).lossy
    assert not draft_vocab(methods.get("token", draft_length=2), [0, 1]).lossy
