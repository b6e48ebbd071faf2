"""Honest figures of `verispec bench` (tiny fp32 models, no timing claims).

Where a test needs to know which phase a second belongs to, it plants known sleeps in chosen
target forwards (a forward hook) and checks the phase they land in: lower bounds only, so a
loaded machine cannot make them fail. Each test fails on the bench's former bookkeeping (the
peer's decode time as its wall time minus our prefills; e2e as decode plus a memoised prefill
shared through the file; the peer's tau spread evenly; block efficiency with the peer's prefill
call in its denominator).
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import time
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec import bench  # noqa: E402
from verispec.empirical import engine  # noqa: E402
from verispec.empirical.speedups import hardware  # noqa: E402
from verispec.bench.dispatch import bench_storage  # noqa: E402
from verispec.bench.peer import call_tokens, hf_assisted  # noqa: E402

from .test_bench import PROMPTS, config, tiny_pair  # noqa: E402,F401

SLOW_PREFILL, SLOW_STEP = 0.4, 0.3


def _sleepy_decode(monkeypatch, pair, reads=None, reads_of=0):
    """Every runner's first target forward sleeps SLOW_PREFILL s and its third SLOW_STEP s;
    `reads` collects the number of tokens of each runner's first target forward on prompts of
    `reads_of` tokens (not the warm-up's)."""
    inner = bench.run_method

    def decode(spec, pair_, prompt, *args, **kwargs):
        calls = []

        def hook(module, args_, output):
            calls.append(1)
            if len(calls) == 1:
                time.sleep(SLOW_PREFILL)
            elif len(calls) == 3:
                time.sleep(SLOW_STEP)

        def pre(module, args_, kwargs_):
            if not calls and reads is not None and prompt.shape[-1] == reads_of:
                reads.append((spec.label, int(kwargs_["input_ids"].shape[-1])))

        handles = [pair.target.model.register_forward_hook(hook, prepend=True),  # before PhaseClock's
                   pair.target.model.register_forward_pre_hook(pre, with_kwargs=True)]
        try:
            return inner(spec, pair_, prompt, *args, **kwargs)
        finally:
            for handle in handles:
                handle.remove()

    monkeypatch.setattr(importlib.import_module("verispec.bench.run"), "run_method", decode)  # what `run_bench` calls


def test_each_span_is_split_where_the_runner_has_read_the_prompt(tiny_pair, tmp_path, monkeypatch):
    """The first target call (prompt + first candidates, the peer's and ours) and the draft's
    prefill fall in the prefill phase of their own span; a later forward's time falls in the
    decode phase, and so do only the tokens emitted after the first call."""
    reads, n = [], len(PROMPTS[0]["prompt"])
    _sleepy_decode(monkeypatch, tiny_pair, reads, n)
    cfg = config(methods=("hf", "block", "prompt_lookup"), temperatures=(0.0,), max_new_tokens=12)
    results = bench.run_bench(cfg, str(tmp_path / "b.json"), pair=tiny_pair, prompts=PROMPTS[:1], plot=False)
    for key, record in results["records"].items():
        assert record["prefill_s"] >= SLOW_PREFILL, key  # its own prompt forward, in its own span
        assert record["decode_s"] >= SLOW_STEP, key
        assert record["decode_s"] <= record["wall_s"] - SLOW_PREFILL, key  # not in the decode phase
        assert record["wall_s"] == pytest.approx(record["prefill_s"] + record["decode_s"])
    # every runner read the prompt itself (no memoised prefill), with its first draft: target-only
    # the n tokens (its draft is the root alone), the others n + candidates
    assert {label for label, _ in reads} == {"target_only", "hf", "block", "prompt_lookup"}
    assert all(size == n for label, size in reads if label == "target_only")
    assert all(size > n for label, size in reads if label in ("hf", "block"))
    assert all(size >= n for label, size in reads if label == "prompt_lookup")  # n when nothing matched
    assert "prefill" not in results  # no prefill timing shared between records
    hf = results["records"]["hf|T=0|t/0"]
    assert hf["prompt_call_tokens"] == hf["call_tokens"][0]
    for key, record in results["records"].items():  # the first call's tokens are not decode-phase
        assert record["decode_tokens"] == 12 - record["prompt_call_tokens"] and record["prompt_call_tokens"] >= 1
    row = {r["runner"]: r for r in results["summary"]}["hf"]
    assert row["tokens_per_s"] == pytest.approx(hf["decode_tokens"] / hf["decode_s"])
    assert row["speedup_end_to_end"] == pytest.approx(
        results["records"]["target_only|T=0|t/0"]["wall_s"] / hf["wall_s"])
    # every token counted: the peer's own prefill timed by a separate prefill-only forward (derived)
    assert hf["prefill_only_s"] > 0
    assert row["tokens_per_s_all"] == pytest.approx(12 / (hf["wall_s"] - hf["prefill_only_s"]))
    block, record = {r["runner"]: r for r in results["summary"]}["block"], results["records"]["block|T=0|t/0"]
    assert record["prefill_only_s"] > 0  # our first call verified a draft too: the same derivation
    assert block["tokens_per_s_all"] == pytest.approx(12 / (record["wall_s"] - record["prefill_only_s"]))
    assert results["fields"]["speedup_all"].startswith("derived: ")


def test_a_peer_that_emits_everything_in_its_first_call_has_no_decode_rate(tmp_path):
    """With few tokens the peer can emit all of them in the call that reads the prompt: no decode
    phase is left, so its decode rate, speedup and block efficiency are None, not 0 or infinite."""
    def record(new, first, calls, decode_s):
        return {"tokens": list(range(new)), "new_tokens": new, "wall_s": 2.0, "prefill_s": 2.0 - decode_s,
                "decode_s": decode_s, "decode_tokens": new - first, "target_forwards": calls, "draft_forwards": 3,
                "verify_calls": calls - 1, "verify_tokens": new - first, "iterations": calls,
                "accepted_sum": 0.0, "accepted_count": calls - 1, "peak_memory_mb": None}
    results = {"records": {"target_only|T=0|a": record(4, 0, 5, 1.5), "hf|T=0|a": record(4, 4, 1, 0.01)}}
    rows = {r["runner"]: r for r in bench.summarize(results, config())}
    hf = rows["hf"]
    assert hf["tokens_per_s"] is None and hf["speedup"] is None and hf["block_efficiency"] is None
    assert hf["speedup_end_to_end"] == pytest.approx(1.0)  # the same span length
    assert bench.format_table(list(rows.values())).row_count == 2
    assert bench.plot_summary(list(rows.values()), str(tmp_path / "p.png"))


def test_resumed_run_times_its_own_prefills(tiny_pair, tmp_path, monkeypatch):
    out = str(tmp_path / "r.json")
    bench.run_bench(config(methods=("block",), temperatures=(0.0,)), out, pair=tiny_pair, prompts=PROMPTS[:1],
                    plot=False)
    first = json.load(open(out))["records"]
    _sleepy_decode(monkeypatch, tiny_pair)
    resumed = bench.run_bench(config(methods=("block", "token"), temperatures=(0.0,)), out, pair=tiny_pair,
                              prompts=PROMPTS[:1], plot=False)
    assert resumed["records"]["block|T=0|t/0"] == first["block|T=0|t/0"]  # untouched
    assert resumed["records"]["token|T=0|t/0"]["prefill_s"] >= SLOW_PREFILL  # measured now, not reused


def test_call_tokens_from_call_starts():
    # prompt of 8; call 0 reads it with 1 candidate (accepted: starts 9), call 1 emits 2, the last 8
    assert call_tokens([0, 9, 11], 8, 20) == [2, 2, 8]
    with pytest.raises(ValueError, match="starts"):
        call_tokens([0, 9, 9], 8, 20)  # a call emitting nothing
    with pytest.raises(ValueError, match="starts"):
        call_tokens([], 8, 20)


def test_peer_tau_is_counted_per_call(tiny_pair):
    prompt = tiny_pair.tokenizer("def f(x):\n    return x").input_ids
    n = prompt.shape[1]
    twin = copy.deepcopy(tiny_pair.target)  # an identical draft: greedy accepts every candidate
    stats = hf_assisted(tiny_pair.target, twin, prompt, 24).stats
    fed, tau = stats.logs["call_fed"], stats.accepted_lengths.tolist()
    assert tau[0] == fed[0] - n and tau[1:] == [f - 1 for f in fed[1:]]
    lookup = hf_assisted(tiny_pair.target, None, tiny_pair.tokenizer("abcabcabcabcabc").input_ids, 24,
                         prompt_lookup_num_tokens=5).stats
    taus = lookup.accepted_lengths
    assert taus.dtype == torch.long and int((taus + 1).sum()) == 24
    assert len(set(taus.tolist())) > 1  # counted call by call, not spread evenly
    with pytest.raises(ValueError, match="draft"):
        hf_assisted(tiny_pair.target, tiny_pair.target, prompt, 4)


def test_peer_without_eos_ignores_the_models_own_eos(tiny_pair):
    # generate fills an unset eos_token_id from the model's generation config: a model shipped with
    # an EOS id must not stop the peer where engine.decode (no eos_token_id) goes on
    prompt = tiny_pair.tokenizer("hello world").input_ids
    reference = engine.decode(tiny_pair.target, None, prompt, engine.target_only_method(), 20)
    target, draft = copy.deepcopy(tiny_pair.target), copy.deepcopy(tiny_pair.draft)
    for model in (target, draft):
        model.model.generation_config.eos_token_id = int(reference.tokens[0, 3])  # emitted at token 4
    peer = hf_assisted(target, draft, prompt, 20)
    assert peer.tokens.tolist() == reference.tokens.tolist() and peer.lengths.tolist() == [20]


def test_block_efficiency_has_one_denominator(tiny_pair, tmp_path):
    """Tokens emitted after the prompt-reading target call, per later call, for every runner."""
    cfg = config(methods=("hf", "hf_prompt_lookup", "block", "prompt_lookup"), temperatures=(0.0,),
                 max_new_tokens=16)
    results = bench.run_bench(cfg, str(tmp_path / "be.json"), pair=tiny_pair, prompts=PROMPTS, plot=False)
    records = results["records"]
    for row in results["summary"]:
        recs = [records[f"{row['runner']}|T=0|{p['task_id']}"] for p in PROMPTS]
        first = [r["call_tokens"][0] if row["runner"].startswith("hf") else r["prompt_call_tokens"] for r in recs]
        expected = sum(16 - f for f in first) / sum(r["target_forwards"] - 1 for r in recs)
        assert row["block_efficiency"] == pytest.approx(expected), row["runner"]
    assert {r["runner"]: r for r in results["summary"]}["target_only"]["block_efficiency"] == 1.0


def test_every_figure_is_labelled(tiny_pair, tmp_path):
    results = bench.run_bench(config(methods=("hf", "block"), temperatures=(0.0,)), str(tmp_path / "f.json"),
                              pair=tiny_pair, prompts=PROMPTS[:1], plot=False)
    labels = json.load(open(tmp_path / "f.json"))["fields"]
    not_figures = {"runner", "temperature", "prompts", "divergences", "node_budget"}
    for row in results["summary"]:
        for key, value in row.items():
            if key not in not_figures and isinstance(value, (int, float)):
                assert labels[key].split(":")[0] in ("measured", "derived", "predicted"), key
    assert labels["speedup"].startswith("derived: ") and labels["speedup_end_to_end"].startswith("derived: ")
    caption = bench.format_table(results["summary"]).caption
    assert "speedup*" in caption and "tokens_per_s / target_only tokens_per_s" in caption


# ----------------------------------------------------------------------------------------------
# --dtype auto
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("device, flags, cuda_bf16, expected", [
    ("cpu", {"avx2", "fma"}, None, "float32"),
    ("cpu", {"avx2", "avx512f"}, None, "float32"),  # AVX-512 without its bf16 extension: emulated
    ("cpu", {"avx512f", "avx512_bf16"}, None, "bfloat16"),
    ("cpu", {"amx_tile", "amx_bf16"}, None, "bfloat16"),
    ("cpu", set(), None, "float32"),
    ("cuda", set(), True, "bfloat16"), ("cuda:1", set(), False, "float16"),
    ("mps", {"avx512_bf16"}, None, "float32")])
def test_auto_dtype_choice(device, flags, cuda_bf16, expected):
    dtype, reason = hardware.choose_dtype(device, flags, cuda_bf16)
    assert dtype == expected and reason


def test_auto_dtype_reads_this_hosts_flags(monkeypatch, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16\n\nflags\t: ignored\n")
    assert hardware.cpu_flags(str(cpuinfo)) == {"fpu", "avx2", "avx512f", "avx512_bf16"}
    assert hardware.cpu_flags(str(tmp_path / "missing")) == frozenset()
    monkeypatch.setattr(hardware, "cpu_flags", lambda path="": frozenset({"avx2"}))
    assert bench.BenchConfig(device="cpu").resolve()[0].dtype == "float32"
    monkeypatch.setattr(hardware, "cpu_flags", lambda path="": frozenset({"avx2", "amx_bf16"}))
    assert bench.BenchConfig(device="cpu").resolve()[0].dtype == "bfloat16"
    assert hardware.host_info("cpu")["cpu_flags"] == ["avx2", "amx_bf16"]
    assert bench.BenchConfig(dtype="float16").resolve()[0].dtype == "float16"
    with pytest.raises(ValueError, match="dtype"):
        hardware.resolve_dtype("int3", "cpu")


def test_cpu_name_reads_the_model_name_and_keys_the_cost_models(monkeypatch, tmp_path):
    """Two CPUs of one torch capability ("AVX512": an AMX Xeon and an EPYC) differ in speed, so the
    CPU's model name is part of a cost model's key: the same method, pair and config on another
    CPU get another key (and are measured there), and nothing else in the key changes."""
    from verispec.bench import costs as bench_costs

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC 9R14\nflags\t: avx2\n\nmodel name\t: ignored\n")
    assert hardware.cpu_name(str(cpuinfo)) == "AMD EPYC 9R14"
    monkeypatch.setattr(hardware.platform, "processor", lambda: "x86_64")
    assert hardware.cpu_name(str(tmp_path / "missing")) == "x86_64"
    spec, config = bench.parse_method("adaptive:dq=8", 4, 3), bench.BenchConfig(dtype="float32")
    pair_ = SimpleNamespace(target=_named_model("t"), draft=_named_model("d"))
    keys = []
    for name in ("Intel(R) Xeon(R) Platinum 8488C", "AMD EPYC 9R14"):
        monkeypatch.setattr(bench_costs, "cpu_name", lambda name=name: name)
        keys.append(dict(bench_costs.cost_key(spec, pair_, config)))
    assert keys[0]["cpu"] != keys[1]["cpu"]
    assert {k: v for k, v in keys[0].items() if k != "cpu"} == {k: v for k, v in keys[1].items() if k != "cpu"}


def _named_model(name):
    """The little of a `CausalLM` that `cost_key` reads: a name, a module with parameters, a dtype."""
    return SimpleNamespace(name=name, model=torch.nn.Linear(2, 2), dtype=torch.float32)


def test_bench_records_dtype_and_cpu_capability(tiny_pair, tmp_path):
    out = str(tmp_path / "d.json")
    bench.run_bench(config(methods=("block",), temperatures=(0.0,), dtype="auto"), out, pair=tiny_pair,
                    prompts=PROMPTS[:1], plot=False)
    stored = json.load(open(out))
    env = stored["environment"]
    assert env["dtype"] == "float32" == stored["config"]["dtype"]  # auto with given models: theirs
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert isinstance(env["cpu_flags"], list) and "dtype_reason" in env and "native_bf16" in env
    # growing caches on a CPU, where no step is captured; the static KV where CUDA graphs are
    assert {r["storage"] for r in stored["records"].values()} == {"sequence"}
    assert bench_storage("cuda:0") == "static" and bench_storage(torch.device("cpu")) == "sequence"
    assert bench_storage("cpu", graphs="simulate") == "static"  # the CPU simulation of captured steps
    from transformers.generation import candidate_generator  # the branch the hf peer's drafting takes

    assert (env["scikit_learn"] is not None) == candidate_generator.is_sklearn_available()
    with pytest.raises(ValueError, match="dtype"):  # an explicit dtype other than the models'
        bench.run_bench(config(dtype="bfloat16"), str(tmp_path / "e.json"), pair=tiny_pair, prompts=PROMPTS[:1])


def test_cli_dtype_defaults_to_auto():
    from verispec.cli import build_parser

    assert build_parser().parse_args(["bench"]).dtype == "auto"


def test_storage_script_alternates_both_storages_on_the_same_tokens(tiny_pair, tmp_path):
    from ..scripts import load_script

    script = load_script(os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "storage_cpu.py"))
    out = str(tmp_path / "s.json")
    results = script.main(["--methods", "target_only,block:L=3", "--tokens", "8", "--prompts", "2",
                           "--output", out], pair=tiny_pair, prompts=PROMPTS)
    runs = results["runs"]
    assert [r["storage"] for r in runs[:2]] == ["static", "sequence"]  # prompt 0: static first
    assert [r["storage"] for r in runs[-2:]] == ["sequence", "static"]  # prompt 1: the other order
    assert all(r["same_tokens"] for r in runs) and json.load(open(out))["summary"][1]["method"] == "block:L=3"


def test_storage_script_resumes_its_file_and_refuses_another_configuration(tiny_pair, tmp_path):
    from ..scripts import load_script

    script = load_script(os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "storage_cpu.py"))
    out = str(tmp_path / "s.json")
    args = ["--methods", "target_only", "--tokens", "6", "--prompts", "2", "--output", out]
    first = script.main(args, pair=tiny_pair, prompts=PROMPTS)
    interrupted = json.load(open(out))
    interrupted["runs"] = interrupted["runs"][:2]  # as if stopped after the first prompt
    json.dump(interrupted, open(out, "w"))
    again = script.main(args, pair=tiny_pair, prompts=PROMPTS)  # only the second prompt is measured again
    assert again["runs"][:2] == first["runs"][:2] and again["runs"][2:] != first["runs"][2:]
    assert [r["task_id"] for r in again["runs"]] == ["t/0", "t/0", "t/1", "t/1"]
    with pytest.raises(ValueError, match="output: .* other config"):
        script.main(["--methods", "target_only", "--tokens", "7", "--prompts", "2", "--output", out],
                    pair=tiny_pair, prompts=PROMPTS)
    assert json.load(open(out))["runs"] == again["runs"]  # refused, and left as it was


def test_compile_script_resumes_without_compiling_again(tmp_path):
    from ..scripts import load_script

    script = load_script(os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "compile_cpu.py"))
    out = str(tmp_path / "c.json")
    settings = {"prompts": 1, "tokens": 8, "repeats": 1, "threads": 1, "tiny": True}
    held = {"eager": [1.0], "compiled": [1.1], "compile_s": 2.0, "ratio_compiled_over_eager": 1.1}
    with open(out, "w") as f:
        json.dump({**settings, "methods": {"target_only": held}}, f)
    args = ["--methods", "target_only", "--tokens", "8", "--repeats", "1", "--threads", "1", "--tiny", "--output", out]
    assert script.main(args)["methods"] == {"target_only": held}  # kept: nothing compiled or timed
    with pytest.raises(ValueError, match="output: .* other repeats"):
        script.main(["--methods", "target_only", "--tokens", "8", "--repeats", "2", "--threads", "1", "--tiny",
                     "--output", out])
