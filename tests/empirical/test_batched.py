"""Batched speculative decoding with per-row accepted lengths (`engine.decode` on a list of prompts,
storage "vanilla" or "packed" = EMS-SD) on tiny random Qwen2 models (fp32, CPU, built from configs; no hub).

- Greedy (T = 0): every row of a batch of prompts of different lengths (1-12 tokens) equals that
  prompt's batch-1 output and target-only greedy, token for token: B = 1, 2, 4, 8, 16, both
  implementations (vanilla, ems), both rules (token, block), both drafters (draft model, prompt
  lookup). The same checker fails on planted bugs (rows that see each other, HF's default packed
  position ids, a padded mask that shows the padding).
- Law at T > 0: the joint law of the first 2 generated tokens (V = 8, 64 outcomes) equals the
  target's exact law from the model's softmax. G-test (scipy power_divergence,
  lambda_="log-likelihood"), false-alarm rate alpha = 1e-6, n = 241,883 rows (one batch per
  case), the size for power 0.9 against any law at total variation >= 0.01 (noncentral
  chi-square, noncentrality 4 n TV^2, df = 63 before pooling cells of expected count < 5); run on
  the vanilla layout (token rule with model drafts, block rule with prompt-lookup drafts). The
  ems layout packs a batch into one sequence, so its attention grows as B^2 and 241,883 rows in
  one pass are out of reach; instead it is coupled to vanilla: both read the same uniforms in the
  same order, so with one seed they must emit identical tokens at T > 0 (all four rule x drafter
  cases, 48 rows of different lengths) — the ems law is then vanilla's. A direct ems G-test runs
  under `-m slow`.
- KV memory: ems writes 0 padded slots and its target cache holds exactly the rows' true lengths
  after every step; vanilla writes > 0 when rows accept different lengths.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from verispec.empirical import engine, kv, methods, model as model_module  # noqa: E402
from verispec.empirical.drafters import PromptLookupDrafter  # noqa: E402
from verispec.empirical.verifiers.nodes import PathRule  # noqa: E402
from verispec.empirical.uniforms import NumpyUniforms, TorchUniforms  # noqa: E402

from verispec.testing.gtest import ALPHA, g_test, g_test_sample_size  # noqa: E402
from .laws import exact_two_token_law  # noqa: E402
from .test_decode_tiny import tiny  # noqa: E402

_VISIBLE = model_module.visible_slots  # the correct visibility, wrapped by a planted bug below

N_TOKENS, L = 16, 3
BATCHES = (1, 2, 4, 8, 16)
CONFIGS = [(impl, method, drafter) for impl in ("vanilla", "ems") for method in ("token", "block")
           for drafter in ("model", "prompt_lookup")]


#: implementation -> the engine's KV storage (EMS-SD: "packed")
STORAGE = {"vanilla": "vanilla", "ems": "packed"}


def chain_method(method, drafter, draft_length=L):
    """A chain rule (token, block) on draft-model drafts or prompt-lookup point masses (max n-gram 3)."""
    if drafter == "model":
        return methods.paths_method(method, draft_length)
    return engine.TorchMethod(method, lambda: PromptLookupDrafter(draft_length, 3), PathRule(method))


@pytest.fixture(scope="module")
def pair():
    return tiny(64, 0), tiny(64, 0, noise=0.1)


@pytest.fixture(scope="module")
def prompts():
    """16 prompts of lengths 1..12, some with a repeated phrase (so prompt lookup drafts early)."""
    g = torch.Generator().manual_seed(3)
    out = []
    for i, n in enumerate([5, 1, 9, 3, 12, 2, 7, 4, 1, 10, 6, 8, 3, 11, 2, 5]):
        p = torch.randint(0, 64, (n,), generator=g)
        out.append(torch.cat([p, p[: n // 2]]) if i % 3 == 0 else p)
    return out


@pytest.fixture(scope="module")
def greedy(pair, prompts):
    """Target-only greedy (batch 1, `engine.target_only_method`) of every prompt: [16, N_TOKENS]."""
    target, _ = pair
    return torch.cat([engine.decode(target, None, p, engine.target_only_method(), N_TOKENS).tokens for p in prompts])


def check_rows_match(target, draft, prompts, greedy, impl, method, drafter):
    """Every row of every batch size equals its prompt's batch-1 run and target-only greedy."""
    draft = draft if drafter == "model" else None
    chain = chain_method(method, drafter)
    run = lambda batch: engine.decode(target, draft, batch, chain, N_TOKENS, 0.0, 0, storage=STORAGE[impl])  # noqa: E731
    full = run(prompts)  # largest B first: fails fast
    assert torch.equal(full.tokens, greedy), f"{impl}/{method}/{drafter}, B = {len(prompts)}: differs from greedy"
    single = torch.cat([run([p]).tokens for p in prompts])
    assert torch.equal(single, greedy), f"{impl}/{method}/{drafter}: batch-1 runs differ from greedy"
    for B in BATCHES:
        result = full if B == len(prompts) else run(prompts[:B])
        assert result.tokens.shape == (B, N_TOKENS) and result.tokens.dtype == torch.int64
        bad = (result.tokens != single[:B]).any(1).nonzero().squeeze(1).tolist()
        assert not bad, f"{impl}/{method}/{drafter}, B = {B}: rows {bad} differ from their batch-1 runs"
        assert torch.equal(result.tokens, greedy[:B])
    return result


