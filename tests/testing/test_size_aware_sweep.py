"""Size-aware sweeps: a bug that needs size s is found only by instances larger than s, so the
default sweep reaches V = 6 with fewer instances there (budget)."""

import pytest

from verispec.reference import methods
from verispec.testing import LosslessnessError, assert_lossless, planted, sweep
from verispec.testing.assertions import DEFAULT_BUDGET, DEFAULT_VOCAB_SIZES, sweep_plan


def _counts(instances):
    out = {}
    for inst in instances:
        V = inst.vocab_size
        out[V] = (out.get(V, (0, 0))[0] + 1, max(out.get(V, (0, 0))[1], inst.num_tokens))
    return out


def test_default_plan_reaches_six_with_fewer_instances():
    assert DEFAULT_VOCAB_SIZES == (2, 3, 4, 5, 6) and DEFAULT_BUDGET == 1000
    # V <= 3: the full grid (3 families x 3 temperatures); then budget // V**N, at least 1
    assert sweep_plan(num_tokens=4) == {2: (9, 4), 3: (9, 4), 4: (3, 4), 5: (1, 4), 6: (1, 3)}
    assert _counts(sweep(num_tokens=4)) == {2: (9, 4), 3: (9, 4), 4: (3, 4), 5: (1, 4), 6: (1, 3)}
    # the few instances of a large V vary family and temperature (Latin-square order)
    labels = [i.label for i in sweep(num_tokens=4) if i.vocab_size == 4]
    assert labels == ["iid pair, T=1", "markov pair, T=0", "random_tree pair, T=0.5"]


def test_budget_and_vocab_sizes_arguments():
    assert _counts(sweep(vocab_sizes=(2, 4), num_tokens=2, budget=32)) == {2: (9, 2), 4: (2, 2)}
    # V**N above the budget: N is lowered at that size, one instance is still checked
    assert _counts(sweep(vocab_sizes=(5,), num_tokens=4, budget=30)) == {5: (1, 2)}
    assert sweep_plan((7,), num_tokens=3, budget=1) == {7: (1, 1)}
    report = assert_lossless(methods.token(1), vocab_sizes=(2, 5), budget=200, families=("iid",))
    assert report.vocab_sizes == (2, 5) and report.num_instances == 3 + 1
    assert report.instances_per_vocab_size == ((2, 3), (5, 1)) and "V in [2, 5]: 3+1," in str(report)


@pytest.mark.parametrize("budget, exc", [(0, ValueError), (-5, ValueError), (2.5, TypeError), ("9", TypeError),
                                         (True, TypeError)])
def test_bad_budget_is_named(budget, exc):
    with pytest.raises(exc, match="budget"):
        sweep(budget=budget)
    with pytest.raises(exc, match="budget"):
        assert_lossless(methods.token(1), budget=budget)


@pytest.mark.parametrize("draft_length", [1, 2])
def test_the_top3_raw_q_bug_needs_four_tokens_and_the_default_sweep_catches_it(draft_length):
    bug = planted.BUGS["topk3_draft_raw_q"](draft_length)
    # a bug that needs size 3 is invisible on instances of size <= 3 ...
    assert_lossless(bug, vocab_sizes=(2, 3), families=("iid", "markov"))
    # ... and the default sweep reaches V = 4, where it is caught (exact TV > 0)
    with pytest.raises(LosslessnessError) as info:
        assert_lossless(bug)
    err = info.value
    assert err.instance.vocab_size == 4 and err.exact and err.tv > 0
    assert "top_k=3" in str(err)
