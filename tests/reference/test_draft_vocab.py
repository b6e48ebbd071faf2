"""The reference twin of a draft vocabulary subset (FR-Spec, arXiv 2502.14856), exactly:

- `restrict`: q_S = q 1_S / q(S) in Fractions, the uniform law on S when q(S) = 0, and the
  engine's order under temperature (restrict, then temper: at T = 0 the argmax over S).
- `draft_vocab(method, S)` is lossless (exact law, default sweep) for chain, block and multi-path
  methods; the planted bug `draft_vocab_full_q` (drafts from q_S, ratio with the full q) is not.
- Bad subsets raise TypeError / ValueError naming `subset`.
"""

from fractions import Fraction as F

import numpy as np
import pytest

from verispec.reference import methods, models
from verispec.reference.draftvocab import Restricted, draft_vocab, restrict, subset_ids
from verispec.testing import LosslessnessError, assert_lossless, planted


def test_restricted_law_is_q_renormalised_over_the_subset():
    q = models.iid([F(1, 2), F(1, 8), F(1, 4), F(1, 8)])
    r = restrict(q, (1, 2))
    assert list(r.probs(())) == [0, F(1, 3), F(2, 3), 0] and r.exact
    assert list(restrict(q, 2).probs(())) == [F(4, 5), F(1, 5), 0, 0]  # k = 2 lowest ids


def test_no_mass_on_the_subset_gives_the_uniform_law_on_it():
    q = models.iid([F(1, 2), F(1, 2), F(0), F(0)])
    assert list(restrict(q, (2, 3)).probs(())) == [0, 0, F(1, 2), F(1, 2)]
    assert np.allclose(restrict(models.iid([0.5, 0.5, 0.0]), (2,)).probs(()), [0, 0, 1])


def test_temperature_is_applied_after_the_restriction():
    q = models.iid([F(1, 2), F(1, 8), F(1, 4), F(1, 8)])
    greedy = restrict(models.temperature(q, 0), (1, 2, 3))
    assert list(greedy.probs(())) == [0, 0, 1, 0]  # the argmax over S, not the (lost) global argmax
    warm = restrict(models.temperature(models.iid([0.5, 0.1, 0.3, 0.1]), 0.5), (1, 2))
    expected = np.array([0, 0.1 ** 2, 0.3 ** 2, 0]) / (0.1 ** 2 + 0.3 ** 2)
    assert np.allclose(warm.probs(()), expected, atol=1e-15)


@pytest.mark.parametrize("method,subset", [(methods.token(2), 2), (methods.block(2), 2), (methods.block(2), 3),
                                           (methods.get("gbv", draft_length=2, num_paths=2), 2)],
                         ids=["token-k2", "block-k2", "block-k3", "gbv-k2"])
def test_draft_vocab_methods_are_lossless(method, subset):
    report = assert_lossless(draft_vocab(method, subset))
    assert report.num_instances > 20 and report.num_exact > 0


def test_lossless_with_an_explicit_subset_and_caught_when_q_is_the_full_one():
    assert_lossless(draft_vocab(methods.token(2), (0, 2)), vocab_sizes=(3, 4))
    with pytest.raises(LosslessnessError):
        assert_lossless(planted.BUGS["draft_vocab_full_q"](2), vocab_sizes=(2, 3))


def test_bad_subsets_raise_naming_the_argument():
    q = models.iid([0.5, 0.5])
    for bad, error in [((), ValueError), ((0, 2), ValueError), ((-1,), ValueError), (0, ValueError),
                       ((0.5,), TypeError), ("01", TypeError), (None, TypeError), ((True,), TypeError)]:
        with pytest.raises(error, match="subset"):
            Restricted(q, bad)
    with pytest.raises(TypeError, match="subset"):
        draft_vocab(methods.block(2), 1.5)
    with pytest.raises(TypeError, match="method"):
        draft_vocab("block", 2)
    assert subset_ids(np.array([3, 1, 3]), 4) == (1, 3)