@pytest.mark.parametrize("impl,method,drafter", CONFIGS)
def test_greedy_rows_equal_batch1_and_target_only(pair, prompts, greedy, impl, method, drafter):
    target, draft = pair
    result = check_rows_match(target, draft, prompts, greedy, impl, method, drafter)
    stats = result.stats
    assert stats.target_forwards == stats.iterations  # one verification per step, the first reads the prompts
    if drafter == "model":
        assert stats.draft_forwards == 1 + L * stats.iterations
        assert stats.mean_accepted > 0.5
    else:
        assert stats.draft_forwards == 0 and stats.accepted_lengths.max() > 0  # lookups were accepted
    assert stats.storage == STORAGE[impl] and result.tokens.shape[0] == 16


def test_batched_target_only_greedy_and_coupled_sampling(pair, prompts, greedy):
    target, _ = pair
    result = engine.decode(target, None, prompts, engine.target_only_method(), N_TOKENS, storage="vanilla")
    assert torch.equal(result.tokens, greedy)
    assert result.stats.target_forwards == N_TOKENS  # one per token, the first reads the prompts
    assert result.stats.padded_kv_slots == sum(max(map(len, prompts)) - len(p) for p in prompts)  # left padding
    # T > 0: on equal-length prompts it reads uniforms as the padded [B, n] run does -> same tokens.
    same = torch.randint(0, 64, (6, 5), generator=torch.Generator().manual_seed(1))
    a = engine.decode(target, None, list(same), engine.target_only_method(), 8, 1.0, 4, storage="vanilla")
    b = engine.decode(target, None, same, engine.target_only_method(), 8, 1.0, 4)
    assert torch.equal(a.tokens, b.tokens)


def test_one_token_prompts_and_full_acceptance(pair):
    """Prompts of one token (empty prefill); draft = target accepts every draft token."""
    target, _ = pair
    prompts = [torch.tensor([9]), torch.tensor([3]), torch.tensor([41])]
    reference = torch.cat([engine.decode(target, None, p, engine.target_only_method(), 13).tokens for p in prompts])
    for impl in ("vanilla", "ems"):
        result = engine.decode(target, target, prompts, methods.paths_method("block", 4), 13, storage=STORAGE[impl])
        assert torch.equal(result.tokens, reference)
        assert result.stats.mean_accepted == 4.0 and result.stats.iterations == 3  # ceil(13 / 5)


# ----------------------------------------------------------------------------------------------
# planted bugs: the equality machinery catches them
# ----------------------------------------------------------------------------------------------

def leaky_rows(self, ancestry, parents, rows, cols, S):
    """Bug: the per-row attention sees every cached slot and every earlier packed token (rows mix)."""
    from verispec.empirical.speedups.attention import packed_rows

    return packed_rows(torch.zeros_like(self.owner), torch.zeros_like(rows))


def _global_positions(pos, rows, depth):
    """Bug: positions continue the packed sequence (HF's default without position_ids)."""
    return pos.sum() + torch.arange(rows.numel())


def _mask_ignoring_padding(valid, ancestry):
    """Bug: the vanilla mask shows padded and rejected cache slots."""
    return _VISIBLE(torch.ones_like(valid), ancestry)


def _sharp(model, scale=5.0):
    """Scale the query and key projections: attention that depends on position ids (the tiny
    model's near-uniform attention hardly does, so a position bug could pass unseen)."""
    with torch.no_grad():
        for name, parameter in model.model.named_parameters():
            if "q_proj" in name or "k_proj" in name:
                parameter.mul_(scale)
    return model


