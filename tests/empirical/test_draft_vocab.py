"""A draft vocabulary subset (FR-Spec, arXiv 2502.14856) on the engine, on tiny random Qwen2 models:

- `CausalLM.with_head_subset`: the draft's q is exactly zero outside S and equals a softmax over
  S of the unrestricted model's logits (computed independently here), at T in {0.7, 1} and the
  argmax over S at T = 0; its forwards count into the model and fire the model's forward hooks.
- Shared uniforms: the built-in rules and the reference twin (`verispec.reference.draftvocab`,
  through the adapter, same restricted torch drafter) emit the same tokens and accepted lengths at
  T in {0, 0.7, 1}, with every drafted token in S and rejections exercised (asserted).
- T = 0: every method family with a subset reproduces target-only greedy decoding (a batch of
  prompts of different lengths), while the subset binds (the target emits tokens outside S).
- Bad subsets raise TypeError / ValueError naming the argument; `verispec bench` parses ``dv=k``
  and records the subset.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec import bench  # noqa: E402
from verispec.empirical import adapter, engine, methods  # noqa: E402
from verispec.empirical.drafters import probabilities  # noqa: E402
from verispec.empirical.speedups.draftvocab import DraftVocab, as_draft_vocab  # noqa: E402
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
    # V = 16; the draft is a different random model, so iterations often reject.
    return tiny(16, 5, head_scale=3.0), tiny(16, 6, head_scale=3.0)


def _softmax_over(logits, ids, T):
    """Independent q_S: softmax over the columns ids of full logits [n, V], zero elsewhere."""
    out = torch.zeros(logits.shape, dtype=torch.float64)
    part = logits[:, ids].double()
    if T == 0:
        out[torch.arange(len(logits)), torch.tensor(ids)[part.argmax(-1)]] = 1.0
    else:
        out[:, ids] = torch.softmax(part / T, dim=-1)
    return out


@pytest.mark.parametrize("T", [0.0, 0.7, 1.0])
def test_restricted_q_is_a_softmax_over_the_subset(pair, T):
    _, draft = pair
    view = draft.with_head_subset(torch.tensor(S[::-1] + [3]))  # any order, repeats allowed
    assert view.head_subset.tolist() == S
    full, _ = draft.forward(PROMPT)  # [1, n, V]
    logits, _ = view.forward(PROMPT)  # [1, n, V]
    q = probabilities(logits[0], T)  # [n, V] float64
    outside = [t for t in range(16) if t not in S]
    assert bool((q[:, outside] == 0).all())
    assert torch.allclose(q.sum(-1), torch.ones(q.shape[0], dtype=torch.float64), atol=1e-12, rtol=0)
    assert torch.allclose(q, _softmax_over(full[0], S, T), atol=1e-6, rtol=0)  # float32 head vs float32 head
    assert bool((probabilities(full[0], T)[:, outside] > 0).any())  # the restriction binds


def test_view_counts_forwards_and_fires_the_models_hooks(pair):
    _, draft = pair
    calls = []
    handle = draft.model.register_forward_hook(lambda module, args, output: calls.append(output.logits.shape[-1]))
    try:
        before = draft.forward_count
        view = draft.with_head_subset(S)
        logits = view.chain(view.prefill(PROMPT)[1], torch.tensor([[2, 3]]))  # [1, 2, V]
    finally:
        handle.remove()
    assert logits.shape == (1, 2, 16) and draft.forward_count == view.forward_count == before + 2
    assert calls == [len(S), len(S)]  # the hook saw both forwards, run over the rows S
    assert draft.model.get_output_embeddings().out_features == 16  # the full head is back
    assert draft.forward(PROMPT)[0].isfinite().all()


def _observing(method):
    """(`method` with an observer, the list it fills with each iteration's drafted tokens, root excluded)."""
    drafted = []
    observed = engine.TorchMethod(method.name, method.drafter, method.verifier, method.params,
                                  observe=lambda logits, tree, rows: drafted.append(tree.tokens[tree.real][1:]))
    return observed, drafted


def _twins(pair, name, params, T, seed, tokens=12):
    """(engine with the built-in rule, engine with the reference twin through the adapter), the
    same restricted torch drafter, shared uniforms; and the drafted tokens of the first."""
    target, draft = pair
    method = methods.get(name, draft_vocab=S, **params)
    observed, drafted = _observing(method)
    twin = engine.decode(target, draft, PROMPT, observed, tokens, T, uniforms=NumpyUniforms(seed), storage="sequence")
    reference = draft_vocab(reference_methods.get(name, **params), S)
    ref = engine.decode(target, draft, PROMPT, adapter.torch_method(reference, drafter=method.drafter), tokens, T,
                        uniforms=NumpyUniforms(seed), storage="sequence")
    return twin, ref, torch.cat(drafted)


@pytest.mark.parametrize("T", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("name,params", [("token", dict(draft_length=3)), ("block", dict(draft_length=3)),
                                         ("gbv", dict(draft_length=2, num_paths=2))], ids=["token", "block", "gbv"])
def test_engine_and_reference_twin_emit_the_same_tokens(pair, name, params, T):
    rejected = 0
    for seed in range(3):
        twin, ref, drafted = _twins(pair, name, params, T, seed)
        assert torch.equal(twin.tokens, ref.tokens), seed
        assert torch.equal(twin.stats.accepted_lengths, ref.stats.accepted_lengths), seed
        assert set(drafted.tolist()) <= set(S)  # the draft never proposes outside S
        rejected += int((twin.stats.accepted_lengths < params["draft_length"]).sum())
    assert rejected > 0


@pytest.mark.parametrize("name", ["opt_tree", "kary"])
def test_tree_nodes_lie_in_the_subset_and_the_output_is_the_targets_at_T1(pair, name):
    """A tree over a head subset drafts from S only, and sample-and-follow still emits the target's
    own draws (the same tokens as target-only under shared uniforms)."""
    target, draft = pair
    observed, drafted = _observing(methods.get(name, draft_vocab=S, node_budget=6))
    result = engine.decode(target, draft, PROMPT, observed, 12, 1.0, uniforms=NumpyUniforms(0), storage="sequence")
    alone = engine.decode(target, None, PROMPT, engine.target_only_method(), 12, 1.0, uniforms=NumpyUniforms(0))
    nodes = torch.cat(drafted)
    assert nodes.numel() > 12 and set(nodes.tolist()) <= set(S)
    assert torch.equal(result.tokens, alone.tokens)


CASES = [("block", dict(draft_length=3)), ("gbv", dict(draft_length=2, num_paths=3)),
         ("rrsw", dict(draft_length=2, num_paths=2)), ("adaptive", dict(draft_length=2)),
         ("hybrid", dict(draft_length=2)), ("opt_tree", dict(node_budget=6)),
         ("khisti", dict(draft_length=2, num_paths=2, truncation=2))]


@pytest.mark.parametrize("name,params", CASES, ids=[n for n, _ in CASES])
def test_greedy_with_a_subset_equals_target_only(pair, name, params):
    target, draft = pair
    greedy = engine.decode(target, None, PROMPTS, engine.target_only_method(), 14).tokens
    assert not set(greedy.flatten().tolist()) <= set(range(4)) | {t for p in PROMPTS for t in p.tolist()}
    result = engine.decode(target, draft, PROMPTS, methods.get(name, draft_vocab=4, **params), 14)  # k = 4 + prompts
    assert torch.equal(result.tokens, greedy)


def test_bad_subsets_raise_naming_the_argument(pair):
    _, draft = pair
    for bad, error in [([], ValueError), ([0, 16], ValueError), ([-1], ValueError), (torch.tensor([[0, 1]]), ValueError),
                       (torch.tensor([0.0, 1.0]), TypeError), ([0, 1.5], TypeError), ("ab", TypeError), (3, TypeError)]:
        with pytest.raises(error, match="subset"):
            draft.with_head_subset(bad)
    for bad, error in [(0, ValueError), ([], ValueError), (torch.tensor([0.5]), TypeError), (2.5, TypeError),
                       (True, TypeError)]:
        with pytest.raises(error, match="draft_vocab"):
            methods.get("block", draft_length=2, draft_vocab=bad)
    with pytest.raises(ValueError, match="draft_vocab"):  # out of range only shows against V, when drafting
        engine.decode(*pair, PROMPT, methods.get("block", draft_length=2, draft_vocab=[3, 99]), 4)
    with pytest.raises(ValueError, match="draft_vocab"):
        methods.get("prompt_lookup", draft_vocab=8)  # no draft model to restrict
    with pytest.raises(ValueError, match="draft_vocab"):
        DraftVocab(size=0, prompt=False)
    with pytest.raises(TypeError, match="draft_vocab"):
        DraftVocab(size="8")


def test_draft_vocab_subset_unites_the_lowest_ids_the_prompts_and_extra_ids():
    tokens = torch.tensor([[9, 12, 0], [15, 3, 3]])  # right-padded: row 0 has 2 real tokens
    vocab = DraftVocab(size=3, ids=(14,))
    assert vocab.subset(16, tokens, torch.tensor([2, 3])).tolist() == [0, 1, 2, 3, 9, 12, 14, 15]
    assert DraftVocab(size=40, prompt=False).subset(16).tolist() == list(range(16))  # clipped to V
    assert as_draft_vocab([5, 1]) == DraftVocab(size=0, ids=(1, 5), prompt=False)  # a user's subset, as is


def test_bench_parses_dv_and_records_the_subset(pair, tmp_path):
    spec = bench.parse_method("hybrid:dv=6", 3, 2)
    assert spec.draft_vocab == 6 and spec.label == "hybrid:dv=6"
    assert bench.parse_method("opt_tree:dv=6", 3, 2).draft_vocab == 6  # trees run the draft's head too
    for bad in ("ouroboros:dv=6", "hf_prompt_lookup:dv=6", "prompt_lookup:dv=6", "block:dv=0"):
        with pytest.raises(ValueError, match="dv"):
            bench.parse_method(bad, 3, 2)
    assert bench.parse_method("hf:dv=6", 3, 2).draft_vocab == 6  # the peer's assistant takes the same subset
    target, draft = pair
    tiny_pair = type("Pair", (), {"target": target, "draft": draft, "tokenizer": CharTokenizer(16)})()
    config = bench.BenchConfig(prompts=1, max_new_tokens=10, methods=("block:dv=6", "gbv:K=2,dv=6"),
                               temperatures=(0.0,), draft_length=3, dtype="float32")
    results = bench.run_bench(config, str(tmp_path / "dv.json"), pair=tiny_pair,
                              prompts=[{"task_id": "t/0", "prompt": "abcab"}], plot=False)
    base = results["records"]["target_only|T=0|t/0"]["tokens"]
    for label in ("block:dv=6", "gbv:K=2,dv=6"):
        record = results["records"][f"{label}|T=0|t/0"]
        assert record["tokens"] == base
        assert record["draft_vocab_size"] == 6 and record["draft_vocab_tokens"] == len(set(range(6)) | {1, 2, 3})


@pytest.mark.slow
def test_real_pair_subset_head_is_the_full_heads_rows(real_pair):
    """Qwen2.5's tied head: the view's logits over S are the full model's logits at S (bf16 head
    rows gathered, same matmul per row), and the decode with a subset agrees with the twin."""
    (pair, ids), k = real_pair, 32768
    vocab = DraftVocab(size=k)
    view = pair.draft.with_head_subset(vocab.subset(pair.draft.vocab_size, ids))
    S = view.head_subset
    full, _ = pair.draft.forward(ids[:, :32])
    part, _ = view.forward(ids[:, :32])
    assert bool(torch.isinf(part[..., torch.ones(part.shape[-1], dtype=torch.bool).index_fill_(0, S, False)]).all())
    assert torch.allclose(part[..., S], full[..., S], atol=0.05, rtol=0.02)  # bf16: a different GEMM shape
    method = methods.get("block", draft_length=3, draft_vocab=vocab)
    twin = engine.decode(pair.target, pair.draft, ids, method, 8, 1.0, uniforms=NumpyUniforms(0), storage="sequence")
    reference = adapter.torch_method(draft_vocab(reference_methods.block(3), S.tolist()), drafter=method.drafter)
    ref = engine.decode(pair.target, pair.draft, ids, reference, 8, 1.0, uniforms=NumpyUniforms(0), storage="sequence")
    assert torch.equal(twin.tokens, ref.tokens)
