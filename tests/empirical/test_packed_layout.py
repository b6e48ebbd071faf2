"""The ``packed`` linear layout (`verispec.empirical.speedups.linear_layout`, bench ``lin=packed``):
bfloat16 weights reordered once for oneDNN give torch's own linear outputs bit for bit (the same
kernel), the copy is kept across blocks and made again when the weight changes, other dtypes run as
torch's own, `model_layout` reaches a lean forward's stacked layers, and the engine and the bench
decode the same tokens with it. Speed is not asserted here (`benchmarks/bench_rows.py`)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec import bench  # noqa: E402
from verispec.empirical import engine, methods  # noqa: E402
from verispec.empirical.speedups.lean_forward import lean_view  # noqa: E402
from verispec.empirical.speedups.linear_layout import linear_layout, model_layout, packed_available  # noqa: E402
from verispec.empirical.speedups.quantize import quantize_draft  # noqa: E402

from .test_bench import CharTokenizer  # noqa: E402
from .test_lean_forward import VOCAB, small_model, token_ids  # noqa: E402

needs_bf16 = pytest.mark.skipif(not packed_available(), reason="oneDNN without bfloat16 on this CPU")


def _layer(dtype, bias=True, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Linear(96, 40, bias=bias).to(dtype)


@needs_bf16
@pytest.mark.parametrize("shape", [(1, 96), (3, 96), (2, 5, 96), (17, 96), (1, 64, 96)])
@pytest.mark.parametrize("bias", [True, False])
def test_packed_bfloat16_linear_is_torchs_bit_for_bit(shape, bias):
    layer = _layer(torch.bfloat16, bias)
    x = torch.randn(shape).to(torch.bfloat16)
    expected = layer(x)
    with linear_layout(layer, "packed"):
        assert type(layer) is not torch.nn.Linear  # swapped in for the block
        got = layer(x)
    assert type(layer) is torch.nn.Linear and torch.equal(got, expected)


@needs_bf16
def test_the_packed_copy_is_kept_and_made_again_when_the_weight_changes():
    layer, x = _layer(torch.bfloat16), torch.randn(4, 96).to(torch.bfloat16)
    with linear_layout(layer, "packed"):
        layer(x)
    kept = layer.__dict__["_layout_packed"][2]
    with linear_layout(layer, "packed"):
        layer(x)
    assert layer.__dict__["_layout_packed"][2] is kept  # not reordered again by a second block
    with torch.no_grad():
        layer.weight.mul_(2)
    expected = layer(x)
    with linear_layout(layer, "packed"):
        got = layer(x)
    assert layer.__dict__["_layout_packed"][2] is not kept and torch.equal(got, expected)


def test_other_dtypes_run_as_torchs_own():
    layer, x = _layer(torch.float32), torch.randn(3, 96)
    with linear_layout(layer, "packed"):
        got = layer(x)
    assert torch.equal(got, torch.nn.functional.linear(x, layer.weight, layer.bias))
    assert "_layout_packed" not in layer.__dict__


@needs_bf16
def test_model_layout_reaches_the_lean_forwards_stacked_layers():
    lean = lean_view(small_model(seed=1, dtype=torch.bfloat16))
    stacked = [m for m in lean.runner.module.modules() if type(m) is torch.nn.Linear]
    assert stacked
    with model_layout(lean, "packed"):
        assert all(type(m) is not torch.nn.Linear for m in stacked)
        assert type(lean.model.get_output_embeddings()) is not torch.nn.Linear
    assert all(type(m) is torch.nn.Linear for m in stacked)


@needs_bf16
@pytest.mark.parametrize("name, temperature", [("target_only", 1.0), ("adaptive", 0.0), ("opt_tree", 1.0)])
@pytest.mark.parametrize("lean", [False, True], ids=["hf", "lean"])
def test_the_engine_decodes_the_same_tokens_and_logits_packed(name, temperature, lean):
    target, draft = small_model(seed=1, dtype=torch.bfloat16), quantize_draft(small_model(seed=2))
    model = lean_view(target) if lean else target
    sizes = {"target_only": {}, "opt_tree": {"node_budget": 8}}
    method = methods.get(name, **sizes.get(name, {"draft_length": 3}))
    runs, seen = [], []
    target.logits_hooks.append(lambda lm, logits: seen[-1].append(logits.clone()))
    for layout in ("xw", "packed"):
        seen.append([])
        with model_layout(model, layout):
            runs.append(engine.decode(model, draft, token_ids(8, 9), method, 16, temperature, uniforms=5))
    assert torch.equal(runs[0].tokens, runs[1].tokens) and len(seen[0]) == len(seen[1]) > 0
    # bfloat16 rounding at most: torch's own linear sends the tiny head's product (48 x 32) to another
    # kernel than oneDNN, one logit a last bit apart; the real pair's were equal bit for bit
    for plain, packed in zip(*seen):
        torch.testing.assert_close(packed, plain, atol=1e-2, rtol=1.6e-2)


def test_bench_parses_lin_packed():
    assert bench.parse_method("hf:dq=8,lin=packed", 4, 1).linear_layout == "packed"
    spec = bench.parse_method("adaptive:dq=8,df=scripted,tf=lean,lin=packed", 4, 1)
    assert (spec.linear_layout, spec.target_forward) == ("packed", "lean")
    assert bench.parse_method("target_only:lin=packed,tf=lean", 4, 1).label == "target_only:lin=packed,tf=lean"


@needs_bf16
def test_bench_packed_runners_match_and_say_so(tmp_path):
    pair = type("Pair", (), {"target": small_model(seed=1, dtype=torch.bfloat16),
                             "draft": small_model(seed=2, dtype=torch.bfloat16),
                             "tokenizer": CharTokenizer(VOCAB)})()
    prompts = [{"task_id": "t/0", "prompt": "abcab"}, {"task_id": "t/1", "prompt": "cabbage"}]
    runners = ("hf:dq=8,lin=packed", "block:dq=8", "block:dq=8,lin=packed", "block:dq=8,lin=packed,tf=lean")
    config = bench.BenchConfig(prompts=2, max_new_tokens=8, temperatures=(0.0,), draft_length=3, dtype="bfloat16",
                               methods=runners)
    results = bench.run_bench(config, str(tmp_path / "packed.json"), pair=pair, prompts=prompts, plot=False)
    assert "oneDNN" in results["environment"]["linear_layout"]["lin=packed"]
    for task in ("t/0", "t/1"):
        plain = results["records"][f"block:dq=8|T=0|{task}"]
        for label in runners[2:]:
            record = results["records"][f"{label}|T=0|{task}"]
            assert record["tokens"] == plain["tokens"] and record["linear_layout"] == "packed"
    assert type(pair.target.model.get_output_embeddings()) is torch.nn.Linear  # given back
