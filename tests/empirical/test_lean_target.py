"""The lean forward run on the TARGET (bench ``tf=lean``): the engine decodes the same tokens with
it as with the transformers module's forward (chains, trees under a 4D mask, the prompt read with
the first draft, every storage, T = 0 and 1), and the bench parses, builds, records, describes and
keys its cost model by it."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from verispec import bench  # noqa: E402
from verispec.bench.costs import cost_key  # noqa: E402
from verispec.bench.drafts import QuantizedDrafts  # noqa: E402
from verispec.empirical import engine, methods  # noqa: E402
from verispec.empirical.speedups.lean_forward import LeanForward, lean_view  # noqa: E402
from verispec.empirical.speedups.quantize import quantize_draft  # noqa: E402

from .test_bench import CharTokenizer  # noqa: E402
from .test_lean_forward import VOCAB, small_model, token_ids  # noqa: E402


def _tiny_pair():
    return type("Pair", (), {"target": small_model(seed=1), "draft": small_model(seed=2), "tokenizer": CharTokenizer(VOCAB)})()


@pytest.mark.parametrize("storage", ["sequence", "static"])
@pytest.mark.parametrize("name, temperature", [("target_only", 1.0), ("adaptive", 0.0), ("block", 0.0),
                                               ("adaptive", 1.0), ("opt_tree", 0.0), ("opt_tree", 1.0)])
def test_the_engine_decodes_the_same_tokens_with_the_lean_target(name, temperature, storage):
    """Same tokens, and the same logits at every target forward (float rounding apart): the
    logits are the sharper check, since a tiny random model's tokens barely move with its p."""
    target, draft = small_model(seed=1), quantize_draft(small_model(seed=2))
    sizes = {"target_only": {}, "opt_tree": {"node_budget": 8}}
    method = methods.get(name, **sizes.get(name, {"draft_length": 3}))
    runs, seen = [], []
    target.logits_hooks.append(lambda lm, logits: seen[-1].append(logits.clone()))  # the view shares the list
    for model in (target, lean_view(target)):
        seen.append([])
        runs.append(engine.decode(model, draft, token_ids(8, 9), method, 20, temperature, uniforms=5, storage=storage))
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    assert runs[0].stats.target_forwards == runs[1].stats.target_forwards == len(seen[0]) == len(seen[1]) > 0
    for plain, lean in zip(*seen):
        torch.testing.assert_close(lean, plain, atol=1e-5, rtol=1e-5)


def test_bench_parses_tf():
    spec = bench.parse_method("adaptive:dq=8,df=scripted,tf=lean", 3, 2)
    assert (spec.target_forward, spec.draft_forward) == ("lean", "scripted")
    assert bench.parse_method("block", 3, 2).target_forward == "hf"
    assert bench.parse_method("target_only:tf=lean", 3, 2).label == "target_only:tf=lean"
    for bad in ("hf:tf=lean", "hf_prompt_lookup:tf=lean", "block:tf=scripted"):
        with pytest.raises(ValueError, match="methods"):
            bench.parse_method(bad, 3, 2)


def test_the_run_builds_one_lean_target_view_and_keys_its_costs_by_it():
    pair, drafts = _tiny_pair(), QuantizedDrafts()
    plain, lean = (bench.parse_method(text, 3, 2) for text in ("block:dq=8", "block:dq=8,tf=lean"))
    a, b = drafts.pair_for(plain, pair), drafts.pair_for(lean, pair)
    assert a.target is pair.target and isinstance(b.target.runner, LeanForward)
    assert b.target.model is pair.target.model and b.draft is a.draft  # one int8 draft for both
    assert drafts.pair_for(lean, pair).target is b.target  # built once per run
    config = bench.BenchConfig(prompts=1, max_new_tokens=4, dtype="float32")
    assert dict(cost_key(lean, b, config))["target_forward"] == "lean"
    assert "target_forward" not in dict(cost_key(plain, a, config))


def test_bench_runs_the_lean_target_with_the_same_tokens_and_says_so(tmp_path):
    prompts = [{"task_id": "t/0", "prompt": "abcab"}, {"task_id": "t/1", "prompt": "cabbage"}]
    config = bench.BenchConfig(prompts=2, max_new_tokens=8, temperatures=(0.0,), draft_length=3, dtype="float32",
                               methods=("target_only:tf=lean", "block:dq=8", "block:dq=8,tf=lean"))
    results = bench.run_bench(config, str(tmp_path / "tf.json"), pair=_tiny_pair(), prompts=prompts, plot=False)
    assert "stacked" in results["environment"]["target_forward"]["tf=lean"]
    for task in ("t/0", "t/1"):
        for plain_label, lean_label in (("target_only", "target_only:tf=lean"), ("block:dq=8", "block:dq=8,tf=lean")):
            plain = results["records"][f"{plain_label}|T=0|{task}"]
            lean = results["records"][f"{lean_label}|T=0|{task}"]
            assert lean["tokens"] == plain["tokens"] and lean["target_forwards"] == plain["target_forwards"] > 0
            assert lean["target_forward"] == "lean" and "target_forward" not in plain
