"""Global Resolution (`verispec.reference.verifiers.global_resolution`, registered `global_resolution`):
exactly lossless, its one-step acceptance equals alpha* (exactly in Fractions, against optimal_is's LP
at V = 3..6, against the closed form at V = 1000 and V = 151,936), proved at V = 2, and planted bugs that fail."""

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


def test_tie_runs_share_one_position_law_exactly():
    # tokens 0-3 have one (p, q), so one target ratio: one run, each token with the run's law per unit q
    q = np.array([Fraction(1, 12)] * 4 + [Fraction(2, 12), Fraction(6, 12)], dtype=object)
    p = np.array([Fraction(1, 20)] * 4 + [Fraction(8, 20), Fraction(8, 20)], dtype=object)
    for K in (2, 3):
        found = gr.Resolution(p, q, K)
        assert len(found.runs) - 1 <= 3 and len(set(found.run_of[:4].tolist())) == 1
        shapes = {tuple((a, b, d / q[t]) for a, b, d in found.pieces(t, q[t])) for t in range(4)}
        assert len(shapes) == 1
        assert list(found.law[found.order]) == list(found.targets) and _selected_law(found, q, K) == list(found.law)
        assert sum(min(a, b) for a, b in zip(p, found.law)) == optimal_multidraft_acceptance(p, q, K)


def _multisets(q, K):
    drafted = [t for t in range(len(q)) if q[t] > 0]
    return [dict(Counter(draws)) for draws in combinations_with_replacement(drafted, K)]


@pytest.mark.parametrize("K", [2, 3])
def test_float_resolution_matches_the_exact_one(K):
    """The float64 paths (vectorised targets, tie runs within a few ulps, the winner law as prefix sums
    over nested pieces) give the exact construction's law and winner law to 1e-12."""
    rng = np.random.default_rng(20 + K)
    for V in range(2, 7):
        for _ in range(6):
            p, q = _rational(rng, V), _rational(rng, V)
            exact, fast = gr.Resolution(p, q, K), gr.Resolution(p.astype(float), q.astype(float), K)
            assert np.abs(exact.law.astype(float) - fast.law).max() <= 1e-12
            for counts in _multisets(q, K):
                want = np.array(exact.winner_probabilities(counts, q), dtype=float)
                assert np.abs(np.array(fast.winner_probabilities(counts, q.astype(float))) - want).max() <= 1e-12


class _InnermostFirst(gr.Resolution):
    """Planted bug: pieces handed over outermost first, so the float64 winner law's prefix sums run
    from the innermost piece (the exact path sums the covering pieces and does not notice)."""

    def pieces(self, token, q_token):
        out = super().pieces(token, q_token)
        blends = len(out) - (self.run_leaf[self.run_of[token]] is not None)
        return out[:blends][::-1] + out[blends:]


def test_planted_bug_prefix_sums_from_the_innermost_piece_is_caught():
    rng = np.random.default_rng(23)
    worst = 0.0
    for _ in range(20):
        p, q = _rational(rng, 6), _rational(rng, 6)
        exact, bug = gr.Resolution(p, q, 3), _InnermostFirst(p.astype(float), q.astype(float), 3)
        for counts in _multisets(q, 3):
            want = np.array(exact.winner_probabilities(counts, q), dtype=float)
            worst = max(worst, np.abs(np.array(bug.winner_probabilities(counts, q.astype(float))) - want).max())
    assert worst > 1e-3  # the comparison above would fail


def test_planted_bug_rest_map_without_the_blend_is_caught(monkeypatch):
    """Planted bug: the float64 path's rest targets forget the blended part (t / (1 - lambda) instead
    of (t - lambda mean q) / (1 - lambda)); the exact path does not use the map and does not notice."""
    monkeypatch.setattr(gr, "rest_map", lambda A, B, lam, mean: (A / (1 - lam), B / (1 - lam)))
    rng = np.random.default_rng(24)
    worst = 0.0
    for _ in range(20):
        p, q = _rational(rng, 6), _rational(rng, 6)
        exact, bug = gr.Resolution(p, q, 3), gr.Resolution(p.astype(float), q.astype(float), 3)
        worst = max(worst, np.abs(exact.law.astype(float) - bug.law).max())
    assert worst > 1e-3  # test_float_resolution_matches_the_exact_one would fail


def test_real_vocabulary_size_peaked_rows():
    """V = 151,936 (the real pair's vocabulary), peaked rows from logits on a 1/32 grid (low-precision
    logits repeat their differences, hence their p/q ratios, as the real pair's bf16 ones do): alpha*
    from the closed form to 1e-10, the winner law of drafted multisets a distribution."""
    rng = np.random.default_rng(0)
    V = 151_936

    def logits():
        z = rng.standard_normal(V) * 2.0
        z[:50] += 8.0
        return z

    def softmax(z):
        e = np.exp(z - z.max())
        return e / e.sum()

    target, other = logits(), logits()
    p, q = softmax(np.round(target * 32) / 32), softmax(np.round((0.7 * target + 0.3 * other) * 32) / 32)
    found = gr.Resolution(p, q, 2)
    assert abs(found.law.sum() - 1) < 1e-12 and found.law.min() >= 0
    assert len(found.runs) - 1 < V // 10
    assert abs(np.minimum(p, found.law).sum() - optimal_multidraft_acceptance(p, q, 2)) < 1e-10
    for _ in range(10):
        counts = dict(Counter(rng.choice(V, size=2, p=q).tolist()))
        probs = found.winner_probabilities(counts, q)
        assert abs(sum(probs) - 1) < 1e-12 and min(probs) >= -1e-15


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
