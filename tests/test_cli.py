"""`verispec check`: table, JSON, and a non-zero exit when a method is not lossless."""

import json

import pytest

from verispec import cli
from verispec.reference import drafters, methods


def test_check_passes_and_writes_json(tmp_path, capsys):
    out = tmp_path / "check.json"
    status = cli.main(["check", "--method", "token", "--method", "gbv", "--instances", "2",
                       "--vocab-size", "2", "--json", str(out)])
    assert status == 0
    text = capsys.readouterr().out
    assert "token" in text and "gbv" in text and "all methods lossless" in text
    payload = json.loads(out.read_text())
    assert [r["method"] for r in payload["results"]] == ["token", "gbv"]
    assert all(r["passed"] and r["max_tv"] <= 1e-12 for r in payload["results"])


def test_check_rational_is_exactly_zero(tmp_path):
    out = tmp_path / "check.json"
    assert cli.main(["check", "--method", "block", "--rational", "--instances", "2", "--json", str(out)]) == 0
    result = json.loads(out.read_text())["results"][0]
    assert result["exact_zero"] and result["max_tv"] == 0


def test_check_fails_on_a_lossy_method(monkeypatch, capsys):
    def always_accept(target, draft_model, context, draft, rand):
        path = draft.paths[0]
        return path + (rand.categorical(target.probs(context + path)),)

    broken = lambda draft_length: methods.Method("token", drafters.chain(draft_length), always_accept,
                                                 {"draft_length": draft_length})
    monkeypatch.setattr(methods, "token", broken)  # the registry resolves "verispec.reference.methods:token" on use
    assert cli.main(["check", "--method", "token", "--instances", "1"]) == 1
    assert "NOT lossless" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["check", "--draft-length", "0"], ["check", "--method", "nope"],
                                  ["check", "--vocab-size", "x"]])
def test_check_rejects_bad_arguments(argv):
    with pytest.raises(SystemExit) as err:
        cli.main(argv)
    assert err.value.code == 2