@pytest.fixture(scope="module")
def sharp(prompts):
    target, draft = _sharp(tiny(64, 0)), _sharp(tiny(64, 0, noise=0.1))
    greedy = [engine.decode(target, None, p, engine.target_only_method(), N_TOKENS).tokens for p in prompts]
    return target, draft, torch.cat(greedy)


@pytest.mark.parametrize("impl,owner,name,bug", [("ems", kv.PackedKV, "_varlen_rows", leaky_rows),
                                                 ("ems", kv, "_packed_positions", _global_positions),
                                                 ("vanilla", model_module, "visible_slots",
                                                  _mask_ignoring_padding)])
def test_planted_bugs_are_caught(sharp, prompts, monkeypatch, impl, owner, name, bug):
    target, draft, greedy = sharp
    check_rows_match(target, draft, prompts, greedy, impl, "block", "model")  # passes without the bug
    monkeypatch.setattr(owner, name, bug)
    with pytest.raises(AssertionError):
        check_rows_match(target, draft, prompts, greedy, impl, "block", "model")


# ----------------------------------------------------------------------------------------------
# KV memory accounting
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("drafter", ["model", "prompt_lookup"])
def test_ems_writes_no_padding_and_vanilla_does(pair, prompts, drafter):
    target, draft = pair
    draft = draft if drafter == "model" else None
    runs = {impl: engine.decode(target, draft, prompts, chain_method("block", drafter), N_TOKENS,
                                storage=STORAGE[impl]).stats for impl in ("vanilla", "ems")}
    ems, vanilla = runs["ems"], runs["vanilla"]
    assert ems.padded_kv_slots == 0
    # After every step the packed cache holds exactly the rows' true lengths (prompt + emitted - 1).
    assert ems.kv_trace and all(slots == true for slots, true in ems.kv_trace)
    assert ems.accepted_lengths.unique().numel() > 1  # rows did accept different lengths
    assert vanilla.padded_kv_slots > 0
    assert any(slots > true for slots, true in vanilla.kv_trace)
    assert vanilla.peak_kv_slots > ems.peak_kv_slots
    assert torch.equal(ems.accepted_lengths, vanilla.accepted_lengths)  # same run, other layout


# ----------------------------------------------------------------------------------------------
# law at T > 0
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def law_pair():
    # Peaked, disagreeing conditionals (every rule branch is exercised); tiny so 241,883 rows are fast.
    return (tiny(8, 20, head_scale=25.0, hidden=8, heads=2),
            tiny(8, 21, head_scale=25.0, hidden=8, heads=2))


#: "3" recurs, so prompt lookup drafts (1, 3) at the first step already; short: 241,883 prefills.
LAW_PROMPT = torch.tensor([3, 1, 3])


def _g_test_first_two_tokens(law_pair, impl, method, drafter, chunk):
    target, draft = law_pair
    law = exact_two_token_law(target, LAW_PROMPT, 1.0)
    n = g_test_sample_size(63)
    counts, source = np.zeros(64), TorchUniforms(sum(map(ord, impl + method + drafter)))
    for start in range(0, n, chunk):
        rows = min(chunk, n - start)
        result = engine.decode(target, draft if drafter == "model" else None, [LAW_PROMPT] * rows,
                               chain_method(method, drafter, 2), 2, 1.0, source, storage=STORAGE[impl])
        counts += np.bincount((result.tokens[:, 0] * 8 + result.tokens[:, 1]).numpy(), minlength=64)
    assert (law > 0).all()
    stat, p_value, df = g_test(counts, law.reshape(-1))
    assert p_value > ALPHA, f"{impl}/{method}/{drafter}: G = {stat:.1f}, df = {df}, p = {p_value:.3g}, n = {n}"


@pytest.mark.parametrize("method,drafter", [("token", "model"), ("block", "prompt_lookup")])
def test_first_two_tokens_follow_target_law_vanilla(law_pair, method, drafter):
    _g_test_first_two_tokens(law_pair, "vanilla", method, drafter, chunk=60_000)


@pytest.mark.slow
@pytest.mark.parametrize("method,drafter", [("block", "model"), ("token", "prompt_lookup")])
def test_first_two_tokens_follow_target_law_ems(law_pair, method, drafter):
    _g_test_first_two_tokens(law_pair, "ems", method, drafter, chunk=256)  # B^2 attention: small chunks


