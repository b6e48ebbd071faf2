"""The lean draft forward (`verispec.empirical.speedups.lean_forward`, ``df=lean``) computes the
transformers module's function: same logits on every kind of append the engine makes (prefill,
one token, a chain over a cache, a tree under a 4D mask, the static KV's slot mask), float32 and
int8, with a head subset, its layers run in Python or as TorchScript (``df=scripted``: the same
logits as the Python ones, exactly); and the engine decodes the same tokens with it."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from verispec import bench  # noqa: E402
from verispec.empirical import engine, methods  # noqa: E402
from verispec.empirical.model import CausalLM  # noqa: E402
from verispec.empirical.speedups.lean_forward import LeanForward, lean_view, stack_linears, supports  # noqa: E402
from verispec.empirical.speedups.quantize import quantize_draft  # noqa: E402
from verispec.empirical.speedups.static_kv import StaticKV  # noqa: E402

from .test_bench import CharTokenizer  # noqa: E402

VOCAB = 48


def small_model(seed=0, layers=2, kv_heads=2, bias_nudge=0.0, dtype=torch.float32):
    config = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=layers,
                                      num_attention_heads=4, num_key_value_heads=kv_heads, intermediate_size=48,
                                      max_position_embeddings=256)
    lm = CausalLM.from_config(config, seed=seed, dtype=dtype)
    with torch.no_grad():  # random q/k/v biases: a stacked bias in the wrong order would show
        for layer in lm.model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    return lm


@pytest.fixture(scope="module", params=["float32", "int8", "float32_scripted", "int8_scripted"])
def pair(request):
    lm = small_model()
    if request.param.startswith("int8"):
        lm = quantize_draft(lm)
    return lm, lean_view(lm, scripted=request.param.endswith("scripted"))


def token_ids(n, seed=0):
    return torch.randint(0, VOCAB, (1, n), generator=torch.Generator().manual_seed(seed))


def test_prefill_one_token_and_chain_match_the_module(pair):
    plain, lean = pair
    prompt, step, chain = token_ids(9), token_ids(1, 1), token_ids(4, 2)
    logits_a, cache_a = plain.prefill(prompt)
    logits_b, cache_b = lean.prefill(prompt)
    torch.testing.assert_close(logits_b, logits_a, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(lean.chain(cache_b, step), plain.chain(cache_a, step), atol=1e-4, rtol=1e-4)
    # a chain of several tokens over a cache: the causal mask is shifted by the cache length
    torch.testing.assert_close(lean.chain(cache_b, chain), plain.chain(cache_a, chain), atol=1e-4, rtol=1e-4)


def test_tree_under_a_4d_mask_and_head_subset_match_the_module(pair):
    plain, lean = pair
    _, cache_a = plain.prefill(token_ids(7))
    _, cache_b = lean.prefill(token_ids(7))
    tokens, parents = token_ids(5, 3), torch.tensor([[-1, 0, 0, 1, -1]])
    torch.testing.assert_close(lean.tree(cache_b, tokens, parents), plain.tree(cache_a, tokens, parents),
                               atol=1e-4, rtol=1e-4)
    subset = torch.tensor([0, 3, 5, 7, 11, 40])
    head_a, head_b = plain.with_head_subset(subset), lean.with_head_subset(subset)
    assert head_b.runner is lean.runner
    _, cache_a = head_a.prefill(token_ids(6))
    logits_b, cache_b = head_b.prefill(token_ids(6))
    torch.testing.assert_close(head_b.chain(cache_b, token_ids(2, 4)), head_a.chain(cache_a, token_ids(2, 4)),
                               atol=1e-4, rtol=1e-4)
    assert torch.isinf(logits_b[0, -1, 1])  # outside S


def test_static_kv_appends_match_the_module(pair):
    plain, lean = pair
    outs = []
    for lm in (plain, lean):
        kv = StaticKV(lm, 1, committed=32)
        first = kv.append(token_ids(6), torch.arange(-1, 5).unsqueeze(0), torch.ones(1, 6, dtype=torch.bool), chain=True)
        kv.commit(torch.ones(1, 6, dtype=torch.bool), prefix=True)
        tree = kv.append(token_ids(4, 5), torch.tensor([[-1, 0, 0, 2]]), torch.ones(1, 4, dtype=torch.bool))
        kv.close()
        outs.append((first, tree))
    for a, b in zip(*outs):
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4)


def test_stacked_int8_linears_are_the_separate_ones_exactly():
    lm = quantize_draft(small_model())
    attention = lm.model.model.layers[0].self_attn
    parts = [attention.q_proj, attention.k_proj, attention.v_proj]
    x = torch.randn(3, 32)
    stacked = stack_linears(parts)
    assert torch.equal(stacked(x), torch.cat([p(x) for p in parts], -1))
    float_parts = [torch.nn.Linear(32, 8), torch.nn.Linear(32, 4, bias=False)]
    torch.testing.assert_close(stack_linears(float_parts)(x), torch.cat([p(x) for p in float_parts], -1))
    with pytest.raises(TypeError, match="layers"):
        stack_linears([attention.q_proj, torch.nn.Linear(32, 4)])
    with pytest.raises(ValueError, match="layers"):
        stack_linears([torch.nn.Linear(32, 4), torch.nn.Linear(16, 4)])


def test_an_unsupported_model_is_refused_by_name():
    config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=4)
    gpt2 = transformers.GPT2LMHeadModel(config)
    assert supports(gpt2)
    with pytest.raises(ValueError, match="model"):
        LeanForward(gpt2)
    lean = LeanForward(small_model().model)
    with pytest.raises(ValueError, match="attention_mask"):
        lean(input_ids=token_ids(2), attention_mask=torch.ones(1, 2))


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_scripted_layers_give_the_python_layers_logits_exactly(dtype):
    lm = small_model() if dtype == "float32" else quantize_draft(small_model())
    python, scripted = lean_view(lm), lean_view(lm, scripted=True)
    assert isinstance(scripted.runner.layers[0][0], torch.jit.ScriptModule)
    assert not isinstance(python.runner.layers[0][0], torch.jit.ScriptModule)
    (a, cache_a), (b, cache_b) = python.prefill(token_ids(7)), scripted.prefill(token_ids(7))
    assert torch.equal(a, b)
    assert torch.equal(python.chain(cache_a, token_ids(1, 1)), scripted.chain(cache_b, token_ids(1, 1)))
    tokens, parents = token_ids(4, 2), torch.tensor([[-1, 0, 0, 1]])
    assert torch.equal(python.tree(cache_a, tokens, parents), scripted.tree(cache_b, tokens, parents))


@pytest.mark.parametrize("scripted", [False, True], ids=["lean", "scripted"])
@pytest.mark.parametrize("name, temperature", [("adaptive", 0.0), ("block", 0.0), ("adaptive", 1.0)])
def test_the_engine_decodes_the_same_tokens_with_the_lean_draft(name, temperature, scripted):
    target, draft = small_model(seed=1), quantize_draft(small_model(seed=1))
    lean = lean_view(draft, scripted)
    prompt = token_ids(8, 9)
    kwargs = {"draft_length": 4}
    runs = [engine.decode(target, d, prompt, methods.get(name, **kwargs), 24, temperature, uniforms=3)
            for d in (draft, lean)]
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    assert runs[0].stats.draft_forwards == runs[1].stats.draft_forwards


def test_bench_parses_df():
    spec = bench.parse_method("adaptive:dq=8,df=lean", 3, 2)
    assert (spec.draft_forward, spec.draft_quant) == ("lean", 8)
    assert bench.parse_method("block", 3, 2).draft_forward == "hf"
    assert bench.parse_method("block:df=hf", 3, 2).draft_forward == "hf"
    assert bench.parse_method("adaptive:dq=8,df=scripted", 3, 2).draft_forward == "scripted"
    for bad in ("hf:df=lean", "hf:df=scripted", "target_only:df=lean", "prompt_lookup:df=lean", "block:df=fast"):
        with pytest.raises(ValueError, match="methods"):
            bench.parse_method(bad, 3, 2)


def test_bench_runs_the_lean_draft_with_the_same_tokens_and_says_so(tmp_path):
    target, draft = small_model(seed=1), small_model(seed=1)
    tiny_pair = type("Pair", (), {"target": target, "draft": draft, "tokenizer": CharTokenizer(VOCAB)})()
    prompts = [{"task_id": "t/0", "prompt": "abcab"}, {"task_id": "t/1", "prompt": "cabbage"}]
    config = bench.BenchConfig(prompts=2, max_new_tokens=8,
                               methods=("block:dq=8", "block:dq=8,df=lean", "block:dq=8,df=scripted"),
                               temperatures=(0.0,), draft_length=3, dtype="float32")
    results = bench.run_bench(config, str(tmp_path / "df.json"), pair=tiny_pair, prompts=prompts, plot=False)
    assert "stacked" in results["environment"]["draft_forward"]["df=lean"]
    assert "TorchScript" in results["environment"]["draft_forward"]["df=scripted"]
    for task in ("t/0", "t/1"):
        plain = results["records"][f"block:dq=8|T=0|{task}"]
        for kind in ("lean", "scripted"):
            lean = results["records"][f"block:dq=8,df={kind}|T=0|{task}"]
            assert lean["tokens"] == plain["tokens"] and lean["draft_forwards"] == plain["draft_forwards"] > 0
            assert lean["draft_forward"] == kind and "draft_forward" not in plain


def test_the_phase_clock_sees_a_lean_draft_forward():
    """The bench splits a span after each model's first forward; the lean draft does not call its
    module (so no module hook fires), and the clock notes it through the logits hook instead."""
    from verispec.bench.clocks import PhaseClock

    target, draft = small_model(seed=1), small_model(seed=2)
    lean = lean_view(draft)
    with PhaseClock([target, lean]) as clock:
        target.prefill(token_ids(5))
        lean.prefill(token_ids(5))
    assert sorted(clock.first_end) == [0, 1] and clock.first_end[1] >= clock.first_end[0]
    assert lean.logits_hooks == [] and draft.logits_hooks == []  # removed on exit


def test_the_draft_forward_bench_runs_and_keeps_its_file(tmp_path, capsys):
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
    import bench_draft_forward

    args = ["--tiny", "--rows", "1,2", "--repeats", "2", "--threads", "1", "--output", str(tmp_path / "df.json")]
    out = bench_draft_forward.main(args)
    assert set(out["by_rows"]) == {"1", "2"} and out["max_logit_difference"] == 0.0  # int8 stacked: exact
    assert out["max_logit_difference_scripted"] == 0.0  # the same ops, run by TorchScript
    assert all(len(row["seconds"][kind]) == 2 for row in out["by_rows"].values() for kind in ("lean", "scripted"))
    again = bench_draft_forward.main(args)
    assert again == out and "kept" in capsys.readouterr().out
