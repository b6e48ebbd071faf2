"""Exact LP certificates: a rational primal and dual with equal objectives, checked in Fractions."""

from fractions import Fraction

import pytest

from verispec.reference import models
from verispec.theory import closed_forms, lp
from verispec.theory.exact_lp import certify_lp, multi_path_certificate, single_path_certificate


def _pair(V, rational):
    return models.random_tree(V, 0, rational=rational), models.random_tree(V, 1, rational=rational)


@pytest.mark.parametrize("V, L", [(2, 1), (2, 3), (3, 2)])
def test_single_path_optimum_is_certified_and_equals_block_verification_exactly(V, L):
    target, draft = _pair(V, rational=True)
    cert = single_path_certificate(target, draft, (), L, lp.single_path(target, draft, (), L))
    assert cert.certified, cert.reason
    assert cert.value == closed_forms.block_expected_accepted_length(target, draft, (), L)
    assert isinstance(cert.value, Fraction) and cert.primal_value == cert.dual_value


def test_float_models_are_certified_for_their_exact_binary_data():
    target, draft = _pair(3, rational=False)
    result = lp.single_path(target, draft, (), 2)
    cert = single_path_certificate(target, draft, (), 2, result)
    assert cert.certified and abs(float(cert.value) - result.value) < 1e-9


def test_multi_path_bound_is_certified():
    target, draft = _pair(3, rational=True)
    bound = lp.multi_path(target, draft, (), 2, 2, method="exact")
    cert = multi_path_certificate(target, draft, (), 2, 2, bound)
    assert cert.certified, cert.reason
    assert abs(float(cert.value) - bound.value) < 1e-9 and cert.num_constraints > 100


def test_a_non_optimal_primal_is_not_certified():
    target, draft = _pair(3, rational=True)
    result = lp.single_path(target, draft, (), 2)
    zeros = {u: 0.0 for u in result.node_budgets}  # feasible, far from optimal
    result.node_budgets = zeros
    cert = single_path_certificate(target, draft, (), 2, result)
    assert not cert.certified and cert.reason and cert.value is None


def test_tiny_lp_by_hand():
    # max x0 + x1 s.t. x0 + x1 <= 1/2, 0 <= x <= 1/3: optimum 1/2
    cert = certify_lp([Fraction(1), Fraction(1)], [{0: Fraction(1), 1: Fraction(1)}], [Fraction(1, 2)],
                      [Fraction(1, 3), Fraction(1, 3)])
    assert cert.value == Fraction(1, 2) or (not cert.certified and "vertex" in cert.reason)


def test_optimal_inaccurate_is_refused(monkeypatch):
    import cvxpy as cp

    solve = cp.Problem.solve

    def inaccurate(self, *args, **kwargs):
        value = solve(self, *args, **kwargs)
        self._status = "optimal_inaccurate"
        return value

    monkeypatch.setattr(cp.Problem, "solve", inaccurate)
    target, draft = _pair(2, rational=True)
    with pytest.raises(RuntimeError, match="optimal_inaccurate"):
        lp.single_path(target, draft, (), 1)
