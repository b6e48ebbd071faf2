"""benchmarks/gpu_replay.py on tiny fp32 models (CPU): a pair with other random weights, replaying a
trace recorded on the first pair, makes the recorded run's forwards and emits its tokens; a trace
that lacks one forward, or holds one too many, is refused.

The replay pair alone emits other tokens (checked), so the equality is the replay's doing.
"""

from __future__ import annotations

import json
import os
import types
from dataclasses import replace

import pytest

from ..scripts import load_script

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

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


def test_replay_inside_captured_steps(script, recorded, tmp_path):
    """The engine's forwards replayed through its logits hooks inside captured steps (the CPU
    simulation of CUDA graphs, `speedups.graphs`): the recorded tokens, every forward in step."""
    results, trace = recorded["ouroboros"]
    config = replace(CONFIG, graphs="simulate")
    replayed = script.replay_run("ouroboros", config, _pair(7), PROMPTS, trace, results, str(tmp_path / "r.json"),
                                 plot=False)
    assert script.tokens_of(replayed) == script.tokens_of(results)
    block = [r for key, r in replayed["records"].items() if key.startswith("block|")]
    assert block and all(r["replayed_steps"] > 0 for r in block)  # the steps were captured and replayed


#: OPT-Tree pinned to its fixed node budget (the bench's default pol=auto measures costs: timings).
TREES = bench.BenchConfig(prompts=2, max_new_tokens=10, methods=("opt_tree:n=8,pol=fixed", "block"),
                          temperatures=(0.0,), draft_length=3, num_paths=2, dtype="float32")


def test_trees_replay_from_their_draft_top_k(script, tmp_path):
    """OPT-Tree ranks the draft's top-n children: the draft's top-k trace replays its trees (an
    argmax alone would not); a replay may run a subset of the recorded records."""
    results, trace = script.record_run("trees", TREES, _pair(0), PROMPTS, str(tmp_path / "rec.json"))
    assert trace["draft"][0][0].shape[-1] == script.DRAFT_TOP_K and trace["target"][0][0].shape[-1] == 1
    replayed = script.replay_run("trees", TREES, _pair(7), PROMPTS, trace, results, str(tmp_path / "r.json"),
                                 plot=False)
    assert script.tokens_of(replayed) == script.tokens_of(results) and not replayed["projection"]["out_of_step"]
    for key, record in results["records"].items():
        assert replayed["records"][key]["draft_forwards"] == record["draft_forwards"]
    subset = replace(TREES, methods=("block",))
    alone = script.replay_run("trees", subset, _pair(7), PROMPTS, trace, results, str(tmp_path / "s.json"), plot=False)
    assert set(alone["records"]) == {k for k in results["records"] if not k.startswith("opt_tree")}
    assert all(alone["records"][k]["tokens"] == results["records"][k]["tokens"] for k in alone["records"])


def test_argmax_traces_do_not_replay_trees(script, tmp_path):
    """Planted: the draft's trace cut to its argmax (a kit before top-k traces); OPT-Tree's records go
    out of step, and strict=False lists them and keeps the others."""
    results, trace = script.record_run("trees", TREES, _pair(0), PROMPTS, str(tmp_path / "rec.json"))
    cut = {**trace, "draft": [(top[..., :1], (x[..., :1] - lse[..., None]).exp())
                              for top, x, lse in trace["draft"]]}
    with pytest.raises(script.ReplayDesync):
        script.replay_run("trees", TREES, _pair(7), PROMPTS, cut, results, str(tmp_path / "r.json"), plot=False)
    kept = script.replay_run("trees", TREES, _pair(7), PROMPTS, cut, results, str(tmp_path / "r.json"),
                             plot=False, strict=False)
    assert kept["projection"]["out_of_step"] and all(k.startswith("opt_tree") for k in kept["projection"]["out_of_step"])


def test_a_target_from_another_config(script, tmp_path):
    """`--target-config`: any architecture's config.json, its vocabulary set to the recorded pair's."""
    kit = tmp_path / "kit"
    for role, seed in (("target", 0), ("draft", 1)):
        tiny(64, seed).model.config.save_pretrained(kit / role)
        tiny(64, seed).model.generation_config.save_pretrained(kit / role)
    _byte_tokenizer(str(kit / "target"))
    other = transformers.Qwen2Config(vocab_size=96, hidden_size=48, num_hidden_layers=3, num_attention_heads=6,
                                     num_key_value_heads=2, intermediate_size=64)
    other.save_pretrained(tmp_path / "other")
    pair, note = script.random_pair(str(kit), "cpu", str(tmp_path / "other" / "config.json"))
    assert pair.target.vocab_size == pair.draft.vocab_size == 64 and "96 -> 64" in note
    assert pair.target.model.config.num_hidden_layers == 3 and pair.target.dtype == torch.bfloat16


def test_replayed_logits_give_the_recorded_token_its_probability(script):
    p = torch.tensor([[1 / 64 + 1e-3, 0.4, 0.999999, 1.0]])  # [B, q]
    x = script.replacement_logit(p, 64)
    logits = torch.zeros(1, 4, 64)
    logits[..., 5] = x
    probs = torch.softmax(logits, -1)[..., 5]
    assert torch.allclose(probs[:, :3], p[:, :3], rtol=1e-5)
    assert bool((logits.argmax(-1) == 5).all())


