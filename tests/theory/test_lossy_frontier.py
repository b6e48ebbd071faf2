"""The optimal lossy frontier (`verispec.theory.lossy`): one step against its closed form, eps = 0
against block verification, an independent policy LP on small trees, exact rational certificates,
and a planted TV mis-encoding that must fail."""

import itertools
import json
from fractions import Fraction

import numpy as np
import pytest
from scipy.optimize import linprog

from verispec import cli
from verispec.reference import exact, methods, models
from verispec.reference.probability import to_rational
from verispec.reference.verifiers import token_verify
from verispec.theory import closed_forms as cf
from verispec.theory import lossy, lossy_command


def _one_step_instances(count=60, seed=0):
    """Random (p, q, eps), with budgets 0, TV(p, q) and above it among them."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        V = int(rng.integers(2, 7))
        conc = float(rng.choice([0.3, 1.0, 3.0]))
        p, q = rng.dirichlet(np.full(V, conc)), rng.dirichlet(np.full(V, conc))
        distance = 0.5 * np.abs(p - q).sum()
        eps = [0.0, distance, min(1.0, 1.5 * distance), float(rng.uniform(0, distance))][i % 4]
        yield p, q, eps


def _closed_form_errors(instances):
    return [abs(lossy.lossy_single_path(models.iid(p), models.iid(q), (), 1, eps).value
                - cf.optimal_lossy_acceptance(p, q, eps)) for p, q, eps in instances]


def test_one_step_frontier_equals_the_closed_form_on_60_random_instances():
    errors = _closed_form_errors(_one_step_instances())
    assert len(errors) == 60 and max(errors) <= 1e-9


def test_planted_tv_rows_without_the_half_fail_the_closed_form(monkeypatch):
    correct = lossy.total_variation_rows

    def no_half(output_columns, target_joint, aux_offset, tv):
        rows, rhs = correct(output_columns, target_joint, aux_offset, tv)
        rows[-1] = {col: 2 * v for col, v in rows[-1].items()}  # sum e <= eps: TV <= eps / 2
        return rows, rhs

    monkeypatch.setattr(lossy, "total_variation_rows", no_half)
    errors = _closed_form_errors(list(_one_step_instances(12)))
    assert max(errors) > 1e-3  # the closed-form check catches it


def test_speculative_sampling_against_r_eps_attains_the_closed_form_exactly():
    p = [Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)]
    q = [Fraction(1, 8), Fraction(1, 8), Fraction(3, 4)]
    distance = sum(abs(a - b) for a, b in zip(p, q)) / 2
    for eps in (Fraction(0), Fraction(1, 10), distance, Fraction(9, 10)):
        r = cf.optimal_lossy_output(p, q, eps)
        law = exact.iteration_distribution(models.iid(list(r)), models.iid(q), methods.token(1))
        first = [sum(prob for tokens, prob in law.items() if tokens[0] == t) for t in range(3)]
        assert first == list(r) and sum(abs(a - b) for a, b in zip(r, p)) / 2 == min(eps, distance)
        accepted = sum(prob for tokens, prob in law.items() if len(tokens) == 2)
        assert accepted == cf.optimal_lossy_acceptance(p, q, eps)


@pytest.mark.parametrize("V, L, seed", [(2, 1, 0), (2, 3, 1), (3, 2, 2), (3, 3, 3)])
def test_zero_budget_is_block_verification(V, L, seed):
    target, draft = models.random_tree(V, 2 * seed), models.random_tree(V, 2 * seed + 1)
    value = lossy.lossy_single_path(target, draft, (), L, 0.0).value
    assert abs(value - float(cf.block_expected_accepted_length(target, draft, (), L))) <= 1e-8


@pytest.mark.parametrize("V, L, seed", [(2, 2, 0), (3, 2, 1)])
def test_every_draft_is_accepted_exactly_from_tv_of_draft_and_target(V, L, seed):
    target, draft = models.random_tree(V, 2 * seed), models.random_tree(V, 2 * seed + 1)
    threshold = exact.total_variation(exact.target_distribution(draft, (), L),
                                      exact.target_distribution(target, (), L))
    assert abs(lossy.lossy_single_path(target, draft, (), L, threshold).value - L) <= 1e-8
    assert lossy.lossy_single_path(target, draft, (), L, threshold - 0.02).value < L - 1e-4


def _policy_lp(target, draft, L, eps):
    """Independent encoding: pi(x, tau, t) over full drafts x, accepted lengths tau and corrections
    t (tau = L: the target's bonus), sum_{tau, t} pi = q(x); output = x^tau t continued by the
    target, measured on L tokens; maximise E[tau]. Every point is a verifier and vice versa."""
    V = target.vocab_size
    drafts = exact.target_distribution(draft, (), L)  # {x: q(x)}
    seqs = list(itertools.product(range(V), repeat=L))
    cols = [(x, tau, t) for x in drafts for tau in range(L + 1) for t in (range(V) if tau < L else [None])]
    out = np.zeros((len(seqs), len(cols)))
    for j, (x, tau, t) in enumerate(cols):
        head = x[:tau] + ((t,) if t is not None else ())
        tails = exact.target_distribution(target, head, L - len(head)) if len(head) < L else {(): 1}
        for tail, prob in tails.items():
            out[seqs.index(head + tail), j] += prob
    m, n = len(seqs), len(cols)
    truth = np.array([exact.target_distribution(target, (), L).get(v, 0) for v in seqs])
    a_ub = np.block([[out, -np.eye(m)], [-out, -np.eye(m)], [np.zeros((1, n)), np.full((1, m), 0.5)]])
    b_ub = np.concatenate([truth, -truth, [eps]])
    a_eq = np.hstack([np.array([[1.0 if c[0] == x else 0.0 for c in cols] for x in drafts]), np.zeros((len(drafts), m))])
    cost = -np.concatenate([[c[1] for c in cols], np.zeros(m)])
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=np.array(list(drafts.values())), method="highs")
    assert res.status == 0
    return -res.fun


@pytest.mark.parametrize("V, L, seed", [(2, 2, 0), (3, 2, 1), (2, 3, 2)])
def test_node_lp_equals_the_policy_lp_over_all_verifiers(V, L, seed):
    target, draft = models.random_tree(V, 2 * seed), models.random_tree(V, 2 * seed + 1)
    for eps in (0.0, 0.03, 0.1, 0.3):
        assert abs(lossy.lossy_single_path(target, draft, (), L, eps).value
                   - _policy_lp(target, draft, L, eps)) <= 1e-7


def test_one_step_optimum_is_certified_exactly_and_equals_the_closed_form():
    rng = np.random.default_rng(5)
    for _ in range(6):
        V = int(rng.integers(2, 5))
        p, q = list(to_rational(rng.dirichlet(np.ones(V)), 48)), \
            list(to_rational(rng.dirichlet(np.ones(V)), 48))
        for eps in (Fraction(0), Fraction(1, 12), Fraction(1, 3)):
            cert = lossy.lossy_certificate(models.iid(p), models.iid(q), (), 1, eps)
            assert cert.certified, cert.reason
            assert cert.value == cf.optimal_lossy_acceptance(p, q, eps)


@pytest.mark.parametrize("L", [2, 3])
def test_multi_step_optimum_is_certified_exactly(L):
    target, draft = models.random_tree(3, 0, rational=True), models.random_tree(3, 1, rational=True)
    zero = lossy.lossy_certificate(target, draft, (), L, Fraction(0))
    assert zero.certified and zero.value == cf.block_expected_accepted_length(target, draft, (), L)
    result = lossy.lossy_single_path(target, draft, (), L, 0.05)
    cert = lossy.lossy_certificate(target, draft, (), L, Fraction(1, 20), result)
    assert cert.certified, cert.reason
    assert isinstance(cert.value, Fraction) and abs(float(cert.value) - result.value) <= 1e-9


def test_a_feasible_but_suboptimal_primal_is_not_certified():
    target, draft = models.random_tree(3, 0, rational=True), models.random_tree(3, 1, rational=True)
    lossless = lossy.lossy_single_path(target, draft, (), 2, 0.0)  # feasible at eps = 1/10 too
    cert = lossy.lossy_certificate(target, draft, (), 2, Fraction(1, 10), lossless)
    assert not cert.certified


def _ensemble(weight):
    def verify(target, draft_model, context, draft, rand):
        return token_verify(models.mixture(target, draft_model, weight), draft_model, context, draft, rand)

    return methods.Method("ensemble", methods.token(1).draft, verify, {"draft_length": 1})


def test_iteration_tv_is_zero_for_lossless_methods_and_exact_for_a_lossy_one():
    target, draft = models.random_tree(3, 0, rational=True), models.random_tree(3, 1, rational=True)
    for method in (methods.token(2), methods.block(2)):
        assert lossy.iteration_total_variation(target, draft, method) == 0
    p, q, w = [Fraction(1, 2), Fraction(1, 2)], [Fraction(4, 5), Fraction(1, 5)], Fraction(1, 3)
    r = [(1 - w) * a + w * b for a, b in zip(p, q)]
    both = {(x, y): min(q[x], r[x]) * r[y] + (r[x] - min(q[x], r[x])) * p[y] for x in range(2) for y in range(2)}
    truth = {(x, y): p[x] * p[y] for x in range(2) for y in range(2)}
    tv = lossy.iteration_total_variation(models.iid(p), models.iid(q), _ensemble(w))
    assert tv == exact.total_variation(both, truth) and tv > 0


@pytest.mark.parametrize("tv, error", [(-0.1, ValueError), (1.5, ValueError), (float("nan"), ValueError),
                                       ("0.1", TypeError), (True, TypeError), (None, TypeError)])
def test_bad_budget_is_refused_naming_tv(tv, error):
    target = models.random_tree(2, 0)
    for call in (lambda: lossy.lossy_single_path(target, target, (), 1, tv),
                 lambda: cf.optimal_lossy_acceptance([0.5, 0.5], [0.5, 0.5], tv)):
        with pytest.raises(error, match="tv"):
            call()


def test_float_models_are_certified_for_their_exact_renormalised_data():
    for seed in range(3):
        target, draft = models.random_tree(3, 2 * seed), models.random_tree(3, 2 * seed + 1)
        result = lossy.lossy_single_path(target, draft, (), 2, 0.1)
        cert = lossy.lossy_certificate(target, draft, (), 2, 0.1, result)
        assert cert.certified, cert.reason
        assert abs(float(cert.value) - result.value) <= 1e-9


# ------------------------------------------------------------------------------------------------
# verispec lp --tv EPS

def test_cli_prints_the_frontier_and_its_checks(tmp_path, capsys):
    out = tmp_path / "frontier.json"
    assert cli.main(["lp", "--tv", "0.1", "--instances", "2", "--vocab-size", "3", "--draft-length", "1",
                     "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "BE*(0.1) = " in text and "all frontier checks hold" in text
    payload = json.loads(out.read_text())
    assert payload["all_ok"] and len(payload["instances"]) == 2
    for record in payload["instances"]:
        assert abs(record["block_efficiency"] - record["closed_form"]) <= 1e-9
        assert record["exact"]["certified"] and abs(record["exact"]["block_efficiency"] - record["block_efficiency"]) <= 1e-9


def test_cli_fails_when_a_frontier_check_fails(monkeypatch, capsys):
    monkeypatch.setattr(lossy_command, "TOLERANCE", -1.0)  # every check must now fail
    assert cli.main(["lp", "--tv", "0.2", "--instances", "1", "--vocab-size", "2", "--draft-length", "2"]) == 1
    assert "FAILED frontier checks" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["-0.5", "1.5", "nan"])
def test_cli_bad_tv_is_one_line(value, capsys):
    assert cli.main(["lp", "--tv", value]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("verispec lp: --tv: ") and "\n" not in err
