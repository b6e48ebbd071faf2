"""verispec.atomic: result files are written whole, and a run resumes only a file of its own settings."""

from __future__ import annotations

import json
import os

import pytest

from verispec.atomic import resume_json, write_json_atomic


def test_a_written_file_is_whole_and_leaves_no_temporary(tmp_path):
    path = str(tmp_path / "sub" / "r.json")
    write_json_atomic(path, {"b": 1, "a": [1, 2]})
    with open(path) as f:
        assert json.load(f) == {"a": [1, 2], "b": 1}
    assert os.listdir(tmp_path / "sub") == ["r.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path):
    path = str(tmp_path / "r.json")
    write_json_atomic(path, {"kept": True})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"bad": object()})  # not JSON: fails while writing the temporary
    with open(path) as f:
        assert json.load(f) == {"kept": True}
    assert os.listdir(tmp_path) == ["r.json"]


def test_a_run_resumes_a_file_of_its_settings_and_refuses_another(tmp_path):
    path = str(tmp_path / "r.json")
    settings = {"tokens": 64, "methods": ["a", "b"]}
    assert resume_json(path, settings) is None  # no file yet
    write_json_atomic(path, {**settings, "records": {"p/0": 1}})
    assert resume_json(path, settings)["records"] == {"p/0": 1}
    assert resume_json(path, settings, fresh=True) is None
    with pytest.raises(ValueError, match="output: .* other tokens"):
        resume_json(path, {**settings, "tokens": 32})
    with open(path) as f:
        assert json.load(f)["records"] == {"p/0": 1}  # refused, and left as it was