def test_a_probability_entry_replays_its_argmax_and_refuses_top_k(script):
    """The target's entries (argmax, probability; k = 1) replay through `replacement_logit` against a
    rest of 0; top-k probabilities, a format no longer recorded, are refused rather than misread."""
    p = torch.tensor([[[0.4], [0.9]]])  # [B, q, 1]
    x, rest = script.entry_logits((torch.tensor([[[5], [7]]], dtype=torch.int32), p), 64)
    assert torch.equal(x, script.replacement_logit(p[..., 0], 64).unsqueeze(-1)) and torch.equal(rest, torch.zeros(1, 2))
    with pytest.raises(ValueError, match="one token per position"):
        script.entry_logits((torch.zeros(1, 2, 3, dtype=torch.int32), torch.full((1, 2, 3), 0.2)), 64)


def _byte_tokenizer(folder):
    """A transformers tokenizer over 256 byte-level ids (no merges), saved into `folder`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok)
    fast.save_pretrained(folder)
    return fast


def test_a_kit_replays_from_its_files(script, tmp_path, monkeypatch):
    """The kit path end to end (`save_kit`, then `replay`): configs, tokenizer, trace and prompts
    from files, the recorded host's scikit-learn branch, both models' forward costs, the output name."""
    sources = {role: str(tmp_path / "src" / role) for role in script.ROLES}
    pair = types.SimpleNamespace(target=tiny(256, 0, head_scale=4.0), draft=tiny(256, 0, noise=0.1, head_scale=4.0),
                                 tokenizer=_byte_tokenizer(sources["target"]))
    for role in script.ROLES:
        getattr(pair, role).model.config.save_pretrained(sources[role])
        getattr(pair, role).model.generation_config.save_pretrained(sources[role])
    kit = tmp_path / "kits" / "ouroboros"
    kit.mkdir(parents=True)
    results, trace = script.record_run("ouroboros", CONFIG, pair, PROMPTS, str(kit / "recorded.json"))
    script.save_kit(str(kit), trace, PROMPTS, sources)
    monkeypatch.setitem(script.PRESETS, "ouroboros", bench.BenchConfig(**{**CONFIG.__dict__, "dtype": "bfloat16"}))
    done = script.replay(["ouroboros"], str(tmp_path / "kits"), "cpu", str(tmp_path / "out"))
    stored = json.load(open(tmp_path / "out" / "bench_ouroboros_cpu_projected.json"))
    assert script.tokens_of(stored) == script.tokens_of(results) == script.tokens_of(done["ouroboros", True])
    assert stored["projection"]["records_token_identical"] == len(results["records"])
    assert set(stored["forward_costs_s"]) == set(script.ROLES)
    assert not (kit / "draft" / "tokenizer.json").exists()  # the tokenizer travels once, gzipped
    assert (kit / "target" / "tokenizer.json.gz").exists() and not (kit / "target" / "tokenizer.json").exists()


def test_a_method_pinned_under_a_new_label_replays_its_recorded_records(script, tmp_path):
    """A kit recorded "block" replays as "block:L=3" (the same behaviour named with its parameter,
    as a method pinned after a new bench default) through `recorded_as`; without the mapping the
    kit holds no such record, and the replay refuses at once."""
    results, trace = script.record_run("trees", TREES, _pair(0), PROMPTS, str(tmp_path / "rec.json"))
    pinned = replace(TREES, methods=("opt_tree:n=8,pol=fixed", "block:L=3"))
    with pytest.raises(script.ReplayDesync, match="block:L=3"):
        script.replay_run("trees", pinned, _pair(7), PROMPTS, trace, results, str(tmp_path / "r.json"), plot=False)
    replayed = script.replay_run("trees", pinned, _pair(7), PROMPTS, trace, results, str(tmp_path / "r.json"),
                                 plot=False, recorded_as={"block:L=3": "block"})
    renamed = {key.replace("block|", "block:L=3|"): tokens for key, tokens in script.tokens_of(results).items()}
    assert script.tokens_of(replayed) == renamed and not replayed["projection"]["out_of_step"]


def test_gpu_run_orders_the_bars_first_and_keeps_to_its_budget(tmp_path):
    """benchmarks/gpu_run.py: the parts the issue's bars read (the first kit with graphs on, every
    target; the profiles) come before the rest; past `--budget-s` no part starts, and the files
    say which were skipped (written, valid JSON, no ratio derived from a replay that did not run)."""
    run_script = load_script(os.path.join(os.path.dirname(SCRIPT), "gpu_run.py"))
    parts = run_script.plan(["kit", "7b"], ("graphs", "trees"))
    assert parts[:4] == [("graphs_graphs", "kit"), ("graphs_graphs", "7b"), ("profile", "kit"), ("profile", "7b")]
    assert parts[-2:] == [("costs", "kit"), ("costs", "7b")] and len(parts) == 12
    summary = run_script.main(["--out", str(tmp_path), "--device", "cpu", "--kit-root", str(tmp_path / "none"),
                               "--budget-s", "1e-9"])
    assert len(summary["skipped_for_time"]) == 6 and summary["acceptance"] == []
    stored = json.load(open(tmp_path / "gpu_run_summary_cpu.json"))
    assert stored["skipped_for_time"] == summary["skipped_for_time"] and (tmp_path / "gpu_run_kit_cpu.json").exists()
