"""`prove` with K = 3 draft paths at V = 2, L = 1: the multi-draft methods whose rules define K = 3
are proved (gbv, RRS with and without replacement, naive sampling, SpecTr, traversal, the IS rules);
SpecHub is a two-draft rule and refuses K = 3. Planted: RRS that keeps its third draft untested,
lossless at K = 2 (proved) and refuted at K = 3 by a SAT query."""

import pytest

from verispec.formal import prove
from verispec.reference import drafters, exact
from verispec.reference.methods import Method
from verispec.reference.probability import accept_probability, residual
from verispec.reference.verifiers.multidraft import top_down

TIMEOUT = 600  # generous: a verdict must not depend on how busy the machine is


@pytest.mark.parametrize("name", ["gbv", "rrs", "rrsw", "nss", "spectr", "traversal", "khisti", "optimal_is"])
def test_multidraft_methods_are_proved_with_three_paths(name):
    result = prove(name, 2, 1, 3, timeout=TIMEOUT)
    assert result.verdict == "proved", result.summary()
    assert result.num_paths == 3 and len(result.queries) == 4
    assert all(q.result == "unsat" for q in result.queries)


def test_spechub_refuses_three_paths():
    with pytest.raises(ValueError, match="num_paths"):
        prove("spechub", 2, 1, 3, timeout=TIMEOUT)


def _third_kept_step(p, q, drafts, rand) -> int:
    """RRS (arXiv 2310.15141's recursive rejection) that keeps a third draft without testing it:
    the same as RRS for K <= 2."""
    current = p
    for k, x in enumerate(drafts):
        if k == 2 or rand.bernoulli(accept_probability(current[x], q[x])):  # BUG: k == 2 untested
            return x
        current = residual(current, q)
    return rand.categorical(current)


def _third_kept_rrs(num_paths: int) -> Method:
    return Method("third_kept_rrs", drafters.iid_paths(1, num_paths), top_down(_third_kept_step),
                  {"draft_length": 1, "num_paths": num_paths}, model_state_only=True)


def test_planted_untested_third_draft_is_proved_at_k2_and_refuted_at_k3():
    assert prove(_third_kept_rrs(2), 2, timeout=TIMEOUT).verdict == "proved"
    bug = _third_kept_rrs(3)
    result = prove(bug, 2, timeout=TIMEOUT, point_trials=0)  # no point search: the solver finds it
    assert result.verdict == "counterexample", result.summary()
    cx = result.counterexample
    assert cx.confirmed and cx.found_by == "smt" and cx.tv_iteration > 0
    namespace = {}
    exec(cx.code.replace("assert_lossless(method", "# "), namespace)  # the pair exactly as printed
    law = exact.output_distribution(namespace["target"], namespace["draft"], bug, (), 2)
    assert exact.total_variation(law, exact.target_distribution(namespace["target"], (), 2)) > 0
