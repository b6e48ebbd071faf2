"""`prove --tv-bound`: a TV bound proved for every pair at a fixed size, a planted false bound refuted
with a pair confirmed in exact arithmetic, and EXPR parsed without eval."""

from __future__ import annotations

import json
from ast import literal_eval
from fractions import Fraction

import pytest

from verispec import cli
from verispec.formal.bound_expr import parse_bound
from verispec.formal.tv_bound import iteration_tv, prove_tv_bound
from verispec.reference import methods, models

FSD_TV = methods.get("fsd", draft_length=1, divergence_threshold=Fraction(1, 4), divergence="tv")


@pytest.mark.parametrize("method, bound", [("static_ensemble", "(1 - w) * tv_pq"),
                                           (methods.get("static_ensemble", draft_length=1,
                                                        ensemble_weight=Fraction(1, 3)), "(1 - w) * tv_pq"),
                                           (FSD_TV, "min(T, tv_pq)"),
                                           ("token", "0")])
def test_true_bounds_are_proved_for_every_pair(method, bound):
    result = prove_tv_bound(method, bound, vocab_size=2, draft_length=1, timeout=60)
    assert result.proved, result.summary()
    assert "for every target/draft pair at V=2, L=1" in result.claim


@pytest.mark.parametrize("method, bound", [("static_ensemble", "(1 - w) * tv_pq / 2"),  # planted: half the truth
                                           (FSD_TV, "min(T, tv_pq) / 2"),
                                           ("static_ensemble", "0")])
def test_false_bounds_are_refuted_with_a_pair_confirmed_in_fractions(method, bound):
    result = prove_tv_bound(method, bound, vocab_size=2, draft_length=1, timeout=60)
    assert result.verdict == "counterexample", result.summary()
    cx = result.counterexample
    target = models.table({literal_eval(k): [Fraction(x) for x in v] for k, v in cx["target"].items()},
                          default=[Fraction(1, 2)] * 2, vocab_size=2)
    draft = models.table({literal_eval(k): [Fraction(x) for x in v] for k, v in cx["draft"].items()},
                         default=[Fraction(1, 2)] * 2, vocab_size=2)
    resolved = methods.get(method, draft_length=1) if isinstance(method, str) else method
    tv, _ = iteration_tv(resolved, target, draft, (), 2)  # recomputed here, in Fractions
    tv_pq = sum(max(a - b, 0) for a, b in zip(target.probs(()), draft.probs(())))
    w = Fraction(resolved.params.get("ensemble_weight", 0))
    T = Fraction(resolved.params.get("divergence_threshold", 0))
    expected_bound = {"(1 - w) * tv_pq / 2": (1 - w) * tv_pq / 2, "min(T, tv_pq) / 2": min(T, tv_pq) / 2, "0": 0}[bound]
    assert tv == Fraction(cx["tv"]) and Fraction(cx["bound"]) == expected_bound and tv > expected_bound
    assert "iteration_tv(method, target, draft" in cx["code"]


def test_at_l_2_the_first_position_tv_alone_is_refuted():
    # One step's (1 - w) TV(p, q) does not bound two positions: the second adds its own TV.
    result = prove_tv_bound("static_ensemble", "(1 - w) * tv_pq", vocab_size=2, draft_length=2, timeout=60)
    assert result.verdict == "counterexample", result.summary()


def test_a_rule_in_float_arithmetic_is_unknown_not_proved():
    result = prove_tv_bound("typical", "1", vocab_size=2, draft_length=1, timeout=30)
    assert result.verdict == "unknown" and "cannot be run symbolically" in result.reason


@pytest.mark.parametrize("text, match", [("__import__('os')", "only min"), ("w.real", "Attribute"),
                                         ("x + 1", "unknown name 'x'"), ("'a'", "not a number"),
                                         ("tv_pq ** 99", "integer exponent"), ("tv_pq <= 1", "Compare"),
                                         ("(1 - w", "cannot parse"), ("", "expected an expression"),
                                         ("abs(w, w)", "abs")])
def test_the_bound_grammar_refuses_everything_else(text, match):
    with pytest.raises(ValueError, match=match):
        parse_bound(text, {"w", "tv_pq"})


def test_the_bound_evaluates_exactly_and_in_z3():
    bound = parse_bound("max(0.1, min(w, 1 - w)) * tv_pq ** 2 + abs(-w) / 2", {"w", "tv_pq"})
    env = {"w": Fraction(1, 3), "tv_pq": Fraction(1, 2)}
    assert bound.exact(env) == Fraction(1, 3) * Fraction(1, 4) + Fraction(1, 6)
    import z3

    assert z3.simplify(bound.z3(env)) == z3.RealVal(Fraction(1, 12) + Fraction(1, 6))
    assert bound.names == frozenset({"w", "tv_pq"})


def test_cli_exit_status_and_json(tmp_path, capsys):
    out = tmp_path / "tv.json"
    assert cli.main(["prove", "static_ensemble", "--draft-length", "1", "--tv-bound", "(1 - w) * tv_pq",
                     "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["verdict"] == "proved" and record["parameters"]["w"] == "1/2"
    assert cli.main(["prove", "static_ensemble", "--draft-length", "1", "--tv-bound", "(1 - w) * tv_pq / 2"]) == 1
    assert "COUNTEREXAMPLE" in capsys.readouterr().out
    assert cli.main(["prove", "static_ensemble", "--tv-bound", "open('x')"]) == 2
    assert "--tv-bound" in capsys.readouterr().err
