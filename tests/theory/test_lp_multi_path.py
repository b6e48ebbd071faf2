"""Multi-path LP bound (docs/theory.md; Thomas & Pal 2026, arXiv 2602.16961): an upper bound on E[tau]
of every valid verifier of K i.i.d. draft paths."""

import itertools

import numpy as np
import pytest

pytest.importorskip("cvxpy")

from verispec.reference import exact, methods, models
from verispec.theory import closed_forms, lp

IID_METHODS = ("gbv", "rrs", "spectr", "nss", "traversal")


def _instance(seed):
    V, L, K = [(2, 2, 2), (3, 2, 2), (2, 2, 3), (2, 3, 2)][seed % 4]
    conc = (1.0, 0.4, 2.0)[(seed // 4) % 3]
    return models.random_tree(V, seed, conc), models.random_tree(V, seed + 50, 0.7), V, L, K


def test_bound_dominates_every_iid_multipath_method():
    for seed in range(10):
        target, draft, V, L, K = _instance(seed)
        bound = lp.multi_path(target, draft, (), L, K)
        assert bound.method == "exact" and bound.status == "optimal"
        block = closed_forms.block_expected_accepted_length(target, draft, (), L)
        assert bound.value >= block - 1e-9
        for name in IID_METHODS:
            value = float(exact.expected_accepted_length(target, draft, methods.get(name, draft_length=L, num_paths=K)))
            assert value <= bound.value + 1e-7, (seed, name, value, bound.value)


def test_bound_is_not_trivially_loose():
    # gbv gets within 1% of the bound on some instance and the bound is below L on all.
    close = 0
    for seed in range(8):
        target, draft, V, L, K = _instance(seed)
        bound = lp.multi_path(target, draft, (), L, K).value
        gbv = float(exact.expected_accepted_length(target, draft, methods.gbv(L, K)))
        assert bound < L
        close += bound - gbv < 0.01 * bound
    assert close >= 1


def test_rrsw_is_not_covered_by_the_iid_bound():
    # rrsw drafts K DISTINCT first tokens, a different draft law, so the i.i.d. coverage
    # constraint does not bind it: it can exceed the bound.
    target, draft = models.random_tree(2, 0, 1.0), models.random_tree(2, 50, 0.7)
    bound = lp.multi_path(target, draft, (), 2, 2).value
    rrsw = float(exact.expected_accepted_length(target, draft, methods.rrsw(2, 2)))
    assert rrsw > bound + 0.05


def test_one_path_equals_single_path():
    for seed in range(8):
        target, draft, V, L, _ = _instance(seed)
        single = lp.single_path(target, draft, (), L).value
        for method in ("exact", "constraint_generation"):
            assert lp.multi_path(target, draft, (), L, 1, method=method).value == pytest.approx(single, abs=1e-7)


def test_constraint_generation_matches_exact():
    for seed in range(8):
        target, draft, V, L, K = _instance(seed)
        ex = lp.multi_path(target, draft, (), L, K, method="exact")
        cg = lp.multi_path(target, draft, (), L, K, method="constraint_generation")
        assert cg.method == "constraint_generation" and cg.rounds >= 1
        assert cg.value == pytest.approx(ex.value, abs=1e-7)
        assert cg.num_constraints < ex.num_constraints or ex.num_constraints < 40


def test_bound_grows_with_k():
    target, draft = models.random_tree(2, 3), models.random_tree(2, 4, 0.5)
    values = [lp.multi_path(target, draft, (), 2, K).value for K in (1, 2, 3, 4)]
    assert all(b >= a - 1e-9 for a, b in zip(values, values[1:]))
    assert values[-1] > values[0] + 0.01


def test_budgets_satisfy_every_coverage_constraint():
    target, draft = models.random_tree(3, 5), models.random_tree(3, 6, 0.5)
    K = 2
    result = lp.multi_path(target, draft, (), 2, K, method="constraint_generation")
    a = result.node_budgets
    for depth in (1, 2):
        level = [u for u in a if len(u) == depth]
        qj = {u: float(np.prod([draft.probs(u[:i])[u[i]] for i in range(depth)])) for u in level}
        for r in range(1, len(level) + 1):
            for S in itertools.combinations(level, r):
                assert sum(a[u] for u in S) <= 1 - (1 - sum(qj[u] for u in S)) ** K + 1e-7
    for u, value in a.items():
        if len(u) > 1:
            assert value <= a[u[:-1]] * target.probs(u[:-1])[u[-1]] + 1e-7


def test_most_violated_set_is_exact():
    rng = np.random.default_rng(0)
    exact_hits = 0
    for _ in range(200):
        m = int(rng.integers(1, 8))
        K = int(rng.integers(1, 4))
        q = rng.dirichlet(np.ones(m)) * rng.uniform(0.3, 1.0)
        a = rng.uniform(0, 1, m) * (1 - (1 - q) ** K) * rng.uniform(0.8, 1.6)
        if rng.uniform() < 0.2:
            q[0] = 0.0
        best = max(sum(a[list(S)]) - lp.coverage(sum(q[list(S)]), K)
                   for r in range(1, m + 1) for S in itertools.combinations(range(m), r))
        subset, violation = lp.most_violated_set(a, q, K)
        assert violation == pytest.approx(a[subset].sum() - lp.coverage(q[subset].sum(), K), abs=1e-12)
        if best > 1e-12:  # exact whenever some set is violated
            assert violation == pytest.approx(best, abs=1e-12)
            exact_hits += 1
        else:
            assert violation <= 1e-12
    assert exact_hits > 30


def test_larger_instance_uses_constraint_generation():
    target, draft = models.random_tree(4, 1), models.random_tree(4, 2)
    result = lp.multi_path(target, draft, (), 3, 3)
    assert result.method == "constraint_generation" and result.num_variables == 4 + 16 + 64
    assert result.value >= lp.single_path(target, draft, (), 3).value - 1e-9
    assert result.info["max_violation"] <= 1e-9


def test_bad_input():
    target, draft = models.random_tree(2, 1), models.random_tree(2, 2)
    with pytest.raises(ValueError, match="num_paths"):
        lp.multi_path(target, draft, (), 2, 0)
    with pytest.raises(ValueError, match="method"):
        lp.multi_path(target, draft, (), 2, 2, method="greedy")
    with pytest.raises(ValueError, match="draft_length"):
        lp.multi_path(target, draft, (), 0, 2)
    with pytest.raises(ValueError, match="method"):
        lp.multi_path(models.random_tree(5, 1), models.random_tree(5, 2), (), 2, 2, method="exact")


def test_cvxpy_backend_constraint_generation_agrees():
    target, draft = models.random_tree(3, 9), models.random_tree(3, 10, 0.5)
    fast = lp.multi_path(target, draft, (), 2, 2, method="constraint_generation")
    slow = lp.multi_path(target, draft, (), 2, 2, method="constraint_generation", solver="CLARABEL")
    assert fast.info["backend"].startswith("highspy") and slow.info["backend"] == "cvxpy"
    assert slow.solver == "CLARABEL" and slow.value == pytest.approx(fast.value, abs=1e-6)


def test_certify_cli_passes_and_fails(tmp_path, monkeypatch):
    import argparse
    import json

    from verispec.theory import certify

    parser = certify.add_arguments(argparse.ArgumentParser())
    out = tmp_path / "cert.json"
    args = parser.parse_args(["--vocab-size", "2", "--draft-length", "2", "--num-paths", "2",
                              "--instances", "2", "--json", str(out)])
    assert certify.run(args) == 0
    payload = json.loads(out.read_text())
    assert payload["all_ok"] and len(payload["instances"]) == 2
    assert payload["instances"][0]["multi_path"]["methods"]["gbv"]["ok"]
    monkeypatch.setattr(certify, "TOLERANCE", -1.0)  # every certificate must now fail
    assert certify.run(args) == 1
    assert json.loads(out.read_text())["all_ok"] is False
    bad = parser.parse_args(["--instances", "0"])
    assert certify.run(bad) == 2
