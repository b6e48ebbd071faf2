"""benchmarks/explain_divergences.py on tiny fp32 models: it claims a near-tie only for a flip it
reproduces in the exact forwards.

fp32 tiny models never diverge by themselves, so a hook on the target plants the numerics of a
near-tie at one position: a 1-row forward ranks the top token a over the runner-up b by a small
gap, a multi-row forward ranks b over a. The bench then reports a divergence for block
verification; the script must reproduce it, in the block run's multi-row forward and target-only's
1-row forward. A divergence that was never produced (a record edited after the run, as a flip
read off the wrong forward would be) must come out "not reproduced".
"""

from __future__ import annotations

import os

import pytest

from ..scripts import load_script

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec import bench  # noqa: E402

from .test_bench import PROMPTS, config, tiny_pair  # noqa: E402,F401

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "explain_divergences.py")
TASK = PROMPTS[0]


@pytest.fixture(scope="module")
def explain_script():
    return load_script(SCRIPT)


def _flip(scores, gap: float, one_row: bool) -> None:
    """In place on one node's logits [V]: a 1-row forward ranks the top token a over the runner-up
    b by `gap`, any other forward b over a."""
    top = scores.topk(2)
    a, b = int(top.indices[0]), int(top.indices[1])
    scores[b] = scores[a] - gap if one_row else scores[a] + gap


def _plant(model, position: int, gap: float):
    """At `position`, 1-row forwards rank the top token over the runner-up by `gap`, multi-row
    forwards the runner-up over the top token by `gap` (a forward hook replacing the logits)."""

    def hook(module, args, kwargs, output):
        ids = kwargs["input_ids"]
        m = ids.shape[1]
        positions = kwargs.get("position_ids")
        if positions is None:
            start = output.past_key_values.get_seq_length() - m  # the cache after this forward's append
            positions = torch.arange(start, start + m).unsqueeze(0)
        positions = positions.reshape(-1)[-m:]
        logits = output.logits.clone()
        k = logits.shape[1]
        for j in (positions == position).nonzero().flatten().tolist():
            if j < m - k:
                continue
            _flip(logits[0, j - (m - k)], gap, m == 1)
        output.logits = logits
        return output

    return model.model.register_forward_hook(hook, with_kwargs=True)


def _bench_with_plant(tiny_pair, tmp_path, gap):
    n = len(TASK["prompt"])
    handle = _plant(tiny_pair.target, n + 3, gap)  # decides generated token 4
    try:
        results = bench.run_bench(config(methods=("block",), temperatures=(0.0,), max_new_tokens=10),
                                  str(tmp_path / "b.json"), pair=tiny_pair, prompts=[TASK], plot=False)
    finally:
        handle.remove()
    (divergence,) = {r["runner"]: r for r in results["summary"]}["block"]["divergences"]
    assert divergence["index"] == 4
    return results, handle


def _explain(explain_script, tiny_pair, results, gap):
    n = len(TASK["prompt"])
    handle = _plant(tiny_pair.target, n + 3, gap) if gap is not None else None  # the numerics, re-run
    try:
        return explain_script.explain(results, tiny_pair, {TASK["task_id"]: TASK["prompt"]})
    finally:
        if handle is not None:
            handle.remove()


def test_a_planted_near_tie_flip_is_reproduced(explain_script, tiny_pair, tmp_path):
    results, _ = _bench_with_plant(tiny_pair, tmp_path, 0.01)
    (item,) = _explain(explain_script, tiny_pair, results, 0.01)
    assert item["verdict"] == "reproduced near-tie" and item["explained"]
    assert item["method"]["rows"] > 1 and item["target_only"]["rows"] == 1  # the exact forwards
    assert item["method"]["gap"] == pytest.approx(-0.01, abs=1e-4)
    assert item["target_only"]["gap"] == pytest.approx(0.01, abs=1e-4)
    assert item["method"]["forwards_matching"] == 1 == item["target_only"]["forwards_matching"]


def test_a_wide_flip_is_reproduced_but_not_called_a_near_tie(explain_script, tiny_pair, tmp_path):
    results, _ = _bench_with_plant(tiny_pair, tmp_path, 2.0)
    (item,) = _explain(explain_script, tiny_pair, results, 2.0)
    assert item["verdict"] == "reproduced, not a near-tie" and not item["explained"]


