"""benchmarks/profile_iteration.py: the split of an iteration (synthetic timeline, exact) and a
smoke run on tiny models (no timing claims)."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "profile_iteration.py")


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("profile_iteration", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_split_of_a_synthetic_timeline(script):
    events = [("draft_start", 0.0), ("draftfw_start", 1.0), ("draftfw_end", 3.0), ("draftfw_start", 3.5),
              ("draftfw_end", 4.5), ("draft_end", 5.0), ("targetfw_start", 6.0), ("targetfw_end", 16.0),
              ("verify_start", 16.5), ("verify_end", 17.0), ("accept_start", 17.0), ("accept_end", 18.0),
              ("draft_start", 20.0), ("draft_end", 20.5), ("targetfw_start", 21.0), ("targetfw_end", 31.0),
              ("verify_start", 31.0), ("verify_end", 32.0), ("end", 33.0)]
    first, second = script.split_iterations(events)
    assert first == {"draft_forwards": 3.0, "draft_overhead": 2.0, "pre_target": 1.0, "target_forward": 10.0,
                     "post_target": 0.5, "verifier": 0.5, "bookkeeping": 3.0}
    assert second["draft_forwards"] == 0.0 and second["bookkeeping"] == 1.0 and second["target_forward"] == 10.0


@pytest.mark.parametrize("method, params", [("block", ["draft_length=3"]), ("prompt_lookup", [])])
def test_smoke_run_on_tiny_models(script, tmp_path, method, params):
    out = str(tmp_path / "p.json")
    args = ["--tiny", "--tokens", "6", "--method", method, "--output", out]
    args += [x for p in params for x in ("--param", p)]
    result = script.main(args)
    stored = json.load(open(out))
    assert stored["iterations"] == result["iterations"] >= 1 and stored["tiny"]
    parts = stored["seconds_per_iteration"]
    assert set(parts) == set(script.PARTS) and all(v >= 0 for v in parts.values())
    assert parts["target_forward"] > 0 and parts["verifier"] > 0
    assert (parts["draft_forwards"] == 0) == (method == "prompt_lookup")
    assert stored["verifier_overhead_fraction"] == pytest.approx(
        (parts["post_target"] + parts["verifier"]) / parts["target_forward"])
    assert "cpu_capability" in stored
