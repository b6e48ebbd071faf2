"""Ouroboros' phrase drafts (reference twin of the engine's `PhraseOuroborosDrafter`): exact laws
with `assert_lossless`, the two planted bugs caught, and the drafting rule itself (whole phrases,
the draft's greedy chain, the pool's tails as a trie)."""

import pytest

from verispec.reference import models
from verispec.reference import ouroboros as ref
from verispec.reference.probability import argmax
from verispec.reference.randomness import Sampler
from verispec.testing import assert_lossless, planted_drafters

# Phrases of one and two tokens under every key of V <= 3, so that steps match, tails branch
# (two distinct first tokens under key 0) and chains overshoot L.
POOL = {0: [(1, 0), (0, 1)], 1: [(1, 1), (2,)], 2: [(0, 2)]}
QUICK = dict(families=("iid", "markov"), vocab_sizes=(2, 3), num_tokens=4)


@pytest.mark.parametrize("L,K,G", [(1, 1, 1), (2, 2, 2), (1, 3, 3)])
def test_twin_is_lossless(L, K, G):
    assert_lossless(ref.ouroboros_method(L, POOL, K, G), **QUICK)


def test_twin_is_lossless_on_random_trees():
    assert_lossless(ref.ouroboros_method(2, POOL, 2, 2), families=("random_tree",), vocab_sizes=(2, 3), num_tokens=4)


def test_twin_is_lossless_in_exact_arithmetic():
    assert_lossless(ref.ouroboros_method(1, POOL, 2, 2), exact=True, temperatures=(1, 0), **QUICK)


def test_planted_greedy_match_is_caught_and_exact_at_T0():
    assert_lossless(planted_drafters.greedy_match_method(2, POOL, 2, 2), **{**QUICK, "temperatures": (0,)})  # the paper's T = 0
    with pytest.raises(AssertionError):
        assert_lossless(planted_drafters.greedy_match_method(2, POOL, 2, 2), **QUICK)


def test_planted_trusted_pool_phrase_is_caught():
    with pytest.raises(AssertionError):
        assert_lossless(planted_drafters.trust_pool_method(1, POOL, 2, 2), **QUICK)


def _greedy(model, context, n):
    out = ()
    for _ in range(n):
        out += (argmax(model.probs(context + out)),)
    return out


def test_chain_is_the_drafts_greedy_chain_in_whole_phrases():
    draft = models.random_markov(3, seed=4, concentration=0.3)
    context = (0, 1)
    greedy = _greedy(draft, context, 12)
    # a pool holding the draft's own continuation: one step takes the whole phrase
    pool = {context[-1]: [greedy[:3]]}
    chain = ref.phrase_chain(draft, context, pool, 2, 20)
    assert chain == greedy[:len(chain)] and len(chain) == 4  # 1 + 3 matched > L = 2
    assert ref.phrase_chain(draft, context, {}, 2, 20) == greedy[:2]  # no pool: exactly L
    wrong = {context[-1]: [((greedy[0] + 1) % 3, greedy[1])]}
    assert ref.phrase_chain(draft, context, wrong, 2, 20) == greedy[:2]  # no match: token by token
    assert ref.phrase_chain(draft, context, pool, 2, 1) == greedy[:4]  # G = 1 sees the newest


def test_draft_is_chain_then_tails_as_a_trie():
    draft_model = models.random_markov(3, seed=5)
    context = (2,)
    chain = ref.phrase_chain(draft_model, context, POOL, 1, 20)
    draft = ref.ouroboros_phrases(1, POOL, num_candidates=2)(draft_model, context, Sampler(0))
    tails = POOL.get(chain[-1], ())[:2]
    assert set(draft.paths) == {chain + t for t in tails}
    assert draft.children(chain) == tuple(dict.fromkeys(t[0] for t in tails))


def test_bad_parameters():
    with pytest.raises(ValueError):
        ref.ouroboros_phrases(0, POOL)
    with pytest.raises(ValueError):
        ref.ouroboros_phrases(1, POOL, num_candidates=0)
    with pytest.raises(TypeError):
        ref.ouroboros_phrases(1, [(1, 2)])
    with pytest.raises(ValueError):
        ref.ouroboros_phrases(1, {0: [()]})
    with pytest.raises(ValueError):
        ref.ouroboros_phrases(1, {-1: [(1,)]})
