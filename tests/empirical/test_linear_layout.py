"""`verispec.empirical.speedups.linear_layout`: the ``wx`` and ``wxpad`` layouts compute torch's linear
product (``wxpad`` on rows padded to the next power of two), are taken for 2..max_rows rows only,
are scoped to their block and module, and leave decoding lossless (the bench's ``lin=wx`` /
``lin=wxpad`` runners, the peer among them, reproduce target-only greedy on tiny models).

Speed is not asserted here: `benchmarks/bench_rows.py` measures both layouts.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec import bench  # noqa: E402
from verispec.empirical.speedups import linear_layout as layout_module  # noqa: E402
from verispec.empirical import engine, methods  # noqa: E402
from verispec.empirical.speedups.linear_layout import linear_layout, padded_rows, weight_major_linear  # noqa: E402

from .test_bench import PROMPTS, tiny_pair  # noqa: E402,F401 (tiny_pair: the bench tests' fixture)
from .test_decode_tiny import tiny  # noqa: E402


@pytest.mark.parametrize("shape", [(1, 24), (5, 24), (2, 3, 24), (16, 24), (40, 24)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("pad", [False, True])
def test_weight_major_linear_is_torchs_linear(shape, bias, pad):
    g = torch.Generator().manual_seed(0)
    x, weight = torch.randn(shape, generator=g), torch.randn(7, 24, generator=g)  # x [..., in], weight [out, in]
    b = torch.randn(7, generator=g) if bias else None
    out = weight_major_linear(x, weight, b, pad)  # [..., out]
    assert out.shape == (*shape[:-1], 7)
    torch.testing.assert_close(out, torch.nn.functional.linear(x, weight, b), rtol=1e-5, atol=1e-5)


def test_padded_rows_is_the_next_power_of_two():
    assert [padded_rows(r) for r in (1, 2, 3, 4, 5, 8, 9, 15, 16, 17, 32)] == [1, 2, 4, 4, 8, 8, 16, 16, 16, 32, 32]
    for bad in (0, -3, 2.0, True):
        with pytest.raises(ValueError, match="rows"):
            padded_rows(bad)


class _GemmColumns(torch.Tensor):
    """A weight that records the column count (rows of X) of every product it takes part in."""

    seen: list = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("matmul", "__matmul__", "addmm"):
            cls.seen.append(args[-1].shape[-1])  # weight @ X^T or addmm(bias, weight, X^T): [in, r']
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.parametrize("rows, bias", [(3, True), (5, False), (9, True), (16, False)])
def test_wxpad_runs_the_gemm_on_the_padded_rows(rows, bias):
    g = torch.Generator().manual_seed(1)
    x, weight = torch.randn(rows, 24, generator=g), torch.randn(7, 24, generator=g)  # [r, in], [out, in]
    b = torch.randn(7, generator=g) if bias else None
    _GemmColumns.seen = []
    out = weight_major_linear(x, weight.as_subclass(_GemmColumns), b, pad=True)  # [r, out]
    assert _GemmColumns.seen == [padded_rows(rows)]
    assert out.shape == (rows, 7)
    torch.testing.assert_close(out.as_subclass(torch.Tensor), torch.nn.functional.linear(x, weight, b),
                               rtol=1e-5, atol=1e-5)


def _counting(monkeypatch):
    calls = []

    def spy(x, weight, bias, pad=False):
        calls.append(x.numel() // x.shape[-1] if not pad else ("pad", x.numel() // x.shape[-1]))
        return weight_major_linear(x, weight, bias, pad)

    monkeypatch.setattr(layout_module, "weight_major_linear", spy)
    return calls


def test_wx_is_taken_for_2_to_max_rows_only_inside_the_block(monkeypatch):
    calls = _counting(monkeypatch)
    net = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    with torch.no_grad(), linear_layout(net, "wx", max_rows=8):
        for rows in (1, 2, 8, 9):
            net(torch.randn(rows, 6))
        net(torch.randn(2, 4, 6))  # 8 rows over two axes
    assert calls == [2, 2, 8, 8, 8, 8]  # two layers each; 1 and 9 rows ran as torch's own
    with torch.no_grad():
        net(torch.randn(4, 6))
    assert len(calls) == 6  # outside the block: torch's own


def test_block_swaps_plain_linears_of_its_module_only_and_restores_them():
    net, other = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Bilinear(2, 2, 2)), torch.nn.Linear(4, 4)
    mha = torch.nn.MultiheadAttention(4, 2)  # its out_proj is a Linear subclass: keeps its own forward
    net.append(mha)
    with linear_layout(net, "wx"):
        assert type(net[0]) is not torch.nn.Linear and isinstance(net[0], torch.nn.Linear)
        assert type(other) is torch.nn.Linear and type(net[1]) is torch.nn.Bilinear
        assert type(mha.out_proj) is torch.nn.modules.linear.NonDynamicallyQuantizableLinear
    assert type(net[0]) is torch.nn.Linear and "_layout_max_rows" not in vars(net[0])
    with pytest.raises(RuntimeError, match="inside"), linear_layout(net, "wx"):
        raise RuntimeError("inside")
    assert type(net[0]) is torch.nn.Linear  # restored on an exception too
    with linear_layout(net, "xw"):
        assert type(net[0]) is torch.nn.Linear
    assert set(net.state_dict()) == {"0.weight", "0.bias", "1.weight", "1.bias", *(f"2.{k}" for k in mha.state_dict())}


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(module="net"), TypeError, "module"), (dict(layout="xy"), ValueError, "layout"),
    (dict(max_rows=1), ValueError, "max_rows"), (dict(max_rows=True), ValueError, "max_rows"),
    (dict(max_rows=4.0), ValueError, "max_rows")])
def test_bad_arguments_are_named(kwargs, error, match):
    args = {"module": torch.nn.Linear(2, 2), "layout": "wx", **kwargs}
    with pytest.raises(error, match=match), linear_layout(**args):
        pass


def test_wxpad_is_taken_for_2_to_max_rows_with_padding(monkeypatch):
    calls = _counting(monkeypatch)
    net = torch.nn.Linear(6, 4)
    with torch.no_grad(), linear_layout(net, "wxpad", max_rows=8):
        for rows in (1, 3, 8, 9):
            net(torch.randn(rows, 6))
    assert calls == [("pad", 3), ("pad", 8)]
    assert "_layout_pad" not in vars(net)


def _tree_logits_agree(model, layout="wx"):
    """A tree forward of 6 tokens under `layout` gives torch's logits (float rounding apart)."""
    prefix, tokens = torch.tensor([[5, 9, 2, 7]]), torch.tensor([[3, 8, 1, 4, 6, 2]])
    parents = torch.tensor([[-1, 0, 0, 1, 2, 4]])
    plain = model.tree(model.prefill(prefix)[1], tokens, parents)  # [1, 6, V]
    cache = model.prefill(prefix)[1]
    with linear_layout(model.model, layout):
        laid_out = model.tree(cache, tokens, parents)  # [1, 6, V]
    torch.testing.assert_close(laid_out, plain, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("layout, seen", [("wx", 6), ("wxpad", ("pad", 6))])
def test_tree_forward_logits_are_unchanged(monkeypatch, layout, seen):
    calls = _counting(monkeypatch)
    _tree_logits_agree(tiny(50, 3), layout)
    assert calls and set(calls) == {seen}  # every linear of the tree forward took the layout


def test_planted_padding_slice_bug_is_caught(monkeypatch):
    def last_columns(x, weight, bias, pad=False):  # the padded output's LAST r columns kept: padding rows' outputs
        rows = torch.cat([x.reshape(-1, x.shape[-1]), x.new_zeros(2, x.shape[-1])])  # [r + 2, in]
        out = torch.nn.functional.linear(rows, weight, bias)[-x.numel() // x.shape[-1]:]
        return out.reshape(*x.shape[:-1], weight.shape[0])

    monkeypatch.setattr(layout_module, "weight_major_linear", last_columns)
    with pytest.raises(AssertionError):
        _tree_logits_agree(tiny(50, 3), "wxpad")


def test_planted_transpose_bug_is_caught(monkeypatch):
    def no_transpose(x, weight, bias, pad=False):  # [out, rows] read as [rows, out]: the layout's classic bug
        rows = x.reshape(-1, x.shape[-1])
        out = torch.addmm(bias.unsqueeze(1), weight, rows.t()) if bias is not None else weight @ rows.t()
        return out.reshape(*x.shape[:-1], weight.shape[0])

    monkeypatch.setattr(layout_module, "weight_major_linear", no_transpose)
    with pytest.raises(AssertionError):
        _tree_logits_agree(tiny(50, 3))


@pytest.mark.parametrize("layout", ["wx", "wxpad"])
def test_engine_under_the_layout_is_greedy_exact(layout):
    target, draft = tiny(64, 0, head_scale=4.0), tiny(64, 0, noise=0.1, head_scale=4.0)
    prompt = torch.tensor([[1, 7, 3, 9, 4]])
    reference = engine.decode(target, None, prompt, engine.target_only_method(), 16).tokens
    method = methods.get("adaptive", draft_length=3, verifier="block")
    with linear_layout(target.model, layout):
        out = engine.decode(target, draft, prompt, method, 16, 0.0, uniforms=0)
    assert torch.equal(out.tokens, reference)


def test_bench_lin_wx_runners_are_greedy_exact_and_labelled(tiny_pair, tmp_path, monkeypatch):
    calls = _counting(monkeypatch)
    pair = tiny_pair
    runners = ("hf:dq=8,lin=wx", "hf:lin=wx", "adaptive:L=3,lin=wx", "block:lin=wx", "adaptive:L=3,lin=wxpad")
    cfg = bench.BenchConfig(prompts=2, max_new_tokens=10, methods=runners, temperatures=(0.0,), draft_length=3,
                            dtype="float32")
    results = bench.run_bench(cfg, str(tmp_path / "lin.json"), pair=pair, prompts=PROMPTS, plot=False)
    rows = {r["runner"]: r for r in results["summary"]}
    assert set(rows) == {"target_only", *runners}
    for label in runners:
        assert rows[label]["greedy_match_rate"] == 1.0, label
    records = results["records"]
    assert all(r["linear_layout"] == key.split("lin=")[1].split("|")[0] for key, r in records.items() if "lin=" in key)
    assert {r["linear_layout"] for r in records.values() if "linear_layout" in r} == {"wx", "wxpad"}
    assert not any("linear_layout" in r for key, r in records.items() if key.startswith("target_only"))
    assert set(results["environment"]["linear_layout"]) == {"lin=wx", "lin=wxpad"}
    assert calls  # the layout was taken
    assert type(pair.target.model.get_output_embeddings()) is torch.nn.Linear  # and given back


def test_parse_method_lin():
    assert bench.parse_method("hf:dq=8,lin=wx", 4, 1) == bench.BenchMethod("hf:dq=8,lin=wx", "hf", draft_quant=8,
                                                                           linear_layout="wx")
    assert bench.parse_method("target_only:lin=wx", 4, 1).linear_layout == "wx"
    assert bench.parse_method("adaptive:L=20,lin=wx", 4, 1).label == "adaptive:L=20,lin=wx"
    assert bench.parse_method("block", 4, 1).linear_layout == "xw"
    assert bench.parse_method("hf:lin=wxpad", 4, 1).linear_layout == "wxpad"
    with pytest.raises(ValueError, match="lin= one of xw, wx"):
        bench.parse_method("hf:lin=fast", 4, 1)
