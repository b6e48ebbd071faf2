"""Simplified runners are named as such in bench tables and plots (docs/algorithms.md)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec import bench  # noqa: E402


def test_simplified_runners_say_so_and_others_keep_their_label():
    assert bench.display_name("lookahead:C=1,W=0") == "lookahead:C=1,W=0 (simplified: 1 window level)"
    assert bench.display_name("eagle:n=10") == "eagle:n=10 (EAGLE-style, fixed priors)"
    assert bench.display_name("block:L=5") == "block:L=5"
    assert bench.display_name("ouroboros:C=1,W=0") == "ouroboros:C=1,W=0 (simplified: 1 Jacobi level)"
    assert bench.display_name("opt_tree:n=10") == "opt_tree:n=10"


def test_table_shows_the_display_name():
    from rich.console import Console

    console = Console(width=300, record=True)
    console.print(bench.format_table([{"runner": "lookahead", "temperature": 0.0, "prompts": 1}]))
    assert "lookahead (simplified: 1 window level)" in console.export_text()
