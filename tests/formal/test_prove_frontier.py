"""`prove` on rules that used to leave exact arithmetic: the importance-sampling selection laws at
V = 2 (exact closed forms of their LPs: optimal_is, khisti) and at V = 3 (their LPs solved by the
exact simplex, `verispec.reference.simplex`), and OPT-Tree's structure (ranked by exact comparisons).

Cheap sizes in the default suite (each under a second of symbolic work); the V = 3 proofs and the
SAT refutation there take minutes: marked slow.
"""

import random
from fractions import Fraction

import numpy as np
import pytest

from verispec.formal import prove
from verispec.reference import drafters, exact, methods
from verispec.reference.methods import Method
from verispec.reference.verifiers import importance
from verispec.testing import planted
from verispec.theory.closed_forms import optimal_multidraft_acceptance

#: Generous: a verdict must not depend on how busy the machine is.
TIMEOUT = 600


def _confirmed(result, method):
    """The counterexample is confirmed by the exact engine and its printed models reproduce it."""
    assert result.verdict == "counterexample", result.summary()
    cx = result.counterexample
    assert cx.confirmed and cx.found_by == "smt" and cx.tv_iteration > 0
    assert cx.method_probability != cx.target_probability
    namespace = {}
    exec(cx.code.replace("assert_lossless(method", "# "), namespace)  # the models exactly as printed
    law = exact.output_distribution(namespace["target"], namespace["draft"], method, result.context,
                                    result.num_tokens)
    target_law = exact.target_distribution(namespace["target"], result.context, result.num_tokens)
    assert exact.total_variation(law, target_law) == cx.tv_loop > 0
    return cx


# -- importance sampling: the selection LP in closed form at V = 2 ----------------------------------


def _rational(rng, den=12):
    a = Fraction(rng.randint(0, den), den)
    return np.array([a, 1 - a], dtype=object)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_two_token_selection_reaches_alpha_star_exactly_and_matches_the_lp(k):
    rng = random.Random(k)
    for _ in range(40):
        p, q = _rational(rng), _rational(rng)
        select, q_sel = importance.two_token_selection(p, q, k)
        assert sum(q_sel) == 1 and all(x >= 0 for x in q_sel)
        assert all(0 <= x <= 1 for x in select[(0, 1)]) and sum(select[(0, 1)]) == 1
        # the acceptance of single-draft SD against q_I is the one-step optimum alpha*, exactly
        assert sum(min(p[i], q_sel[i]) for i in range(2)) == optimal_multidraft_acceptance(p, q, k)
        # and q_I is the float64 LP's (HiGHS) up to its rounding
        _, lp_law = importance.lp_selection(p, q, k)
        assert max(abs(q_sel[i] - lp_law[i]) for i in range(2)) < Fraction(1, 10 ** 9)


def test_is_verified_against_q_is_refuted_by_a_sat_query_with_a_confirmed_counterexample():
    bug = planted.BUGS["is_verified_against_q"](1)
    result = prove(bug, 2, 1, 2, timeout=TIMEOUT, point_trials=0)  # no point search: the solver finds it
    assert result.branch_points > 0
    _confirmed(result, bug)


def test_optimal_is_is_proved_at_v2():
    result = prove("optimal_is", 2, 1, 2, timeout=TIMEOUT)
    assert result.verdict == "proved", result.summary()
    assert result.branch_points > 0 and len(result.queries) == 4
    assert all(q.result == "unsat" for q in result.queries)


@pytest.mark.parametrize("name", ["optimal_is", "khisti"])
def test_truncated_is_rules_at_v3_still_name_their_float_lp(name):
    method = getattr(methods, name)(1, 2, truncation=2)
    result = prove(method, 3, 1, 2, timeout=TIMEOUT, point_trials=0)
    assert result.verdict == "unknown" and "cannot be run symbolically" in result.reason


# -- importance sampling at V = 3: the selection LPs through the exact simplex ------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["optimal_is", "khisti"])
def test_is_rules_are_proved_at_v3_through_the_exact_simplex(name):
    result = prove(name, 3, 1, 2, timeout=TIMEOUT)
    assert result.verdict == "proved", result.summary()
    assert result.branch_points > 0 and len(result.queries) == 9
    assert all(q.result == "unsat" for q in result.queries)


@pytest.fixture()
def other_drafts_law(monkeypatch):
    """Planted: khisti's selection hands single-draft SD the law of the draft it did NOT keep
    (q_1 + q_2 - q_I) instead of q_I's; the LP and its simplex are untouched."""
    original = importance.exact_pair_selection

    def wrong(p, q1, q2):
        keep, law = original(p, q1, q2)
        return keep, q1 + q2 - law

    importance._memo_exact_pair_selection.cache_clear()  # Fractions solved before the plant
    monkeypatch.setattr(importance, "exact_pair_selection", wrong)
    yield
    importance._memo_exact_pair_selection.cache_clear()


