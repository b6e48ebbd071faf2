"""`verispec prove` as a new user meets it: a user's Method or factory named as 'pkg.module:attr',
its own L and K in the report, flags that contradict them refused, a reproducing snippet that runs
as printed, and a reader that stops early (`| head -1`)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from verispec import cli
from verispec.formal import prove

ROOT = Path(__file__).resolve().parents[2]

USER_MODULE = """
from verispec.reference import drafters, methods
from verispec.testing import planted

def _rrs_verify(target, draft_model, context, draft, rand):
    return methods.get("rrs", draft_length=2, num_paths=2).verify(target, draft_model, context, draft, rand)

# A Method object whose drafter declares L = 2 and K = 2 (the Method's own params are empty).
two_paths = methods.Method("two_paths", drafters.iid_paths(2, 2), _rrs_verify)

def factory(draft_length=1, num_paths=1):
    return methods.Method("fac", drafters.iid_paths(draft_length, num_paths), _rrs_verify)

def lossy(draft_length=1):
    return planted.BUGS["always_accept"](draft_length)
"""


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    name = f"my_rules_{os.getpid()}"
    (tmp_path / f"{name}.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, tmp_path
    sys.modules.pop(name, None)


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def test_report_states_the_methods_own_L_and_K(user_module):
    name, _ = user_module
    # A short time limit: the header is what is checked, whatever the verdict.
    result = prove(f"{name}:two_paths", 2, timeout=0.5, point_trials=0, workers=1)
    assert (result.draft_length, result.num_paths, result.num_tokens) == (2, 2, 3)
    assert result.summary().startswith(f"{name}:two_paths: ") and "L=2, K=2, N=3" in result.summary()


def test_flags_that_contradict_the_method_are_refused(user_module, capsys):
    name, _ = user_module
    assert cli.main(["prove", f"{name}:two_paths", "--num-paths", "3"]) == 2
    err = capsys.readouterr().err
    assert "--num-paths: 3 differs from the method's own num_paths=2" in err
    assert cli.main(["prove", f"{name}:two_paths", "--draft-length", "1"]) == 2
    assert "--draft-length: 1 differs from the method's own draft_length=2" in capsys.readouterr().err
    with pytest.raises(ValueError, match="num_paths: 3 differs"):
        prove(f"{name}:two_paths", 2, num_paths=3)


def test_a_factory_with_parameters_is_built_with_the_flags(user_module):
    name, _ = user_module
    result = prove(f"{name}:factory", 2, draft_length=2, num_paths=2, timeout=0.5, point_trials=0, workers=1)
    assert result.method == f"{name}:factory(draft_length=2, num_paths=2)"
    assert (result.draft_length, result.num_paths) == (2, 2)
    assert prove(f"{name}:factory", 2, timeout=0.5, point_trials=0, workers=1).num_paths == 1


def test_the_printed_reproduction_runs_as_printed(user_module, capsys):
    name, folder = user_module
    assert cli.main(["prove", f"{name}:lossy", "--point-trials", "0", "--workers", "1"]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{name}:lossy(draft_length=1): COUNTEREXAMPLE at V=2, L=1, K=1")
    snippet = textwrap.dedent(out.split("reproduce:\n", 1)[1])
    assert f"from {name} import lossy" in snippet and "method = lossy(draft_length=1)" in snippet
    run = subprocess.run([sys.executable, "-c", snippet], cwd=folder, env=_env(), capture_output=True,
                         text=True, timeout=120)
    # It reproduces the failure: assert_lossless raises, nothing is undefined or missing.
    assert run.returncode != 0 and "LosslessnessError" in run.stderr, run.stderr
    assert "NameError" not in run.stderr and "ImportError" not in run.stderr


def test_a_builtin_counterexample_rebuilds_a_builtin_by_name():
    from verispec.formal._internal.counterexamples import repro_code
    from verispec.reference import methods

    code = repro_code({(): [1, 0]}, {(): [0, 1]}, 2, (1, 1), 2, methods.get("rrs", draft_length=1, num_paths=2))
    assert "method = methods.get('rrs', draft_length=1, num_paths=2)" in code


def test_a_reader_that_stops_early_gets_no_traceback():
    proc = subprocess.Popen([sys.executable, "-m", "verispec.cli", "prove", "token", "--workers", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), cwd=ROOT)
    proc.stdout.close()  # as `| head -1` does once it has its line
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
