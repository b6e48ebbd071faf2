"""Single-path information-agnostic LP (Thomas & Pal 2026, arXiv 2602.16961): its value is block
verification's E[tau]; token-level verification sits strictly below it in general."""

from fractions import Fraction

import pytest

pytest.importorskip("cvxpy")

from verispec.reference import exact, methods, models
from verispec.theory import closed_forms, lp


def _instance(seed):
    V, L = 2 + seed % 3, 1 + (seed // 3) % 3
    conc = (0.3, 1.0, 3.0)[(seed // 9) % 3]
    return models.random_tree(V, 2 * seed, conc), models.random_tree(V, 2 * seed + 1, conc), V, L


def _greedy_budgets(target, draft, L):
    """a*(u t) = min(q(u t), a*(u) p(t|u)) over the full tree."""
    out, frontier = {}, [((), 1.0, 1.0)]
    for _ in range(L):
        nxt = []
        for u, a, qu in frontier:
            p, q = target.probs(u), draft.probs(u)
            for t in range(target.vocab_size):
                child = min(qu * q[t], a * p[t])
                out[u + (t,)] = child
                nxt.append((u + (t,), child, qu * q[t]))
        frontier = nxt
    return out


def test_two_token_example_block_11_9_token_10_9():
    target, draft = models.iid([2 / 3, 1 / 3]), models.iid([1 / 3, 2 / 3])
    result = lp.single_path(target, draft, (), 2)
    assert result.value == pytest.approx(11 / 9, abs=1e-9)
    token = closed_forms.token_expected_accepted_length(target, draft, (), 2)
    assert token == pytest.approx(10 / 9, abs=1e-12)
    assert result.value - token > 0.1  # token is strictly below the optimum here
    assert result.status == "optimal" and result.solver in ("HIGHS", "CLARABEL")
    assert result.num_variables == 2 + 4 and result.num_constraints == 12
    assert result.solve_time >= 0 and set(result.node_budgets) == {(0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1)}


def test_lp_equals_block_on_220_random_instances():
    worst, strict = 0.0, 0
    for seed in range(220):
        target, draft, V, L = _instance(seed)
        value = lp.single_path(target, draft, (), L).value
        block = closed_forms.block_expected_accepted_length(target, draft, (), L)
        token = closed_forms.token_expected_accepted_length(target, draft, (), L)
        worst = max(worst, abs(value - block))
        assert token <= value + 1e-9, seed
        strict += value - token > 1e-6
    assert worst < 1e-7
    assert strict > 100  # token is strictly suboptimal on most random instances


def test_lp_equals_exact_block_enumeration_with_context():
    target, draft = models.random_tree(3, 7), models.random_tree(3, 8, 0.5)
    value = lp.single_path(target, draft, (2, 1), 2).value
    assert value == pytest.approx(float(exact.expected_accepted_length(target, draft, methods.block(2), (2, 1))), abs=1e-9)


def test_node_budgets_are_the_greedy_recursion():
    for seed in range(12):
        target, draft, V, L = _instance(seed)
        budgets = lp.single_path(target, draft, (), L).node_budgets
        greedy = _greedy_budgets(target, draft, L)
        assert set(budgets) == set(greedy)
        assert max(abs(budgets[u] - greedy[u]) for u in greedy) < 1e-7


def test_clarabel_fallback_agrees():
    target, draft = models.random_tree(3, 1), models.random_tree(3, 2, 0.4)
    result = lp.single_path(target, draft, (), 3, solver="CLARABEL")
    assert result.solver == "CLARABEL"
    assert result.value == pytest.approx(closed_forms.block_expected_accepted_length(target, draft, (), 3), abs=1e-7)


def test_exact_models_and_fraction_certificate():
    target = models.iid([Fraction(2, 3), Fraction(1, 3)])
    draft = models.iid([Fraction(1, 3), Fraction(2, 3)])
    assert closed_forms.block_expected_accepted_length(target, draft, (), 2) == Fraction(11, 9)
    assert lp.single_path(target, draft, (), 2).value == pytest.approx(11 / 9, abs=1e-9)


def test_size_is_geometric():
    target, draft = models.random_tree(4, 0), models.random_tree(4, 1)
    result = lp.single_path(target, draft, (), 3)
    assert result.num_variables == 4 + 16 + 64
    assert len(result.node_budgets) == result.num_variables


@pytest.mark.parametrize("kwargs, exc, name", [
    (dict(target="x"), TypeError, "target"),
    (dict(draft=models.iid([0.5, 0.3, 0.2])), ValueError, "draft"),
    (dict(draft_length=0), ValueError, "draft_length"),
    (dict(draft_length=1.5), TypeError, "draft_length"),
    (dict(context=(5,)), ValueError, "context"),
    (dict(context="ab"), TypeError, "context"),
])
def test_bad_input_names_the_argument(kwargs, exc, name):
    args = dict(target=models.iid([0.5, 0.5]), draft=models.iid([0.2, 0.8]), context=(), draft_length=2)
    args.update(kwargs)
    with pytest.raises(exc, match=name):
        lp.single_path(**args)


def test_non_normalised_model_rejected():
    with pytest.raises(ValueError, match="probs"):
        models.iid([0.5, 0.6])
