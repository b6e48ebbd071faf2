"""`verispec check --method pkg.module:attr`: a user's rule from a module, mixed with built-ins, in
float and rational arithmetic; contract errors and size-aware sweeps at the command line."""

import json
import sys
import textwrap

import pytest

from verispec import cli

RULES = textwrap.dedent("""
    from verispec.reference import drafters, methods

    def my_verify(target, draft_model, context, draft, rand):
        node = ()
        while draft.counts(node):
            x = draft.tokens(node)[0]
            p, q = target.probs(context + node), draft.proposal(node)
            if rand.bernoulli(min(1, p[x] / q[x])):
                node += (x,)
                continue
            residual = [max(pi - qi, 0) for pi, qi in zip(p, q)]
            total = sum(residual)
            return node + (rand.categorical([r / total for r in residual]),)
        return node + (rand.categorical(target.probs(context + node)),)

    def lossy_verify(target, draft_model, context, draft, rand):
        path = draft.paths[0]                                    # always accept
        return path + (rand.categorical(target.probs(context + path)),)

    def crashing_verify(target, draft_model, context, draft, rand):
        raise ZeroDivisionError("boom")

    def plain_drafter(draft_model, context, rand):
        return drafters.chain(2)(draft_model, context, rand)

    from verispec.testing import planted
    topk3 = planted.topk3_draft_raw_q(2)

    mine = methods.Method("mine", drafters.chain(draft_length=2), my_verify)
    lossy = methods.Method("lossy", drafters.chain(draft_length=2), lossy_verify)
    crashing = methods.Method("crashing", drafters.chain(draft_length=2), crashing_verify)
    undeclared = methods.Method("undeclared", plain_drafter, my_verify)
""")

SMALL = ["--vocab-size", "2", "--instances", "1"]


@pytest.fixture()
def rules(tmp_path, monkeypatch):
    (tmp_path / "cli_user_rules.py").write_text(RULES)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "cli_user_rules"
    sys.modules.pop("cli_user_rules", None)


@pytest.mark.parametrize("rational", [False, True])
def test_a_user_rule_from_a_module_is_checked(rules, rational, tmp_path, capsys):
    out = tmp_path / "check.json"
    argv = ["check", "--method", f"{rules}:mine", "--method", "token", "--instances", "2",
            "--vocab-sizes", "2,4", "--json", str(out)] + (["--rational"] if rational else [])
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert f"{rules}:mine" in text and "all methods lossless" in text
    payload = json.loads(out.read_text())
    mine, token = payload["results"]
    assert mine["method"] == f"{rules}:mine" and mine["num_tokens"] == 4  # chain(2) declares L = 2
    assert mine["passed"] and mine["status"] == "lossless"
    assert mine["instances"] == token["instances"] == 4  # 2 at V = 2, budget // 4**4 = 3 -> 2 at V = 4
    assert payload["instances_per_vocab_size"] == {"2": 2, "4": 2}
    if rational:
        assert mine["exact_zero"] and mine["max_tv"] == 0
    else:
        assert 0 <= mine["max_tv"] <= 1e-12


def test_a_lossy_user_rule_fails(rules, capsys):
    assert cli.main(["check", "--method", f"{rules}:lossy", *SMALL]) == 1
    out = capsys.readouterr().out
    assert "NOT lossless" in out and "CONTRACT" not in out


def test_a_broken_user_rule_is_a_contract_error(rules, tmp_path, capsys):
    out = tmp_path / "check.json"
    assert cli.main(["check", "--method", f"{rules}:crashing", "--method", "token", *SMALL,
                     "--json", str(out)]) == 3
    text = capsys.readouterr().out
    assert "CONTRACT" in text and "rule contract error (not a lossless verdict)" in text
    assert "the rule raised ZeroDivisionError: boom" in text and "instance   : check instance 0" in text
    assert "NOT lossless" not in text
    crashing, token = json.loads(out.read_text())["results"]
    assert crashing["status"] == "contract error" and "ZeroDivisionError" in crashing["contract_error"]
    assert token["status"] == "lossless"


def test_a_user_rule_without_a_declared_depth_needs_num_tokens(rules, capsys):
    assert cli.main(["check", "--method", f"{rules}:undeclared", *SMALL]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("verispec check: --num-tokens: ")
    assert "declares no draft depth" in err
    assert cli.main(["check", "--method", f"{rules}:undeclared", *SMALL, "--num-tokens", "4"]) == 0


@pytest.mark.parametrize("spec, match", [
    ("{mod}:missing", "has no attribute 'missing'"),
    ("no_such_module_for_verispec:rule", "cannot import module"),
    ("{mod}:my_verify", "cannot be called with no arguments"),
])
def test_a_method_spec_that_does_not_load_is_one_line(rules, spec, match, capsys):
    assert cli.main(["check", "--method", spec.format(mod=rules), *SMALL]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("verispec check: --method: ") and match in err


@pytest.mark.parametrize("argv, match", [
    (["--method", "nope"], "unknown method 'nope'"),
    (["--method", ""], "unknown method ''"),
    (["--vocab-sizes", "x"], "--vocab-sizes"),
    (["--vocab-sizes", "0,3"], "--vocab-sizes"),
    (["--vocab-sizes", ""], "--vocab-sizes"),
    (["--budget", "0"], "--budget"),
    (["--budget", "1.5"], "--budget"),
    (["--seed", "-1"], "--seed"),
    (["--num-tokens", "0"], "--num-tokens"),
    (["--instances", "0"], "--instances"),
])
def test_bad_check_arguments_are_named(argv, match, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["check", *argv])
    assert info.value.code == 2 and match in capsys.readouterr().err


def test_vocab_size_and_vocab_sizes_together_are_refused(capsys):
    assert cli.main(["check", "--vocab-size", "2", "--vocab-sizes", "2,3"]) == 2
    assert "--vocab-size" in capsys.readouterr().err


def test_the_default_sizes_catch_the_top3_raw_q_bug_that_v3_hides(rules, capsys):
    assert cli.main(["check", "--method", f"{rules}:topk3", "--instances", "1", "--vocab-size", "3"]) == 0
    capsys.readouterr()
    assert cli.main(["check", "--method", f"{rules}:topk3", "--instances", "1"]) == 1  # V = 3, 4, 5, 6
    assert "NOT lossless" in capsys.readouterr().out


def test_a_wrong_verify_signature_in_the_users_module_is_a_contract_error(tmp_path, monkeypatch, capsys):
    (tmp_path / "cli_bad_signature.py").write_text(
        "from verispec.reference import drafters, methods\n"
        "def verify(target, draft):\n    return (0,)\n"
        "rule = methods.Method('two_args', drafters.chain(1), verify)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert cli.main(["check", "--method", "cli_bad_signature:rule", *SMALL]) == 3
    finally:
        sys.modules.pop("cli_bad_signature", None)
    err = capsys.readouterr().err
    assert err.startswith("verispec check: rule contract error (not a lossless verdict): --method: ")
    assert "called as verify(target, draft_model, context, draft, rand)" in err
