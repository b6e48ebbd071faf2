"""docs/engine.md's table of host synchronisations per iteration is a count, not typed: the table
is the markdown of the committed JSON (benchmarks/sync_counts.py), and a fresh count on tiny models
(16 tokens) gives the JSON's rows: six of them in the default suite, every method in the slow one."""

from __future__ import annotations

import json
import os

import pytest

from ..scripts import load_script

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
SCRIPT = os.path.join(ROOT, "benchmarks", "sync_counts.py")
#: The rows counted afresh in the default suite: the one-sync methods, a tree, an adaptive chain.
ROWS = ("target_only", "token", "block", "gbv", "opt_tree", "adaptive")


@pytest.fixture(scope="module")
def script():
    return load_script(SCRIPT)


@pytest.fixture(scope="module")
def committed():
    with open(os.path.join(ROOT, "benchmarks", "results", "sync_counts_cpu.json"), encoding="utf-8") as handle:
        return json.load(handle)["counts"]


def test_the_documented_table_is_the_committed_count(script, committed):
    with open(os.path.join(ROOT, "docs", "engine.md"), encoding="utf-8") as handle:
        assert script.markdown(committed) in handle.read()
    for name in ("target_only", "token", "block", "gbv"):  # the stop flags only, after the first iteration
        assert set(committed[name]["T=0"][1:]) == {1} and set(committed[name]["T=1"][1:]) == {1}


def _fresh(script, names):
    target, draft = script.tiny_pair()
    return {name: {f"T={T:g}": script.count(target, draft, script.PROMPT, name, 16, T) for T in (0.0, 1.0)}
            for name in names}


def test_a_fresh_count_gives_the_committed_rows(script, committed):
    fresh = _fresh(script, ROWS)
    assert fresh == {name: committed[name] for name in ROWS}


@pytest.mark.slow
def test_a_fresh_count_gives_every_committed_row(script, committed):
    assert script.table(tokens=16) == committed
