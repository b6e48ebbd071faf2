"""benchmarks/gpu_replay.py on tiny fp32 models (CPU): a pair with other random weights, replaying a
trace recorded on the first pair, makes the recorded run's forwards and emits its tokens; a trace
that lacks one forward, or holds one too many, is refused.

The replay pair alone emits other tokens (checked), so the equality is the replay's doing.
"""

from __future__ import annotations

import os
import types

import pytest

from ..scripts import load_script

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec import bench  # noqa: E402
from verispec.bench import batched  # noqa: E402

from .test_bench import PROMPTS, CharTokenizer  # noqa: E402
from .test_decode_tiny import tiny  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "gpu_replay.py")
CONFIG = bench.BenchConfig(prompts=2, max_new_tokens=10, methods=("ouroboros_phrase", "lookahead", "block", "hf"),
                           temperatures=(0.0,), draft_length=3, num_paths=2, dtype="float32")
BATCHED = batched.BatchedBenchConfig(prompts=2, max_new_tokens=8, batch_sizes=(1, 2), batches=1,
                                     methods=("block",), temperatures=(0.0,), draft_length=3, dtype="float32")


@pytest.fixture(scope="module")
def script():
    return load_script(SCRIPT)


def _pair(seed):
    return types.SimpleNamespace(target=tiny(64, seed, head_scale=4.0),
                                 draft=tiny(64, seed, noise=0.1, head_scale=4.0), tokenizer=CharTokenizer(64))


@pytest.fixture(scope="module")
def recorded(script, tmp_path_factory):
    folder = tmp_path_factory.mktemp("replay")
    out = {}
    for name, config in (("ouroboros", CONFIG), ("batched", BATCHED)):
        out[name] = script.record_run(name, config, _pair(0), PROMPTS, str(folder / f"{name}.json"))
    return out


@pytest.mark.parametrize("name,config", [("ouroboros", CONFIG), ("batched", BATCHED)])
def test_replay_on_other_weights_emits_the_recorded_tokens(script, recorded, tmp_path, name, config):
    results, trace = recorded[name]
    alone = script.run_preset(name, config, _pair(7), PROMPTS, str(tmp_path / "alone.json"), plot=False)
    assert script.tokens_of(alone) != script.tokens_of(results)  # the other weights decide otherwise
    replayed = script.replay_run(name, config, _pair(7), PROMPTS, trace, results, str(tmp_path / "r.json"),
                                 plot=False)
    assert script.tokens_of(replayed) == script.tokens_of(results)
    assert replayed["projection"]["forwards_replayed"] == {role: len(trace[role]) for role in script.ROLES}
    # Every record makes the forwards the recorded one made.
    for key, record in results["records"].items():
        assert replayed["records"][key]["target_forwards"] == record["target_forwards"]
        assert replayed["records"][key]["draft_forwards"] == record["draft_forwards"]


@pytest.mark.parametrize("edit", ["drop", "extra"])
def test_a_trace_out_of_step_is_refused(script, recorded, tmp_path, edit):
    results, trace = recorded["ouroboros"]
    target = list(trace["target"])
    if edit == "drop":
        del target[len(target) // 2]
    else:
        target.append(target[-1])
    with pytest.raises(script.ReplayDesync):
        script.replay_run("ouroboros", CONFIG, _pair(7), PROMPTS, {**trace, "target": target}, results,
                          str(tmp_path / "r.json"), plot=False)


def test_replayed_logits_give_the_recorded_token_its_probability(script):
    p = torch.tensor([[1 / 64 + 1e-3, 0.4, 0.999999, 1.0]])  # [B, q]
    x = script._logit(p, 64)
    logits = torch.zeros(1, 4, 64)
    logits[..., 5] = x
    probs = torch.softmax(logits, -1)[..., 5]
    assert torch.allclose(probs[:, :3], p[:, :3], rtol=1e-5)
    assert bool((logits.argmax(-1) == 5).all())