def test_planted_wrong_selection_law_at_v3_is_refuted_by_the_point_search(other_drafts_law):
    result = prove(methods.khisti(1, 2), 3, 1, 2, timeout=TIMEOUT)
    assert result.verdict == "counterexample" and result.counterexample.confirmed
    assert result.counterexample.found_by == "point search"


@pytest.mark.slow
def test_planted_wrong_selection_law_at_v3_is_refuted_by_a_sat_query(other_drafts_law):
    bug = methods.khisti(1, 2)
    _confirmed(prove(bug, 3, 1, 2, timeout=TIMEOUT, point_trials=0), bug)


def test_two_token_pair_selection_is_an_optimum_of_khistis_lp():
    rng = random.Random(5)
    for _ in range(60):
        p, q1, q2 = _rational(rng), _rational(rng), _rational(rng)
        keep, q_sel = importance.two_token_pair_selection(p, q1, q2)
        assert sum(q_sel) == 1 and all(0 <= keep[i][j] <= 1 for i in range(2) for j in range(2))
        # q_I is the exact law of the kept draft
        law = [sum(q1[i] * q2[j] * (keep[i][j] if t == i else 1 - keep[i][j] if t == j else 0)
                   for i in range(2) for j in range(2)) for t in range(2)]
        assert law == list(q_sel)
        # its acceptance equals the float64 LP's optimum (HiGHS may pick another optimal vertex)
        _, lp_law = importance.lp_pair_selection(p, q1, q2)
        accept = sum(min(p[i], q_sel[i]) for i in range(2))
        assert abs(accept - sum(min(p[i], lp_law[i]) for i in range(2))) < Fraction(1, 10 ** 9)
        # with two i.i.d. drafts (q1 = q2 = q) it is the one-step optimum alpha*, exactly
        _, iid_law = importance.two_token_pair_selection(p, q1, q1)
        assert sum(min(p[i], iid_law[i]) for i in range(2)) == optimal_multidraft_acceptance(p, q1, 2)


def test_khisti_is_proved_at_v2():
    result = prove("khisti", 2, 1, 2, timeout=TIMEOUT)
    assert result.verdict == "proved", result.summary()
    assert result.branch_points > 0 and all(q.result == "unsat" for q in result.queries)


# -- OPT-Tree: the structure ranked by exact comparisons --------------------------------------------


def _random_q_of(rng, V, den):
    table = {}

    def q_of(node):
        if node not in table:
            cuts = sorted(rng.randint(0, den) for _ in range(V - 1))
            bounds = [0] + cuts + [den]
            table[node] = np.array([Fraction(bounds[i + 1] - bounds[i], den) for i in range(V)], dtype=object)
        return table[node]

    return q_of


def test_opt_tree_structure_on_rationals_is_the_float64_structure():
    """Exact ranking changes nothing on rational draft models (ties broken by the same keys)."""
    rng = random.Random(7)
    for _ in range(200):
        V, n, depth = rng.choice([2, 3, 4]), rng.randint(1, 6), rng.randint(1, 4)
        q_of = _random_q_of(rng, V, rng.choice([2, 3, 4, 6, 12]))
        exact_tree = drafters.opt_tree_structure(q_of, n, 0.0, depth)
        float_tree = drafters.opt_tree_structure(lambda u: q_of(u).astype(np.float64), n, 0.0, depth)
        assert exact_tree == float_tree


def test_opt_tree_is_proved_at_v2_l1():
    result = prove("opt_tree", 2, 1, 2, timeout=TIMEOUT)
    assert result.verdict == "proved", result.summary()
    assert result.branch_points > 0 and len(result.queries) == 4
    assert all(q.result == "unsat" for q in result.queries)


def _second_child_swapped(target, draft_model, context, draft, rand):
    """Sample-and-follow whose root emits the top-W child when the target samples the second one."""
    tree = drafters.opt_tree_structure(lambda u: draft_model.probs(context + u), 2, 0.0, 1)
    kids = tree.get((), [])
    y = rand.categorical(target.probs(context))
    if len(kids) == 2 and y == kids[1]:  # BUG: the ranking decides which token's mass moves
        y = kids[0]
    if y not in draft.counts(()):
        return (y,)
    return (y, rand.categorical(target.probs(context + (y,))))


def test_a_bug_that_reads_the_opt_tree_ranking_is_refuted():
    bug = Method("opt_tree_second_child_swapped", drafters.opt_tree(2, 0.0, 1), _second_child_swapped,
                 {"node_budget": 2, "max_depth": 1}, model_state_only=True)
    _confirmed(prove(bug, 2, 1, 2, timeout=TIMEOUT, point_trials=0), bug)
