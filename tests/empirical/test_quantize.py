"""Int8 draft weights (`verispec.empirical.speedups.quantize`, ``dq=8`` in the bench) on tiny random Qwen2 models:

- the int8 copy's logits are close to the float draft's (tolerance below), the original draft is
  untouched, a tied embedding stays a float embedding, torch.ao's deprecation notices do not leak;
- the engine with the int8 draft reproduces target-only greedy at T = 0 (several method
  families, with and without a draft vocabulary), and at T in {0.7, 1} the built-in rules emit
  the same tokens as the reference twins fed the int8 draft's q through the adapter (shared
  uniforms, rejections exercised);
- a head subset of the int8 head gives the int8 full head's logits at S (FR-Spec composes);
- `verispec bench` parses ``dq=8`` (``hf:dq=8`` included), refuses it elsewhere, builds the int8
  draft once, runs the peer with it, records it, and resumes a file written without it.
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from verispec import bench  # noqa: E402
from verispec.bench import drafts as bench_drafts  # noqa: E402
from verispec.empirical.speedups import quantize  # noqa: E402
from verispec.empirical import adapter, engine, methods  # noqa: E402
from verispec.empirical.drafters import probabilities  # noqa: E402
from verispec.empirical.model import CausalLM  # noqa: E402
from verispec.bench.peer import hf_assisted  # noqa: E402
from verispec.empirical.speedups.quantize import is_quantized_linear, quantize_draft  # noqa: E402
from verispec.empirical.uniforms import NumpyUniforms  # noqa: E402
from verispec.reference import methods as reference_methods  # noqa: E402
from verispec.reference.draftvocab import draft_vocab  # noqa: E402

from .test_bench import CharTokenizer  # noqa: E402
from .test_decode_tiny import tiny  # noqa: E402
from .test_engine import real_pair  # noqa: E402,F401 (a fixture)

S = [0, 2, 3, 5, 7, 8, 11, 13]  # 8 of V = 16 ids
PROMPT = torch.tensor([[3, 1, 4, 1, 5, 3, 1]])
PROMPTS = [torch.tensor([3, 1, 4, 1, 5]), torch.tensor([9]), torch.tensor([2, 7, 1, 8, 2, 8, 1])]


@pytest.fixture(scope="module")
def pair():
    # V = 16; the draft is a different random model (often rejected), its int8 copy next to it.
    target, draft = tiny(16, 5, head_scale=3.0), tiny(16, 6, head_scale=3.0)
    return target, draft, quantize_draft(draft)


def _tied(dtype=torch.bfloat16):
    """A tiny Qwen2 whose LM head is its input embedding (as Qwen2.5-0.5B's), in bf16 like the bench's."""
    config = transformers.Qwen2Config(vocab_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=64, max_position_embeddings=128,
                                      tie_word_embeddings=True)
    return CausalLM.from_config(config, seed=3, dtype=dtype)


def test_int8_logits_are_close_to_the_float_drafts(pair):
    """Tolerance: 5% of the largest |logit| (and total variation <= 0.01 at T = 1). Each matmul
    rounds its weights (one scale per output row) and its activations (one per call) to 8 bits, half
    a step each = 0.2% of the tensor's range; across 2 layers x 7 linears and the head the errors
    add up to about 1.5-2.6% of the logit range on these models (measured), not to a systematic
    shift, so 5% leaves room without letting a wrong layer (a float-to-int8 mix-up errs by ~100%)
    through."""
    _, draft, int8 = pair
    ids = torch.tensor([[3, 1, 4, 1, 5, 3, 1, 9, 2, 6]])
    full, _ = draft.forward(ids)  # [1, n, V] float32
    approx, _ = int8.forward(ids)  # [1, n, V] float32
    assert approx.dtype == torch.float32 and approx.shape == full.shape
    assert float((approx - full).abs().max()) <= 0.05 * float(full.abs().max())
    tv = 0.5 * (probabilities(approx[0], 1.0) - probabilities(full[0], 1.0)).abs().sum(-1)  # [n]
    assert float(tv.max()) <= 0.01
    assert not torch.equal(approx, full)  # it is a different draft (else this test checks nothing)


def test_every_linear_is_int8_the_embedding_stays_float_and_the_original_is_untouched():
    draft = _tied()
    head = draft.model.get_output_embeddings()
    assert head.weight is draft.model.get_input_embeddings().weight  # tied, as Qwen2.5's
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        int8 = quantize_draft(draft)
    assert not [w for w in caught if "deprecated" in str(w.message)]  # silenced around the call only
    modules = list(int8.model.modules())
    assert not any(type(m) is torch.nn.Linear for m in modules)
    assert sum(map(is_quantized_linear, modules)) == 2 * 7 + 1  # q, k, v, o, gate, up, down per layer + head
    embedding = int8.model.get_input_embeddings()
    assert isinstance(embedding, torch.nn.Embedding) and embedding.weight.dtype == torch.float32
    assert torch.equal(embedding.weight, head.weight.float())  # the float embedding, only the head's copy is int8
    assert int8.dtype == torch.float32 and int8.vocab_size == draft.vocab_size
    assert draft.model.get_output_embeddings() is head and head.weight.dtype == torch.bfloat16  # untouched
    ids = torch.tensor([[1, 5, 9, 2]])
    _, cache = int8.prefill(ids)  # float32 KV cache, tree forward on the float32 mask path
    assert int8.tree(cache, torch.tensor([[3, 4, 5]]), torch.tensor([[-1, 0, 0]])).isfinite().all()


def test_bad_input_raises_naming_the_argument(pair):
    _, draft, int8 = pair
    with pytest.raises(TypeError, match="draft"):
        quantize_draft(draft.model)
    with pytest.raises(ValueError, match="bits"):
        quantize_draft(draft, bits=4)
    with pytest.raises(ValueError, match="draft"):
        quantize_draft(draft.with_head_subset(S))
    with pytest.raises(ValueError, match="draft"):
        quantize_draft(int8)
    with pytest.raises(TypeError, match="head"):
        quantize.subset_head(torch.nn.Linear(4, 4), torch.tensor([0, 1]))


def test_subsets_that_start_with_the_same_ids_share_one_packed_prefix_head(pair, monkeypatch):
    """FR-Spec's subsets are the top-k ids plus each prompt's: the int8 head over 0..k-1 is packed
    once and shared, only the prompt's extra rows are packed per subset, and every logit is the
    single subset head's (the same int8 rows and activation scale: exact int32 sums)."""
    from verispec.empirical.speedups import int8_head

    _, _, int8 = pair
    monkeypatch.setattr(int8_head, "PREFIX_MIN_ROWS", 4)
    first, second = int8.with_head_subset([0, 1, 2, 3, 4, 9]), int8.with_head_subset([12, 0, 1, 2, 3, 4, 6, 15])
    assert int8_head.leading_run(second.head_subset) == 5
    one, two = first.head_subset_layer, second.head_subset_layer
    assert isinstance(one, int8_head.PrefixAndRest) and one.prefix is two.prefix  # packed once
    assert one.rest.out_features == 1 and two.rest.out_features == 3
    monkeypatch.setattr(int8_head, "PREFIX_MIN_ROWS", 10 ** 9)  # no sharing: one head over S
    whole = int8_head.subset_head(int8.model.get_output_embeddings(), second.head_subset)
    assert not isinstance(whole, int8_head.PrefixAndRest)
    monkeypatch.setattr(int8_head, "PREFIX_MIN_ROWS", 4)
    hidden = torch.randn(3, whole.in_features)
    assert torch.allclose(two(hidden), whole(hidden), atol=1e-6, rtol=0)
    short = int8.with_head_subset([0, 1, 2, 5])  # k = 3 < 4: one head, as before
    assert not isinstance(short.head_subset_layer, int8_head.PrefixAndRest)
    assert int8.with_head_subset([0, 1, 2, 3, 4]).head_subset_layer is one.prefix  # S = the prefix
    logits, _ = second.forward(PROMPT)  # [1, n, V]: the view runs the split head
    full, _ = int8.forward(PROMPT)
    ids = second.head_subset
    assert torch.allclose(logits[..., ids], full[..., ids], atol=1e-5, rtol=0)


def test_head_subset_of_the_int8_head_is_its_rows(pair):
    _, _, int8 = pair
    view = int8.with_head_subset(S)
    head, rows = int8.model.get_output_embeddings().weight(), view._head_subset[1].weight()  # qint8 [V, H], [|S|, H]
    assert head.qscheme() == torch.per_channel_affine  # one scale per output row
    assert torch.equal(rows.int_repr(), head.int_repr()[S])  # the same int8 values ...
    assert torch.equal(rows.q_per_channel_scales(), head.q_per_channel_scales()[S])  # ... at the same scales
    full, _ = int8.forward(PROMPT)  # [1, n, V]
    part, _ = view.forward(PROMPT)  # [1, n, V], -inf outside S
    outside = [t for t in range(16) if t not in S]
    assert bool(torch.isinf(part[..., outside]).all())
    # the same int8 rows, scale and activation quantization: int32 sums are exact, so equal up to float rounding
    assert torch.allclose(part[..., S], full[..., S], atol=1e-5, rtol=0)
    assert is_quantized_linear(int8.model.get_output_embeddings())  # the full int8 head is back


GREEDY = [("block", dict(draft_length=3)), ("gbv", dict(draft_length=2, num_paths=3)),
          ("hybrid", dict(draft_length=2)), ("opt_tree", dict(node_budget=6))]


@pytest.mark.parametrize("vocab", [None, 4], ids=["full_head", "dv"])
@pytest.mark.parametrize("name,params", GREEDY, ids=[n for n, _ in GREEDY])
def test_greedy_with_the_int8_draft_equals_target_only(pair, name, params, vocab):
    target, _, int8 = pair
    greedy = engine.decode(target, None, PROMPTS, engine.target_only_method(), 14).tokens
    result = engine.decode(target, int8, PROMPTS, methods.get(name, draft_vocab=vocab, **params), 14)
    assert torch.equal(result.tokens, greedy)
    assert result.stats.draft_forwards > 0


@pytest.mark.parametrize("T", [0.7, 1.0])
@pytest.mark.parametrize("name,params", [("block", dict(draft_length=3)), ("gbv", dict(draft_length=2, num_paths=2))],
                         ids=["block", "gbv"])
@pytest.mark.parametrize("vocab", [None, S], ids=["full_head", "dv"])
def test_int8_draft_engine_and_reference_twin_emit_the_same_tokens(pair, name, params, T, vocab):
    """Shared uniforms: the built-in rule and its reference twin (through the adapter) verify the
    same int8 drafter's q and emit the same tokens and accepted lengths."""
    target, _, int8 = pair
    method = methods.get(name, draft_vocab=vocab, **params)
    reference = reference_methods.get(name, **params)
    if vocab is not None:
        reference = draft_vocab(reference, vocab)
    rejected = 0
    for seed in range(3):
        ours = engine.decode(target, int8, PROMPT, method, 12, T, uniforms=NumpyUniforms(seed), storage="sequence")
        twin = engine.decode(target, int8, PROMPT, adapter.torch_method(reference, drafter=method.drafter), 12, T,
                             uniforms=NumpyUniforms(seed), storage="sequence")
        assert torch.equal(ours.tokens, twin.tokens), seed
        assert torch.equal(ours.stats.accepted_lengths, twin.stats.accepted_lengths), seed
        rejected += int((ours.stats.accepted_lengths < params["draft_length"]).sum())
    assert rejected > 0


def test_peer_takes_the_int8_draft_as_its_assistant(pair):
    target, _, int8 = pair
    greedy = engine.decode(target, None, PROMPT, engine.target_only_method(), 10).tokens
    peer = hf_assisted(target, int8, PROMPT, 10, 0.0)
    assert torch.equal(peer.tokens, greedy) and peer.stats.draft_forwards > 0
    sampled = hf_assisted(target, int8, PROMPT, 10, 1.0, seed=1)
    assert sampled.tokens.shape == (1, 10)


def test_bench_parses_dq():
    assert bench.parse_method("hf:dq=8", 3, 2) == bench.BenchMethod("hf:dq=8", "hf", draft_quant=8)
    assert bench.parse_method("hf", 3, 2).draft_quant == 0
    spec = bench.parse_method("block:dq=8,dv=32768", 3, 2)
    assert (spec.label, spec.draft_quant, spec.draft_vocab, spec.param("draft_length")) == ("block:dq=8,dv=32768", 8, 32768, 3)
    assert bench.parse_method("opt_tree:n=10,dq=8", 3, 2).draft_quant == 8
    for bad in ("target_only:dq=8", "block:dq=4", "prompt_lookup:dq=8", "hf_prompt_lookup:dq=8", "lookahead:dq=8",
                "block:dq=0", "block:dq=x"):
        with pytest.raises(ValueError, match="methods"):
            bench.parse_method(bad, 3, 2)


def test_bench_builds_the_int8_draft_once_and_resumes_an_older_file(pair, tmp_path, monkeypatch):
    target, draft, _ = pair
    built = []

    def counted(model, bits=8):
        built.append(model)
        return quantize_draft(model, bits)

    monkeypatch.setattr(bench_drafts, "quantize_draft", counted)  # the name the bench calls
    tiny_pair = type("Pair", (), {"target": target, "draft": draft, "tokenizer": CharTokenizer(16)})()
    prompts = [{"task_id": "t/0", "prompt": "abcab"}, {"task_id": "t/1", "prompt": "cabbage"}]
    output = str(tmp_path / "dq.json")
    config = bench.BenchConfig(prompts=2, max_new_tokens=8, methods=("block",), temperatures=(0.0,), draft_length=3,
                               dtype="float32")
    first = bench.run_bench(config, output, pair=tiny_pair, prompts=prompts, plot=False)  # written without dq
    kept = first["records"]["block|T=0|t/0"]
    config = bench.BenchConfig(**{**config.__dict__, "methods": ("block", "hf:dq=8", "block:dq=8,dv=6")})
    results = bench.run_bench(config, output, pair=tiny_pair, prompts=prompts, plot=False)  # resumes it
    assert results["records"]["block|T=0|t/0"] == kept
    assert built == [draft]  # once per run, in the warm-up (before any timed span)
    assert "int8" in results["environment"]["draft_quant"]["dq=8"]
    for task in ("t/0", "t/1"):
        base = results["records"][f"target_only|T=0|{task}"]["tokens"]
        for label in ("hf:dq=8", "block:dq=8,dv=6"):
            record = results["records"][f"{label}|T=0|{task}"]
            assert record["tokens"] == base and record["draft_quant_bits"] == 8 and record["draft_forwards"] > 0
    assert {row["runner"] for row in results["summary"]} >= {"hf:dq=8", "block:dq=8,dv=6"}


@pytest.mark.slow
def test_real_pair_int8_draft_block_greedy_and_peer(real_pair):
    """The real 0.5B draft in int8: block at T = 0 emits target-only greedy's 16 tokens on one
    HumanEval prompt, and the peer runs with it as its assistant."""
    (pair, ids), N = real_pair, 16
    int8 = quantize_draft(pair.draft)
    greedy = engine.decode(pair.target, None, ids, engine.target_only_method(), N).tokens
    result = engine.decode(pair.target, int8, ids, methods.get("block", draft_length=4), N)
    assert torch.equal(result.tokens, greedy)
    subset = engine.decode(pair.target, int8, ids, methods.get("block", draft_length=4, draft_vocab=32768), N)
    assert torch.equal(subset.tokens, greedy)
    peer = hf_assisted(pair.target, int8, ids, N, 0.0)
    assert peer.tokens.shape == (1, N) and peer.stats.draft_forwards > 0



def test_int8_logits_depend_on_the_other_rows_of_a_forward_so_targets_stay_float(pair):
    """Why no target is quantized: torch's dynamic int8 linear quantizes its whole input with ONE
    activation scale, so a row's logits depend on the rows it is computed with. A verifying forward
    (L + 1 rows) and a one-token forward then give the same position different laws: the target's
    law would depend on how tokens are grouped into forwards. In float32 the two agree to
    rounding (<= 1e-5 here); in int8 they differ by more than 1e-3 (measured: 1.5e-7 vs 2.2e-2)."""
    target, _, _ = pair
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    for model, grouped in ((target, False), (quantize.quantize_weights(target, role="target"), True)):
        with torch.no_grad():
            together = model.model(input_ids=ids).logits[0]  # [8, V]: the rows in one forward
            alone = torch.stack([model.model(input_ids=ids[:, :k + 1]).logits[0, -1] for k in range(8)])  # [8, V]
        gap = float((together - alone).abs().max())
        assert (gap > 1e-3) if grouped else (gap <= 1e-5), gap


def test_quantize_weights_names_its_argument():
    with pytest.raises(TypeError, match="target_quant"):
        quantize.quantize_weights(object(), role="target_quant")
    with pytest.raises(ValueError, match="bits"):
        quantize.quantize_weights(_tied(torch.float32), bits=4)
