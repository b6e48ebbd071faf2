"""`verispec check` on rules declared lossy: reported "lossy" with the exact TV (float64 and
rational) and block efficiency, in the table and the JSON; an undeclared lossy rule still fails."""

import json
from fractions import Fraction

from verispec import cli
from verispec.check import check_method, make_instances
from verispec.reference import exact, methods, models
from verispec.reference.methods import Method

SMALL = ["--vocab-size", "3", "--instances", "2"]


def test_a_declared_lossy_rule_reports_float_and_exact_tv_that_agree():
    instances = make_instances(3, 3, seed=0)  # float64 instances (T = 1, greedy target, mixed)
    result = check_method("static_ensemble", instances, draft_length=2, num_paths=1, num_tokens=None)
    assert result.status == "lossy" and result.passed and result.lossy and not result.failures
    assert len(result.lossy_instances) == 3 and result.max_tv > 0.01
    for row in result.lossy_instances:  # the float64 law vs the exact law of the instance's exact twin
        assert abs(Fraction(row["tv_rational"]) - Fraction(row["tv"])) <= 1e-12
    assert Fraction(result.max_tv_rational) == max(Fraction(r["tv_rational"]) for r in result.lossy_instances)


def test_the_exact_tv_is_the_enumerated_one_on_rational_instances():
    instances = make_instances(3, 2, seed=1, rational=True)
    result = check_method("typical", instances, draft_length=1, num_paths=1, num_tokens=2)
    method = methods.get("typical", draft_length=1)
    expected = []
    for inst in instances:
        target, draft = inst.models()
        expected.append(exact.total_variation(exact.output_distribution(target, draft, method, inst.context, 2),
                                              exact.target_distribution(target, inst.context, 2)))
    assert [Fraction(r["tv_rational"]) for r in result.lossy_instances] == expected
    assert [r["block_efficiency"] for r in result.lossy_instances] == [
        float(exact.block_efficiency(*inst.models(), method, inst.context)) for inst in instances]


def test_the_same_rule_not_declared_lossy_fails():
    declared = methods.get("fsd", draft_length=2, divergence_threshold=0.3)
    undeclared = Method("fsd_undeclared", declared.draft, declared.verify, dict(declared.params))
    instances = make_instances(3, 2, seed=0)
    assert check_method(declared, instances, 2, 1, None).status == "lossy"
    failed = check_method(undeclared, instances, 2, 1, None)
    assert failed.status == "NOT lossless" and not failed.passed and failed.failures


def test_a_lossless_rule_declared_lossy_is_reported_with_tv_0():
    token = methods.get("token", draft_length=2)
    declared = Method("token_declared", token.draft, token.verify, dict(token.params), lossy=True)
    result = check_method(declared, make_instances(3, 2, seed=0, rational=True), 2, 1, None)
    assert result.status == "lossy" and result.max_tv_rational == "0"


def test_cli_table_and_json_say_lossy_with_the_tv(tmp_path, capsys):
    out = tmp_path / "check.json"
    status = cli.main(["check", "--method", "static_ensemble", "--method", "token", *SMALL, "--rational",
                       "--json", str(out)])
    text = capsys.readouterr().out
    assert status == 0
    assert "LOSSY" in text and "static_ensemble: lossy (declared): max TV" in text and "block efficiency" in text
    assert "but those declared lossy: static_ensemble" in text
    rows = {r["method"]: r for r in json.loads(out.read_text())["results"]}
    lossy = rows["static_ensemble"]
    assert lossy["status"] == "lossy" and lossy["lossy"] and lossy["passed"]
    assert float(Fraction(lossy["max_tv_rational"])) == lossy["max_tv"] and lossy["max_tv"] > 0
    assert rows["token"]["status"] == "lossless" and not rows["token"]["lossy"]


def test_exact_twin_is_exact_and_within_round_off():
    base = models.temperature(models.random_tree(4, 3), 0.5)
    twin = models.exact_twin(base)
    probs = twin.probs((1, 2))
    assert twin.exact and sum(probs) == 1 and all(isinstance(x, Fraction) for x in probs)
    assert max(abs(float(a) - b) for a, b in zip(probs, base.probs((1, 2)))) <= 1e-15
    rational = models.random_tree(3, 1, rational=True)
    assert models.exact_twin(rational) is rational
