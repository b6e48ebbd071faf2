"""Bad input at the command line: one clear line naming the argument (exit status 2), never a
traceback, and checked before anything slow runs (check, lp, prove, bench)."""

import json

import pytest

from verispec import cli


def _one_line(capsys, prefix):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(prefix), err
    return err


# ------------------------------------------------------------------------------------------------
# output files: every command's --json / bench's --output

@pytest.mark.parametrize("command", [["check", "--method", "token", "--vocab-size", "2", "--instances", "1"],
                                     ["lp", "--instances", "1"]])
def test_json_to_a_folder_or_under_a_file_is_refused_before_running(command, tmp_path, capsys):
    assert cli.main([*command, "--json", str(tmp_path)]) == 2
    _one_line(capsys, f"verispec {command[0]}: --json: ")
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    assert cli.main([*command, "--json", str(blocker / "out.json")]) == 2
    assert "is a file, not a folder" in _one_line(capsys, f"verispec {command[0]}: --json: ")


def test_json_into_a_new_folder_is_fine(tmp_path):
    out = tmp_path / "new" / "deeper" / "check.json"
    assert cli.main(["check", "--method", "token", "--vocab-size", "2", "--instances", "1", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["command"] == "check"


# ------------------------------------------------------------------------------------------------
# lp

@pytest.mark.parametrize("argv, name", [(["--vocab-size", "0"], "--vocab-size"), (["--seed", "-1"], "--seed"),
                                        (["--concentration", "0"], "--concentration"),
                                        (["--instances", "0"], "--instances"),
                                        (["--draft-length", "0"], "--draft-length")])
def test_lp_bad_values_are_one_line(argv, name, capsys):
    pytest.importorskip("cvxpy")
    assert cli.main(["lp", *argv]) == 2
    _one_line(capsys, f"verispec lp: {name}: ")


@pytest.mark.parametrize("command", [["lp", "--vocab-size", "x"], ["check", "--draft-length", "x"],
                                     ["check", "--num-paths", "-1"]])
def test_unparsable_values_are_argparse_errors_naming_the_argument(command, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(command)
    assert info.value.code == 2 and f"argument {command[1]}" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------
# prove (when the command is present)

def _has_prove():
    return "prove" in cli.build_parser()._subparsers._group_actions[0].choices


@pytest.mark.parametrize("argv, needle", [(["token", "--vocab-size", "1"], "vocab"),
                                          (["nope"], "unknown method 'nope'"),
                                          (["token", "--timeout", "-1"], "timeout"),
                                          (["token", "--draft-length", "0"], "draft"),
                                          (["no_such_module_for_verispec:rule"], "cannot import module")])
def test_prove_bad_arguments_are_one_line(argv, needle, capsys):
    if not _has_prove():
        pytest.skip("verispec prove is not in this build")
    pytest.importorskip("z3")
    assert cli.main(["prove", *argv]) == 2
    assert needle in _one_line(capsys, "verispec prove: ")


# ------------------------------------------------------------------------------------------------
# bench: model sources, device, seed and load failures, before any model is loaded

@pytest.fixture()
def torch_extra():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")


def test_bench_missing_target_path_is_one_line(torch_extra, tmp_path, capsys):
    missing = tmp_path / "nonexistent"
    assert cli.main(["bench", "--target", str(missing)]) == 2
    err = _one_line(capsys, "verispec bench: --target: ")
    assert "no such file or folder" in err and str(missing) in err


def test_bench_mistyped_builtin_name_suggests_the_right_one(torch_extra, capsys):
    assert cli.main(["bench", "--draft", "qwen2.5-coder-0.5b-instruct-q4km"]) == 2
    err = _one_line(capsys, "verispec bench: --draft: ")
    assert "did you mean 'qwen2.5-coder-0.5b-instruct-q4_k_m'" in err


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_bench_existing_path_that_is_not_a_model(torch_extra, kind, tmp_path, capsys):
    path = tmp_path / "thing"
    path.mkdir() if kind == "folder" else path.write_text("x")
    assert cli.main(["bench", "--target", str(path)]) == 2
    err = _one_line(capsys, "verispec bench: --target: ")
    assert ("no config.json" if kind == "folder" else "not a .gguf model file") in err


@pytest.mark.parametrize("device, needle", [("tpu", "not a torch device"), ("cuda:7", "cuda")])
def test_bench_bad_device(torch_extra, device, needle, capsys):
    import torch

    if device.startswith("cuda") and torch.cuda.device_count() > 7:
        pytest.skip("this machine has 8 GPUs")
    assert cli.main(["bench", "--device", device]) == 2
    assert needle in _one_line(capsys, "verispec bench: --device: ").lower()


@pytest.mark.parametrize("argv, name", [(["--seed", "-1"], "--seed"), (["--prompts", "0"], "--prompts"),
                                        (["--temperatures", "-1"], "--temperatures"),
                                        (["--batch-size", "0"], "--batch-size"),
                                        (["--dtype", "int8"], "--dtype")])
def test_bench_unparsable_values(argv, name, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["bench", *argv])
    assert info.value.code == 2 and f"argument {name}" in capsys.readouterr().err


def test_bench_output_folder_is_refused(torch_extra, tmp_path, capsys):
    assert cli.main(["bench", "--output", str(tmp_path)]) == 2
    _one_line(capsys, "verispec bench: --output: ")


class _Tokenizer:
    def __init__(self, vocab):
        self.vocab = vocab

    def get_vocab(self):
        return self.vocab


def test_bench_load_failure_is_one_line_naming_the_argument(torch_extra, monkeypatch, capsys):
    from verispec.bench import weights

    def load_model(name, **kwargs):
        if name == "someorg/missing-draft":
            raise OSError("We couldn't connect to 'https://huggingface.co' to load the files.\nCheck your "
                          "connection\n(a long transformers message)")
        return object(), _Tokenizer({"a": 0})

    monkeypatch.setattr(weights, "load_model", load_model)
    assert cli.main(["bench", "--target", "someorg/target", "--draft", "someorg/missing-draft", "--prompts", "1",
                     "--device", "cpu"]) == 2
    err = _one_line(capsys, "verispec bench: --draft: cannot load 'someorg/missing-draft': OSError: ")
    assert "couldn't connect" in err and "long transformers message" not in err


def test_bench_tokenizer_mismatch_is_one_line(torch_extra, monkeypatch, capsys):
    from verispec.bench import weights

    vocabs = {"someorg/target": {"a": 0}, "someorg/draft": {"b": 0}}
    monkeypatch.setattr(weights, "load_model", lambda name, **kwargs: (object(), _Tokenizer(vocabs[name])))
    assert cli.main(["bench", "--target", "someorg/target", "--draft", "someorg/draft", "--prompts", "1",
                     "--device", "cpu"]) == 2
    assert "differs from the target's" in _one_line(capsys, "verispec bench: --draft: ")
