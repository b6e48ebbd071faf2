"""One-position transport LP (SpecTr, arXiv 2310.15141) against the closed forms."""

import itertools

import numpy as np
import pytest

pytest.importorskip("cvxpy")

from verispec.theory import closed_forms as cf
from verispec.theory import lp


def _pairs(count, seed, max_v=5, max_k=3):
    rng = np.random.default_rng(seed)
    for i in range(count):
        V = int(rng.integers(2, max_v + 1))
        K = int(rng.integers(1, max_k + 1))
        conc = float(rng.choice([0.2, 0.5, 1.0, 3.0]))
        yield i, V, K, rng.dirichlet(np.full(V, conc)), rng.dirichlet(np.full(V, conc))


def test_lp_with_replacement_equals_alpha_star():
    for i, V, K, p, q in _pairs(60, seed=0):
        result = lp.multidraft(p, q, K, replacement=True)
        assert result.status == "optimal"
        assert abs(result.value - cf.optimal_multidraft_acceptance(p, q, K)) < 1e-8, (i, p, q, K)


def test_lp_without_replacement_equals_min_cut_over_all_sets():
    # Max-flow/min-cut: the LP value is the min over ALL token sets H (proven); the sorted-prefix
    # dual is an upper bound (weak duality), and was tight on every trial here (unproven,
    # docs/theory.md; also 600/600 further random trials, V <= 5, K <= 4, during development).
    for i, V, K, p, q in _pairs(60, seed=1, max_k=4):
        value = lp.multidraft(p, q, K, replacement=False).value
        all_sets = min(cf.multidraft_cut_value(p, q, K, H, replacement=False)
                       for r in range(V + 1) for H in itertools.combinations(range(V), r))
        prefix = cf.sorted_prefix_dual(p, q, K, replacement=False)
        assert abs(value - all_sets) < 1e-8, (i, p, q, K)
        assert value <= prefix + 1e-8
        assert abs(value - prefix) < 1e-8, (i, p, q, K)


def test_without_replacement_beats_with_and_rrsw_is_feasible():
    for i, V, K, p, q in _pairs(30, seed=2):
        with_r = lp.multidraft(p, q, K, replacement=True).value
        without = lp.multidraft(p, q, K, replacement=False).value
        assert without >= with_r - 1e-8
        assert cf.rrsw_acceptance(p, q, K) <= without + 1e-8
        for form in (cf.nss_acceptance, cf.rrs_acceptance, cf.spectr_acceptance):
            assert form(p, q, K) <= with_r + 1e-8


def test_transport_plan_is_a_coupling():
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    result = lp.multidraft(p, q, 2)
    y_marginal = np.zeros(3)
    set_marginal = {}
    for (s, y), mass in result.node_budgets.items():
        y_marginal[y] += mass
        set_marginal[s] = set_marginal.get(s, 0) + mass
    assert np.allclose(y_marginal, p, atol=1e-8)
    law = lp.draft_set_law(q, 2)
    assert all(abs(set_marginal.get(s, 0) - law[s]) < 1e-8 for s in law)
    success = sum(m for (s, y), m in result.node_budgets.items() if y in s)
    assert success == pytest.approx(result.value, abs=1e-8)
    assert result.num_variables == len(law) * 3 and result.num_constraints == len(law) + 3


def test_draft_set_law_sums_to_one_and_degenerate_draft():
    for replacement in (True, False):
        law = lp.draft_set_law([0.2, 0.3, 0.5], 3, replacement)
        assert sum(law.values()) == pytest.approx(1.0, abs=1e-14)
    # A near-point-mass draft without replacement still drafts both tokens: acceptance 1.
    assert lp.multidraft([0.9, 0.1], [1e-13, 1 - 1e-13], 2, replacement=False).value == pytest.approx(1, abs=1e-8)


def test_bad_input():
    with pytest.raises(ValueError, match="p"):
        lp.multidraft([0.5, 0.6], [0.5, 0.5], 2)
    with pytest.raises(ValueError, match="q"):
        lp.multidraft([0.5, 0.5], [0.5, 0.25, 0.25], 2)
    with pytest.raises(ValueError, match="num_paths"):
        lp.multidraft([0.5, 0.5], [0.5, 0.5], 0)
