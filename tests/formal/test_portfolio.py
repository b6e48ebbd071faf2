"""The solver portfolio: z3 and cvc5 agree wherever both answer; cvc5 races z3 in a child process."""

import itertools
import time

import pytest
import z3

from verispec.formal import portfolio, prove
from verispec.formal._internal.problem import (check_args, explore, method_program, query_constraints,
                                               symbolic_models, target_program)
from verispec.formal.symbolic import building
from verispec.testing import planted

pytest.importorskip("cvc5")


def _queries(method, V, L):
    """{output: SMT-LIB text of its whole query} for `method` at (V, L)."""
    with building():
        method, V, L, _, _ = check_args(method, V, L, None, 60)
        variables, _, (target, draft) = symbolic_models(V, (1, 1))
        deadline = time.monotonic() + 60
        tree = explore(method_program(method, target, draft, L + 1), variables, deadline)
        reference = explore(target_program(target, L + 1), variables, deadline)
        return {out: portfolio.smtlib(query_constraints(tree, reference, out, variables))
                for out in itertools.product(range(V), repeat=L + 1)}


@pytest.mark.parametrize("method, outputs, expected", [
    ("token", [(0, 0), (1, 0)], "unsat"),  # proved: equal for every pair
    (planted.BUGS["residual_p"](1), None, "sat"),  # lossy: a pair differs
])
def test_z3_and_cvc5_agree_where_both_answer(method, outputs, expected):
    queries = _queries(method, 2, 1)
    for output in outputs or sorted(queries):
        z3_answer = portfolio.solve_z3(queries[output], 20)
        cvc5_answer = portfolio.solve_cvc5(queries[output], 20)
        answered = [a[0] for a in (z3_answer, cvc5_answer) if a[0] != "unknown"]
        assert answered and set(answered) == {expected}, (output, z3_answer, cvc5_answer)


def test_cvc5_in_a_child_process_answers_and_interrupts_z3():
    text = _queries(planted.BUGS["residual_p"](1), 2, 1)[(0, 0)]
    import z3

    rival = portfolio.Rival(z3.parse_smt2_string(text), 20)
    try:
        rival.thread.join(timeout=30)
        assert rival.answered and rival.answer[0] == "sat"
        values = rival.answer[1].values
        assert values and all(0 <= v <= 1 for v in values.values())
    finally:
        rival.stop()
    assert rival.process.poll() is not None  # the child is gone


def test_a_proof_reports_which_solver_answered():
    result = prove(planted.BUGS["residual_p"](1), 2, 1, point_trials=0, workers=1, solvers="z3,cvc5")
    assert result.verdict == "counterexample" and "cvc5" in result.solver
    assert set(result.answered_by) <= {"z3", "cvc5"} and sum(result.answered_by.values()) >= 1
    assert "answered_by" in result.to_json() and "answered by" in result.summary()


def test_without_cvc5_the_portfolio_is_z3_alone(monkeypatch):
    monkeypatch.setattr(portfolio, "cvc5_version", lambda: None)
    assert portfolio.check_solvers(None) == ("z3",)
    assert "alone" in portfolio.portfolio_note(("z3",)) and "not installed" in portfolio.portfolio_note(("z3",))
    with pytest.raises(ValueError, match="solvers: cvc5 is not installed"):
        portfolio.check_solvers("z3,cvc5")
    with pytest.raises(ValueError, match="solvers"):
        portfolio.check_solvers("cvc5")


def test_when_cvc5_wins_the_race_its_answer_is_used_and_reported(monkeypatch):
    from verispec.formal import splitting

    def z3_silent(constraints, seconds):  # z3 never answers the whole query ...
        return "unknown", None, "timeout"

    def slow_split(self, region, conditions):  # ... nor its cells, until the rival has answered
        deadline = time.monotonic() + 60
        while not self.racing.answered and time.monotonic() < deadline:
            time.sleep(0.01)
        return "unknown", None, "canceled"

    monkeypatch.setattr(splitting, "check", z3_silent)
    monkeypatch.setattr(splitting.CellSplitter, "_split", slow_split)
    result = prove(planted.BUGS["residual_p"](1), 2, 1, point_trials=0, workers=1, solvers="z3,cvc5")
    assert result.verdict == "counterexample" and result.counterexample.confirmed
    assert result.answered_by == {"cvc5": 1} and "answered by cvc5 1" in result.summary()


def test_an_interrupt_that_cancels_a_model_eval_does_not_end_the_proof(monkeypatch):
    """cvc5's win interrupts whatever z3 call runs then; a model's eval raises "canceled" (seen at
    nss V = 3, L = 2): the rival's answer stands, the proof goes on."""
    from verispec.formal import splitting

    def z3_silent(constraints, seconds):
        return "unknown", None, "timeout"

    def split_canceled(self, region, conditions):  # a z3 call in progress when the rival answers
        deadline = time.monotonic() + 60
        while not self.racing.answered and time.monotonic() < deadline:
            time.sleep(0.01)
        raise z3.Z3Exception(b"canceled")

    monkeypatch.setattr(splitting, "check", z3_silent)
    monkeypatch.setattr(splitting.CellSplitter, "_split", split_canceled)
    result = prove(planted.BUGS["residual_p"](1), 2, 1, point_trials=0, workers=1, solvers="z3,cvc5")
    assert result.verdict == "counterexample" and result.counterexample.confirmed
    assert result.answered_by == {"cvc5": 1}
