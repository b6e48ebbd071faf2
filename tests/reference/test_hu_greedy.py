"""hu_greedy: Hu et al.'s greedy draft sampling + its verifier (arXiv 2502.18779).

- Lossless, exactly: the registry method passes `assert_lossless` (Fraction laws, TV == 0) at
  K = 2 and 3, L = 1 and 2; the planted `hu_greedy_soft_q` (verified against the draft model's q
  instead of q_last) fails the same sweep.
- Reaches its bound: on random Fraction pairs the exact one-step acceptance P(Y drafted) equals,
  in Fractions, (a) the transport dual min_H p(H) + P(some draft outside H) by brute force over
  all 2^V sets, with the draft-set law enumerated from the drafter, and (b) the closed form
  `closed_forms.greedy_draft_acceptance`. A lossless but weaker rule on the same drafts (naive
  selection, Y ~ p) falls below it: the equality has teeth.
- The drafter: greedy tokens by rank (ties to the lower id), the sampled token's law q_last, fewer
  drafts when q has few positive tokens.
- `verispec prove hu_greedy` at V = 2, L = 1, K = 2: proved; the planted bug: refuted.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from verispec.reference import drafters, exact, methods, models
from verispec.reference.randomness import enumerate_law
from verispec.reference.verifiers.hu_greedy import hu_greedy_step
from verispec.reference.verifiers.multidraft import nss_step, top_down
from verispec.testing import LosslessnessError, assert_lossless, planted
from verispec.theory import closed_forms, frontier

CHEAP = dict(families=("iid", "markov"))


def _rational(rng, V, zeros=False):
    w = rng.integers(0 if zeros else 1, 6, size=V)
    if w.sum() == 0:
        w[0] = 1
    return [Fraction(int(x), int(w.sum())) for x in w]


@pytest.mark.parametrize("L,K", [(1, 2), (2, 2), (1, 3)])
def test_hu_greedy_is_lossless_exactly(L, K):
    report = assert_lossless(methods.get("hu_greedy", draft_length=L, num_paths=K), **CHEAP)
    assert report.num_exact > 0 and report.max_tv <= 1e-12


def test_planted_soft_q_bug_fails_the_lossless_check():
    with pytest.raises(LosslessnessError) as info:
        assert_lossless(planted.BUGS["hu_greedy_soft_q"](1), **CHEAP)
    assert info.value.exact and info.value.tv > 0
    assert info.value.instance.vocab_size == 2  # shows at the smallest size, as its doc says


def _set_law(q, K):
    """The law of the drafted token SET of the reference drafter at one position."""
    drafter = drafters.greedy_draft_paths(1, K)
    return enumerate_law(lambda rand: drafter(models.iid(q), (), rand).child_set(())).law


def test_acceptance_equals_the_transport_optimum_of_its_draft_law():
    rng = np.random.default_rng(2502)
    checked = 0
    for trial in range(24):
        V, K = int(rng.integers(2, 6)), int(rng.integers(1, 5))
        p, q = _rational(rng, V, zeros=trial % 3 == 0), _rational(rng, V, zeros=trial % 4 == 0)
        accepted = frontier.one_step_acceptance("hu_greedy", p, q, K)
        dual = frontier.cut_bound(np.array(p, dtype=object), _set_law(q, K))
        closed = closed_forms.greedy_draft_acceptance(p, q, K)
        assert isinstance(accepted, Fraction) and accepted == dual == closed, (p, q, K)
        checked += accepted < 1
    assert checked >= 8  # most instances leave room below 1


def test_a_weaker_lossless_rule_on_the_same_drafts_falls_below_the_bound():
    """Planted: naive selection (Y ~ p, kept if drafted) on the greedy drafts is lossless, and its
    acceptance sum over drafted y of p(y) misses the bound wherever the sampled draft can be rejected."""
    weak = methods.Method("planted.greedy_drafts_nss", drafters.greedy_draft_paths(1, 2), top_down(nss_step, ordered=False),
                          {"draft_length": 1, "num_paths": 2})
    p = [Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)]
    q = [Fraction(1, 6), Fraction(1, 2), Fraction(1, 3)]
    assert_lossless(weak, target=models.iid(p), draft=models.iid(q), exact=True)
    law = exact.iteration_distribution(models.iid(p), models.iid(q), weak)
    weak_acceptance = sum(prob for tokens, prob in law.items() if len(tokens) == 2)
    assert closed_forms.greedy_draft_acceptance(p, q, 2) == Fraction(5, 6)  # 1/3 + 1/3 + 1/6
    assert weak_acceptance < Fraction(5, 6) == frontier.one_step_acceptance("hu_greedy", p, q, 2)


def test_greedy_draft_picks_the_top_tokens_and_records_the_law_of_the_sampled_one():
    q = np.array([Fraction(1, 4), Fraction(3, 8), Fraction(1, 4), Fraction(1, 8), Fraction(0)], dtype=object)
    law = enumerate_law(lambda rand: drafters.greedy_draft(q, 3, rand)[0]).law
    # greedy: 1 (3/8), then 0 (1/4, ties to the lower id); the last from {2, 3} in ratio 2 : 1
    assert law == {(1, 0, 2): Fraction(2, 3), (1, 0, 3): Fraction(1, 3)}
    _, q_last = drafters.greedy_draft(q, 3, _FirstToken())
    assert list(q_last) == [0, 0, Fraction(2, 3), Fraction(1, 3), 0]
    # q with two positive tokens and K = 4: one greedy token, the other drawn (a point mass)
    two = np.array([Fraction(1, 3), 0, Fraction(2, 3)], dtype=object)
    assert enumerate_law(lambda rand: drafters.greedy_draft(two, 4, rand)[0]).law == {(2, 0): 1}
    # K = 1: a plain draw from q
    assert enumerate_law(lambda rand: drafters.greedy_draft(q, 1, rand)[0]).law == {
        (t,): q[t] for t in range(4)}


class _FirstToken:
    def categorical(self, probs):
        return next(t for t in range(len(probs)) if probs[t] > 0)


def test_hu_greedy_step_accepts_a_greedy_draft_through_the_residual():
    p = np.array([Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)], dtype=object)
    q_last = np.array([Fraction(1, 3), Fraction(0), Fraction(2, 3)], dtype=object)
    law = enumerate_law(lambda rand: hu_greedy_step(p, q_last, (1, rand.categorical(q_last)), rand)).law
    assert law == {0: Fraction(1, 2), 1: Fraction(1, 3), 2: Fraction(1, 6)}  # = p
    # given x = 2 (p(2) < q_last(2)): the greedy draft 1 is emitted only through the residual
    given = enumerate_law(lambda rand: hu_greedy_step(p, q_last, (1, 2), rand)).law
    assert given == {2: Fraction(1, 4), 0: Fraction(1, 4), 1: Fraction(1, 2)}


def test_drafter_rejects_bad_sizes():
    with pytest.raises(ValueError, match="num_paths"):
        drafters.greedy_draft_paths(2, 0)
    with pytest.raises(TypeError, match="draft"):
        drafters.greedy_draft_paths(1, 2)(None, (), None)


def test_prove_hu_greedy_at_v2_l1_k2_and_refute_the_planted_bug():
    from verispec.formal import prove

    result = prove("hu_greedy", 2, 1, 2, timeout=60, workers=1)
    assert result.proved and result.verdict == "proved"
    bug = prove(planted.BUGS["hu_greedy_soft_q"](1), 2, 1, 2, timeout=60, workers=1)
    assert bug.verdict == "counterexample"


@pytest.mark.slow
def test_prove_hu_greedy_at_v3_l1_k2():
    from verispec.formal import prove

    assert prove("hu_greedy", 3, 1, 2, timeout=300, workers=1).verdict == "proved"
