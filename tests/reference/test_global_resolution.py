"""Global Resolution (`verispec.reference.verifiers.global_resolution`, registered `global_resolution`):
exactly lossless, its one-step acceptance equals alpha* (exactly in Fractions, against optimal_is's LP
at V = 3..6, against the closed form at V = 1000), proved at V = 2, and two planted bugs that fail."""

from collections import Counter
from fractions import Fraction
from itertools import combinations_with_replacement
from math import factorial

import numpy as np
import pytest

from verispec.formal import prove
from verispec.reference import drafters, methods
from verispec.reference.methods import Method
from verispec.reference.probability import accept_probability, residual
from verispec.reference.verifiers import global_resolution as gr
from verispec.reference.verifiers import importance
from verispec.reference.verifiers.multidraft import top_down
from verispec.testing import LosslessnessError, assert_lossless
from verispec.theory.closed_forms import optimal_multidraft_acceptance


def _rational(rng, V, den=40):
    """A random exact distribution [V] with denominators den (zeros allowed)."""
    return np.array([Fraction(int(c), den) for c in rng.multinomial(den, rng.dirichlet(np.ones(V) * 0.8))],
                    dtype=object)


def _selected_law(found, q, K):
    """The law of the selected token, by enumerating the K i.i.d. drafts' multisets (exact)."""
    law = [0 * q[0]] * len(q)
    for draws in combinations_with_replacement(range(len(q)), K):
        counts = Counter(draws)
        mass = factorial(K) * q[0] ** 0
        for t, c in counts.items():
            mass *= q[t] ** c / factorial(c)
        if mass == 0:
            continue
        probs = found.winner_probabilities(dict(counts), q)
        assert abs(sum(probs) - 1) <= (0 if q.dtype == object else 1e-14) and all(x >= -1e-15 for x in probs)
        for t, x in zip(sorted(counts), probs):
            law[t] += mass * x
    return law


@pytest.mark.parametrize("K", [1, 2, 3, 4])
def test_exact_law_reaches_alpha_star_exactly(K):
    rng = np.random.default_rng(K)
    for V in range(2, 7):
        for _ in range(8):
            p, q = _rational(rng, V), _rational(rng, V)
            found = gr.Resolution(p, q, K)
            # the positions' law, computed from the structure, is the target law of step 1 ...
            assert list(found.law[found.order]) == list(found.targets) and sum(found.law) == 1
            # ... is the law of the token the winner rule selects (every multiset enumerated) ...
            assert _selected_law(found, q, K) == list(found.law)
            # ... and single-draft SD against it accepts exactly alpha*
            accept = sum(min(a, b) for a, b in zip(p, found.law))
            assert accept == optimal_multidraft_acceptance(p, q, K)


@pytest.mark.parametrize("K", [2, 3])
def test_acceptance_equals_the_optimal_is_lp_value(K):
    rng = np.random.default_rng(10 + K)
    for V in range(3, 7):
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        _, lp_law = importance.optimal_selection(p, q, K)  # the selection LP over all drafted sets (HiGHS)
        lp_value = np.minimum(p, lp_law).sum()
        assert abs(np.minimum(p, gr.resolution(p, q, K).law).sum() - lp_value) < 1e-9


@pytest.mark.parametrize("K", [2, 4])
def test_large_vocabulary_float_reaches_the_closed_form(K):
    rng = np.random.default_rng(K)
    V = 1000
    p, q = rng.dirichlet(np.full(V, 0.1)), rng.dirichlet(np.full(V, 0.1))
    found = gr.Resolution(p, q, K)
    assert abs(found.law.sum() - 1) < 1e-12 and found.law.min() >= 0
    assert abs(np.minimum(p, found.law).sum() - optimal_multidraft_acceptance(p, q, K)) < 1e-10
    for _ in range(20):  # the winner law of a drafted multiset is a distribution
        counts = dict(Counter(rng.choice(V, size=K, p=q).tolist()))
        probs = found.winner_probabilities(counts, q)
        assert abs(sum(probs) - 1) < 1e-12 and min(probs) >= -1e-15


def test_float_law_is_the_selected_law():
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(7) * 0.5), rng.dirichlet(np.ones(7) * 0.5)
    found = gr.Resolution(p, q, 3)
    assert np.abs(np.array(_selected_law(found, q, 3), dtype=float) - found.law).max() < 1e-12


def test_registry_method_is_lossless_exact_and_float():
    report = assert_lossless(methods.get("global_resolution", draft_length=1, num_paths=2), families=("iid", "markov"))
    assert report.num_exact > 0 and report.max_tv <= 1e-12
    report = assert_lossless(methods.get("global_resolution", draft_length=2, num_paths=3), families=("iid",),
                             vocab_sizes=(2, 3, 4))
    assert report.num_instances >= 8


def _reads_the_set_not_the_counts(p, q, counts, rand):
    """Planted bug: the winner law is computed as if each drafted token were drafted once."""
    found = gr.resolution(p, q, sum(counts.values()))
    drafted = sorted(counts)
    probs = np.array(found.winner_probabilities({t: 1 for t in drafted}, q), dtype=object if p.dtype == object else float)
    y = drafted[rand.categorical(probs)]
    if rand.bernoulli(accept_probability(p[y], found.law[y])):
        return y
    return rand.categorical(residual(p, found.law))


def test_planted_bug_set_instead_of_counts_is_not_lossless():
    bug = Method("gr_set_bug", drafters.iid_paths(1, 3), top_down(_reads_the_set_not_the_counts, counts=True),
                 {"draft_length": 1, "num_paths": 3}, model_state_only=True)
    with pytest.raises(LosslessnessError):
        assert_lossless(bug, families=("iid",), vocab_sizes=(2, 3))


class _NoRescale(gr.Resolution):
    """Planted bug: a resolution step that forgets to rescale the rest's targets by 1 / (1 - lambda)."""

    def _blend(self, qs, targets, a, b):
        lam, tight, rest = super()._blend(qs, targets, a, b)
        return lam, tight, rest * (1 - lam)


def test_planted_bug_without_rescaling_stays_lossless_but_misses_alpha_star():
    rng = np.random.default_rng(7)
    gaps = []
    for _ in range(30):
        p, q = _rational(rng, 5), _rational(rng, 5)
        found = _NoRescale(p, q, 3)
        assert sum(found.law) == 1  # still a valid selection (its law computed from the positions)
        gaps.append(optimal_multidraft_acceptance(p, q, 3) - sum(min(a, b) for a, b in zip(p, found.law)))
    assert min(gaps) >= 0 and max(gaps) > 0  # the optimality check above catches it


def test_prove_at_v2():
    result = prove("global_resolution", 2, 1, 2, timeout=600)
    assert result.verdict == "proved", result.summary()
    assert result.branch_points > 0 and all(q.result == "unsat" for q in result.queries)


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="num_paths"):
        methods.get("global_resolution", draft_length=2, num_paths=0)