@pytest.fixture(scope="module")
def coupled_pair():
    # V = 16, moderately peaked, a noisy copy as draft: rows accept 0..L tokens.
    return tiny(16, 5, head_scale=4.0), tiny(16, 5, noise=0.3, head_scale=4.0)


@pytest.mark.parametrize("method", ["token", "block"])
@pytest.mark.parametrize("drafter", ["model", "prompt_lookup"])
def test_ems_and_vanilla_draw_the_same_tokens_at_t1(coupled_pair, method, drafter):
    """Coupling: same uniforms in the same order -> identical outputs, row by row."""
    target, draft = coupled_pair
    g = torch.Generator().manual_seed(9)
    prompts = [torch.randint(0, 4, (int(n),), generator=g) for n in torch.randint(1, 10, (48,), generator=g)]
    draft = draft if drafter == "model" else None
    out = {impl: engine.decode(target, draft, prompts, chain_method(method, drafter, 3), 10, 1.0, 7, storage=STORAGE[impl])
           for impl in ("vanilla", "ems")}
    assert torch.equal(out["vanilla"].tokens, out["ems"].tokens)
    assert out["vanilla"].stats.padded_kv_slots > 0 and out["ems"].stats.padded_kv_slots == 0
    assert out["ems"].stats.accepted_lengths.unique().numel() > 1


# ----------------------------------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------------------------------

def test_bad_input(pair, coupled_pair):
    target, draft = pair
    good = [torch.tensor([1, 2, 3]), torch.tensor([4])]
    block = methods.paths_method("block", L)
    cases = [
        (TypeError, "target", dict(target="model")),
        (TypeError, "draft", dict(draft=None)),
        (ValueError, "draft", dict(draft=coupled_pair[0])),
        (ValueError, "storage", dict(storage="padded_rows")),
        (ValueError, "max_new_tokens", dict(max_new_tokens=0)),
        (ValueError, "temperature", dict(temperature=-0.5)),
        (ValueError, "prompts", dict(prompts=[])),
        (TypeError, r"prompts\[1\]", dict(prompts=[torch.tensor([1]), torch.tensor([1.0])])),
        (ValueError, r"prompts\[1\]", dict(prompts=[torch.tensor([1]), torch.tensor([], dtype=torch.long)])),
        (ValueError, r"prompts\[1\]", dict(prompts=[torch.tensor([1]), torch.tensor([2, 64])])),
        (ValueError, "uniforms", dict(uniforms=NumpyUniforms(0))),
        (TypeError, "uniforms", dict(uniforms="seed")),
    ]
    for error, name, change in cases:
        kwargs = dict(target=target, draft=draft, prompts=good, method=block, max_new_tokens=4,
                      storage="packed") | change
        with pytest.raises(error, match=name):
            engine.decode(**kwargs)
    for error, name, make in [(ValueError, "method", lambda: methods.paths_method("nope", L)),
                              (ValueError, "method", lambda: methods.get("ngram")),
                              (ValueError, "draft_length", lambda: methods.paths_method("block", 0)),
                              (TypeError, "draft_length", lambda: methods.paths_method("block", 2.0)),
                              (ValueError, "max_ngram", lambda: methods.prompt_lookup(L, max_ngram=0))]:
        with pytest.raises(error, match=name):
            make()
    target_only = engine.target_only_method()
    with pytest.raises(ValueError, match="prompts"):
        engine.decode(target, None, [torch.tensor([70])], target_only, 3, storage="vanilla")
    with pytest.raises(ValueError, match="max_new_tokens"):
        engine.decode(target, None, good, target_only, 0, storage="vanilla")
    with pytest.raises(TypeError, match="target"):
        engine.decode(draft.model, None, good, target_only, 3, storage="vanilla")
    # No draft model needed for prompt lookup; a stream source serves one row.
    out = engine.decode(target, None, [good[0]], chain_method("token", "prompt_lookup", L), 4, 1.0,
                        NumpyUniforms(0), storage="packed")
    assert out.tokens.shape == (1, 4)


def test_the_packed_storage_s_old_name_still_decodes_and_warns(pair):
    target, draft = pair
    prompts = [torch.tensor([1, 2, 3]), torch.tensor([4, 5])]
    with pytest.warns(DeprecationWarning, match="'ems'"):
        old = engine.decode(target, draft, prompts, methods.get("block"), 4, storage="ems")
    new = engine.decode(target, draft, prompts, methods.get("block"), 4, storage="packed")
    assert torch.equal(old.tokens, new.tokens) and old.stats.storage == "packed"
