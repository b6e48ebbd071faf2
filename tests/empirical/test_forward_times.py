"""benchmarks/forward_times.py on tiny models: its hooks count every forward the decoders make
(checked against the decoders' own counters) and split the wall time (no timing claims)."""

from __future__ import annotations

import os
import types

import pytest

from ..scripts import load_script

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec import bench  # noqa: E402

from .test_decode_tiny import tiny  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "forward_times.py")


@pytest.fixture(scope="module")
def script():
    return load_script(SCRIPT)


@pytest.mark.parametrize("runner", ["hf", "adaptive:L=3,pol=fixed", "block:L=2"])
def test_hooks_see_every_forward(script, runner):
    pair = types.SimpleNamespace(target=tiny(64, 0, head_scale=4.0), draft=tiny(64, 0, noise=0.1, head_scale=4.0))
    config = bench.BenchConfig(max_new_tokens=10, dtype="float32")
    spec = bench.parse_method(runner, 3, 1)
    prompt = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
    counts = (pair.target.forward_count, pair.draft.forward_count)
    run = script.time_runner(spec, pair, prompt, config, 0.0)
    made = (pair.target.forward_count - counts[0], pair.draft.forward_count - counts[1])
    assert (len(run["target_forwards"]), run["draft_forwards"]) == made and made[0] >= 1 and made[1] >= 1
    assert run["new_tokens"] == 10
    assert run["target_forwards"][0][0] >= prompt.shape[1] - 1  # the prompt is read first (with a draft or not)
    assert sum(run["draft_rows"].values()) == run["draft_forwards"]
    assert 0 < run["target_s"] + run["draft_s"] <= run["wall_s"] and run["other_s"] >= 0
