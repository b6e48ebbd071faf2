"""Bugs from serving engines' trackers (`planted.ENGINES`: vllm-ascend #7807, transformers #47932),
each refuted by `prove` at its smallest size, the counterexample confirmed in exact arithmetic."""

from fractions import Fraction

import pytest

from verispec.formal import prove
from verispec.reference import exact
from verispec.testing import assert_lossless, planted
from verispec.testing.planted_engines import MIN_DRAFT_LENGTH


def _confirm_in_exact_arithmetic(result, method):
    """The printed pair, rebuilt from the code, gives the method a different law (Fractions)."""
    cx = result.counterexample
    assert result.verdict == "counterexample" and cx.confirmed and cx.arithmetic == "exact", result.summary()
    namespace = {}
    exec(cx.code.replace("assert_lossless(method", "# "), namespace)
    target, draft = namespace["target"], namespace["draft"]
    law = exact.output_distribution(target, draft, method, (), result.num_tokens)
    reference = exact.target_distribution(target, (), result.num_tokens)
    assert all(isinstance(x, (Fraction, int)) for x in law.values())
    assert exact.total_variation(law, reference) == cx.tv_loop > 0
    assert Fraction(law.get(cx.output, 0)) == cx.method_probability != cx.target_probability


@pytest.mark.parametrize("name", sorted(planted.ENGINES))
def test_engine_bug_is_refuted_at_its_smallest_size(name):
    L = MIN_DRAFT_LENGTH.get(name, 1)
    method = planted.ENGINES[name](L)
    result = prove(method, 2, L, point_trials=0, workers=1, timeout=600)  # a SAT query, not the point search
    assert (result.vocab_size, result.draft_length, result.num_paths) == (2, L, 1)
    assert result.counterexample.found_by == "smt"
    _confirm_in_exact_arithmetic(result, method)


def test_block_tokenwise_accept_is_token_verification_at_L1():
    # Why its smallest size is L = 2: at L = 1 the rule is token verification, proved lossless.
    assert prove(planted.ENGINES["block_tokenwise_accept"](1), 2, 1, point_trials=0, workers=1).proved


@pytest.mark.parametrize("name", sorted(planted.ENGINES))
def test_engine_bug_is_also_caught_by_the_default_sweep(name):
    with pytest.raises(AssertionError):
        assert_lossless(planted.ENGINES[name](MIN_DRAFT_LENGTH.get(name, 1)))