def test_a_flip_that_does_not_reproduce_is_not_claimed(explain_script, tiny_pair, tmp_path):
    results, _ = _bench_with_plant(tiny_pair, tmp_path, 0.01)
    (item,) = _explain(explain_script, tiny_pair, results, None)  # re-run without the numerics
    assert item["verdict"] == "not reproduced" and not item["explained"]
    assert not item["method"]["reproduced"] and item["target_only"]["reproduced"]
    # a flip read off the wrong forward (the old script's k-row forwards of target-only's prefix)
    # would not be claimed either: the fresh 1-row forward is reported, never used as evidence
    assert "argmax" in item["fresh_1_row"]


def _plant_batched(model, position: int, gap: float):
    """`_plant` for batched forwards ([B, m] padded rows or [1, Q] packed nodes, position ids
    given): at every row's node at `position`, a forward feeding one node per row (batched
    target-only) ranks the top token a over the runner-up b by `gap`, any other forward b over a."""

    def hook(module, args, kwargs, output):
        B, m = kwargs["input_ids"].shape
        positions = kwargs.get("position_ids")  # absent only in a prefill of rows of one length
        if positions is None:
            start = output.past_key_values.get_seq_length() - m
            positions = torch.arange(start, start + m).expand(B, m)
        logits = output.logits.clone()  # [B, k, V]: the last k columns
        k = logits.shape[1]
        for row, j in (positions == position).nonzero().tolist():
            if j < m - k:
                continue
            _flip(logits[row, j - (m - k)], gap, m == 1)
        output.logits = logits
        return output

    return model.model.register_forward_hook(hook, with_kwargs=True)


def _batched_with_plant(tiny_pair, tmp_path, position, gap):
    from verispec.bench import batched

    cfg = batched.BatchedBenchConfig(prompts=2, max_new_tokens=20, batch_sizes=(2,), methods=("block",),
                                     temperatures=(0.0,), dtype="float32", draft_length=3)
    handle = _plant_batched(tiny_pair.target, position, gap)
    try:
        return batched.run_batched_bench(cfg, str(tmp_path / "batched.json"), pair=tiny_pair, prompts=PROMPTS,
                                         plot=False)
    finally:
        handle.remove()


def test_batched_near_tie_flips_are_reproduced_in_both_layouts(explain_script, tiny_pair, tmp_path):
    position = max(len(p["prompt"]) for p in PROMPTS) + 3  # past every prompt: a generated token
    results = _batched_with_plant(tiny_pair, tmp_path, position, 0.01)
    assert explain_script.is_batched(results)
    rows = {r["runner"]: r for r in results["summary"]}
    assert rows["block/vanilla"]["greedy_match_rate"] < 1 and rows["block/packed"]["greedy_match_rate"] < 1
    handle = _plant_batched(tiny_pair.target, position, 0.01)  # the numerics, re-run
    try:
        found = explain_script.explain_batched(results, tiny_pair, PROMPTS)
    finally:
        handle.remove()
    expected = {(runner, row, position - len(PROMPTS[row]["prompt"]) + 1)
                for runner in ("block/vanilla", "block/packed") for row in (0, 1)}
    assert {(item["runner"], item["row"], item["index"]) for item in found} == expected
    for item in found:
        assert item["verdict"] == "reproduced near-tie" and item["explained"], item
        assert item["method"]["rows"] > 1 and item["target_only"]["rows"] == 1
        assert item["method"]["gap"] == pytest.approx(-0.01, abs=1e-4)
        assert item["task_id"] == PROMPTS[item["row"]]["task_id"]


def test_a_batched_flip_that_does_not_reproduce_is_not_claimed(explain_script, tiny_pair, tmp_path):
    position = max(len(p["prompt"]) for p in PROMPTS) + 3
    results = _batched_with_plant(tiny_pair, tmp_path, position, 0.01)
    found = explain_script.explain_batched(results, tiny_pair, PROMPTS)  # re-run without the numerics
    assert found and all(item["verdict"] == "not reproduced" and not item["explained"] for item in found)
    assert all(item["target_only"]["reproduced"] and not item["method"]["reproduced"] for item in found)


