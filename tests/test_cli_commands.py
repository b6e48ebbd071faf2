"""The thin `verispec` command: each subcommand is registered by its package, errors map to exit
statuses by their type, defaults come from the one place that defines them, and the bench's
options need no torch."""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap

import pytest

from verispec import cli, commandline
from verispec.bench.config import BatchedBenchSettings, BenchSettings
from verispec.integrations.verdict import IntegrationError
from verispec.reference.contract import RuleContractError
from verispec.testing import EngineContractError, SamplerContractError


def test_every_command_registers_itself_with_its_runner():
    parser = cli.build_parser()
    choices = parser._subparsers._group_actions[0].choices
    assert list(choices) == ["check", "lp", "prove", "check-sampler", "check-engine", "bench"]
    for command in cli.COMMANDS:
        sub = argparse.ArgumentParser().add_subparsers(dest="command")
        registered = command.add_parser(sub)
        func = registered.get_default("func")
        assert callable(func) or (isinstance(func, str) and ":" in func), command.__name__


def test_bench_defaults_are_the_configs():
    args = cli.build_parser().parse_args(["bench"])
    for name in ("target", "draft", "first_prompt", "draft_length", "num_paths", "dtype", "seed"):
        assert getattr(args, name) == getattr(BenchSettings, name), name
    for name in ("prompts", "max_new_tokens", "methods", "temperatures"):  # the run's config fills them
        assert getattr(args, name) is None, name
    text = " ".join(cli.build_parser()._subparsers._group_actions[0].choices["bench"].format_help().split())
    assert f"default {','.join(BenchSettings.methods)})" in text
    assert f"(default {BenchSettings.max_new_tokens}; with --batch-size {BatchedBenchSettings.max_new_tokens})" in text


@pytest.mark.parametrize("err, status", [(RuleContractError("broken"), 3), (ValueError("x: bad"), 2),
                                         (TypeError("x: bad"), 2), (RuntimeError("bug"), None),
                                         (KeyError("bug"), None), (IntegrationError("vllm.x was not found"), 2),
                                         (SamplerContractError("the function raised"), 3),
                                         (EngineContractError("generate raised"), 3)])
def test_exit_status_is_read_from_the_error_type(err, status):
    assert commandline.exit_status(err) == status


@pytest.mark.parametrize("parse, good, bad", [(commandline.open_unit, ("0.05", "1e-6"), ("0", "1", "nan", "x")),
                                              (commandline.positive_float, ("0.5", "2"), ("0", "-1", "nan", "x"))])
def test_the_shared_number_types(parse, good, bad):
    assert [parse(text) for text in good] == [float(text) for text in good]
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError, match="expected a number|must be"):
            parse(text)


def test_a_wrapped_contract_error_keeps_its_status():
    try:
        try:
            raise RuleContractError("verify: emitted no token")
        except RuleContractError as inner:
            raise ValueError("method: cannot build 'mine:rule'") from inner
    except ValueError as outer:
        assert commandline.exit_status(outer) == commandline.CONTRACT_ERROR


def _planted(monkeypatch, error):
    """Planted: `verispec lp` whose run raises `error`."""
    def run(args):
        raise error

    original = cli.certify.add_parser

    def add_parser(sub):
        parser = original(sub)
        parser.set_defaults(func=run)
        return parser

    monkeypatch.setattr(cli.certify, "add_parser", add_parser)


@pytest.mark.parametrize("error, status, line", [
    (ValueError("--vocab-size: must be >= 2"), 2, "verispec lp: --vocab-size: must be >= 2\n"),
    (RuleContractError("verify: emitted no token"), 3,
     "verispec lp: rule contract error (not a lossless verdict): verify: emitted no token\n")])
def test_an_error_a_command_lets_out_is_one_line_with_its_types_status(monkeypatch, capsys, error, status, line):
    _planted(monkeypatch, error)
    assert cli.main(["lp"]) == status
    assert capsys.readouterr().err == line


def test_an_error_that_is_not_a_report_keeps_its_traceback(monkeypatch):
    _planted(monkeypatch, RuntimeError("a bug"))
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main(["lp"])


def test_without_torch_the_commands_parse_and_bench_says_it_needs_the_extra():
    """In a child process that cannot import torch or transformers: `verispec bench --help` and
    `verispec check` run, and `verispec bench` is one line naming the torch extra (status 2)."""
    script = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("torch", "transformers"):
                    raise ImportError(f"No module named {name!r}")
        sys.meta_path.insert(0, Block())
        from verispec import cli
        try:
            cli.main(["bench", "--help"])
        except SystemExit as done:
            assert done.code == 0
        assert cli.main(["check", "--method", "token", "--vocab-size", "2", "--instances", "1"]) == 0
        print("status", cli.main(["bench", "--prompts", "1"]))
        print("torch", "torch" in sys.modules)
    """)
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr
    assert "status 2" in child.stdout and "torch False" in child.stdout
    assert "verispec bench needs the torch extra: No module named 'torch'" in child.stderr
