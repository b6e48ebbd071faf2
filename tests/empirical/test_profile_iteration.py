"""benchmarks/profile_iteration.py: the split of an iteration (synthetic timeline, exact), the
before/after comparison, and smoke runs on tiny models (no timing claims)."""

from __future__ import annotations

import json
import os

import pytest

from ..scripts import load_script

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "profile_iteration.py")


@pytest.fixture(scope="module")
def script():
    return load_script(SCRIPT)


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
    summary = script._summary([first, second])
    assert summary["verifier_overhead_fraction"] == pytest.approx((0.5 + 0.5 + 0.0 + 1.0) / 2 / 10.0)
    assert summary["non_forward_fraction"] == pytest.approx((2.0 + 1.0 + 1.0 + 3.0 + 0.5 + 0.5 + 1.0 + 1.0) / 2 / 10)


def test_param_parsing_and_before_after(script):
    assert script._param("block:draft_length=5") == ("block", "draft_length", 5)
    assert script._param("threshold=0.3") == (None, "threshold", 0.3)
    run = {"median": {"verifier_overhead_fraction": 0.02, "non_forward_fraction": 0.1,
                      "fraction_of_target_forward": {"draft_overhead": 0.05}}, "tokens": [[1, 2]]}
    old = {"median": {"verifier_overhead_fraction": 0.08, "non_forward_fraction": 0.3,
                      "fraction_of_target_forward": {"draft_overhead": 0.15}}, "tokens": [[1, 3]]}
    out = script.with_before({"methods": {"block": run, "hybrid": run}}, {"commit": "abc", "methods": {"block": old}})
    assert set(out["change"]) == {"block"} and out["before"]["commit"] == "abc"
    change = out["change"]["block"]
    assert change["verifier_overhead_fraction"] == {"before": 0.08, "after": 0.02}
    assert change["draft_overhead_fraction"] == {"before": 0.15, "after": 0.05}
    assert change["same_tokens"] is False


def test_smoke_run_on_tiny_models(script, tmp_path):
    before = tmp_path / "before.json"
    old = {"median": {"verifier_overhead_fraction": 0.5, "non_forward_fraction": 0.9,
                      "fraction_of_target_forward": {"draft_overhead": 0.2}}, "tokens": [[0] * 12]}
    before.write_text(json.dumps({"commit": "old", "methods": {"block": old}}))
    out = str(tmp_path / "after.json")
    result = script.main(["--tiny", "--tokens", "12", "--repeats", "2", "--method", "block", "--method",
                          "prompt_lookup", "--param", "block:draft_length=3", "--ops", "3", "--output", out,
                          "--before", str(before), "--label", "smoke"])
    stored = json.load(open(out))
    assert stored["tiny"] and stored["complete"] and stored["label"] == "smoke" and "cpu_capability" in stored
    assert set(stored["methods"]) == {"block", "prompt_lookup"} and set(stored["change"]) == {"block"}
    assert stored["methods"]["block"]["params"]["draft_length"] == 3
    for name, run in stored["methods"].items():
        assert len(run["runs"]) == 2 and run["tokens"] == result["methods"][name]["tokens"]
        assert run["runs"][0]["tokens"] == run["runs"][1]["tokens"]  # seeded: every repeat decodes the same
        parts = run["median"]["seconds_per_iteration"]
        assert set(parts) == set(script.PARTS) and all(v >= 0 for v in parts.values())
        assert parts["target_forward"] > 0 and parts["verifier"] > 0
        assert (parts["draft_forwards"] == 0) == (name == "prompt_lookup")
        assert 0 < len(run["top_ops"]["ops"]) <= 3
    assert stored["change"]["block"]["verifier_overhead_fraction"]["before"] == 0.5


def test_missing_before_file_fails_before_the_run(script, tmp_path):
    with pytest.raises(FileNotFoundError):
        script.main(["--tiny", "--tokens", "2", "--repeats", "1", "--before", str(tmp_path / "none.json"),
                     "--output", str(tmp_path / "x.json")])
    assert not (tmp_path / "x.json").exists()