def _lookahead_bench(tiny_pair, tmp_path, gap):
    """Lookahead (a phrase-pool runner) on both prompts at T = 0; with `gap`, a near-tie planted at
    the second prompt's generated token 4, whose drafts come from the pool the first prompt filled."""
    position = len(PROMPTS[1]["prompt"]) + 3
    handle = _plant(tiny_pair.target, position, gap) if gap is not None else None
    try:
        results = bench.run_bench(config(methods=("lookahead",), temperatures=(0.0,), max_new_tokens=10),
                                  str(tmp_path / "pool.json"), pair=tiny_pair, prompts=PROMPTS, plot=False)
    finally:
        if handle is not None:
            handle.remove()
    return results, position


def test_pool_replay_rebuilds_the_pool_the_bench_had(explain_script, tiny_pair, tmp_path):
    results, _ = _lookahead_bench(tiny_pair, tmp_path, None)
    cfg = explain_script.config_of(results, bench.BenchConfig)
    order = [(p["task_id"], explain_script.encode_prompt(tiny_pair, p["prompt"])) for p in PROMPTS] + [("next", None)]
    replay = explain_script.PoolReplay("lookahead", tiny_pair, cfg, order, results["records"])
    pools, report = replay.before("next")
    assert report == {"prompts_rerun": 2, "tokens_match": True, "first_mismatch": None}
    saved = results["pools"]["lookahead|T=0"]  # the bench's pool after its last record
    assert saved["table"] and pools["lookahead", 0.0].state() == saved
    assert not explain_script.PoolReplay("lookahead", tiny_pair, cfg, order, results["records"]).before("t/0")[0]


def test_a_policy_runner_is_replayed_with_the_calibration_it_carried(explain_script, tiny_pair, tmp_path,
                                                                    monkeypatch):
    """pol=auto carries a PolicyMemory across prompts: the replay rebuilds it from the earlier
    prompts (their tokens checked against the records), and hands out a copy, not the memory."""
    from verispec.bench.costs import recorded_spec
    from verispec.empirical.speedups.policy import PolicyMemory

    monkeypatch.setenv("VERISPEC_COST_CACHE", str(tmp_path / "costs"))
    results = bench.run_bench(config(methods=("adaptive",), temperatures=(0.0,), max_new_tokens=10),
                              str(tmp_path / "policy.json"), pair=tiny_pair, prompts=PROMPTS, plot=False)
    cfg = explain_script.config_of(results, bench.BenchConfig)
    spec = recorded_spec("adaptive", results, cfg.draft_length, cfg.num_paths)
    assert spec.param("policy") == "auto" and not explain_script.uses_pool("adaptive")
    order = [(p["task_id"], explain_script.encode_prompt(tiny_pair, p["prompt"])) for p in PROMPTS] + [("next", None)]
    replay = explain_script.PoolReplay("adaptive", tiny_pair, cfg, order, results["records"], spec)
    pools, report = replay.before("next")
    assert report == {"prompts_rerun": 2, "tokens_match": True, "first_mismatch": None}
    memory = pools["adaptive", 0.0]
    assert isinstance(memory, PolicyMemory) and float(memory.counts["chain_seen"].sum()) > 0  # learned, carried
    assert memory is not replay.pools["adaptive", 0.0]


def test_a_phrase_pool_near_tie_is_reproduced_from_the_warm_pool(explain_script, tiny_pair, tmp_path):
    results, position = _lookahead_bench(tiny_pair, tmp_path, 0.01)
    (divergence,) = {r["runner"]: r for r in results["summary"]}["lookahead"]["divergences"]
    assert divergence["task_id"] == PROMPTS[1]["task_id"] and divergence["index"] == 4
    handle = _plant(tiny_pair.target, position, 0.01)  # the numerics, re-run
    try:
        (item,) = explain_script.explain(results, tiny_pair, {p["task_id"]: p["prompt"] for p in PROMPTS})
        results["records"][f"lookahead|T=0|{PROMPTS[0]['task_id']}"]["tokens"][0] += 1  # an edited record
        (edited,) = explain_script.explain(results, tiny_pair, {p["task_id"]: p["prompt"] for p in PROMPTS})
    finally:
        handle.remove()
    assert item["verdict"] == "reproduced near-tie" and item["explained"], item
    assert item["pool"] == {"prompts_rerun": 1, "tokens_match": True, "first_mismatch": None}
    assert item["method"]["rows"] > 1 and item["target_only"]["rows"] == 1
    assert edited["verdict"] == "not reproduced" and not edited["explained"]
    assert edited["pool"]["first_mismatch"] == PROMPTS[0]["task_id"]
