"""Speculative decoding on tiny random Qwen2 models (fp32, CPU, built from configs; no hub).

- Tree forward: a token tree appended in one pass gives, at every node, the logits of its branch
  run as a plain sequence (atol 1e-4, sdpa and eager), also for a batch whose rows have different
  cached lengths; gather/crop of the cache keep exactly the kept positions.
- Greedy: every method reproduces target-only greedy decoding token for token (draft sampled at
  T = 0 and at T = 1; batches of prompts; prompt of one token; full acceptance).
- Law at T > 0: the joint law of the first 2 generated tokens (V = 8, 64 outcomes) equals the
  target's exact law computed from the model's softmax. G-test (scipy power_divergence,
  lambda_="log-likelihood"), false-alarm rate alpha = 1e-6, n = 241,883 independent runs (one
  batch), the size for power 0.9 against any law at total variation >= 0.01 (noncentral
  chi-square, noncentrality 4 n TV^2, df = 63 before pooling cells of expected count < 5).
  Outcomes of probability 0 cannot occur here (softmax > 0). Seeds are fixed.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from verispec.empirical import engine, methods  # noqa: E402
from verispec.empirical.model import (CausalLM, cache_length, crop_cache, gather_cache,  # noqa: E402
                                      tree_attention_mask)
from verispec.empirical.uniforms import NumpyUniforms, TorchUniforms  # noqa: E402

from verispec.testing.gtest import ALPHA, g_test, g_test_sample_size  # noqa: E402
from .laws import exact_two_token_law  # noqa: E402


def tiny(vocab_size, seed, *, noise=0.0, head_scale=1.0, attn="sdpa", dtype=torch.float32, hidden=32, heads=4):
    """A 2-layer Qwen2 with random weights; `noise` perturbs a copy (a draft close to the target);
    `head_scale` multiplies the LM head (peaked conditionals)."""
    config = transformers.Qwen2Config(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=2,
                                      num_attention_heads=heads, num_key_value_heads=heads // 2,
                                      intermediate_size=2 * hidden, max_position_embeddings=256,
                                      tie_word_embeddings=False)
    model = CausalLM.from_config(config, seed=seed, dtype=dtype, attn_implementation=attn)
    g = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for parameter in model.model.parameters():
            if noise:
                parameter.add_(noise * parameter.std() * torch.randn(parameter.shape, generator=g).to(dtype))
        model.model.get_output_embeddings().weight.mul_(head_scale)
    return model


@pytest.fixture(scope="module")
def pair():
    return tiny(64, 0), tiny(64, 0, noise=0.1)


# ----------------------------------------------------------------------------------------------
# model.py: tree forward, masks, cache editing
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_tree_forward_equals_branches_run_as_sequences(attn):
    model = tiny(50, 3, attn=attn)
    prefix = torch.tensor([[5, 9, 2, 7]])
    _, cache = model.prefill(prefix)
    # root 11; children 12 (-> 13 -> 14) and 15 (-> 16); node order is any topological order
    tokens = torch.tensor([[11, 12, 15, 13, 16, 14]])
    parents = torch.tensor([[-1, 0, 0, 1, 2, 3]])
    logits = model.tree(cache, tokens, parents)  # [1, 6, V]
    assert cache_length(cache) == 4 + 6
    branches = {0: [11], 1: [11, 12], 2: [11, 15], 3: [11, 12, 13], 4: [11, 15, 16], 5: [11, 12, 13, 14]}
    for node, branch in branches.items():
        plain, _ = model.prefill(torch.cat([prefix, torch.tensor([branch])], dim=1))
        torch.testing.assert_close(logits[0, node], plain[0, -1], atol=1e-4, rtol=0)
    # Keep the accepted path root -> 15 -> 16 (cache positions 4, 6, 8) and continue.
    gather_cache(cache, torch.tensor([[0, 1, 2, 3, 4, 6, 8]]))
    nxt = model.chain(cache, torch.tensor([[17]]))
    plain, _ = model.prefill(torch.tensor([[5, 9, 2, 7, 11, 15, 16, 17]]))
    torch.testing.assert_close(nxt[0, -1], plain[0, -1], atol=1e-4, rtol=0)
    crop_cache(cache, 5)
    nxt = model.chain(cache, torch.tensor([[12]]))
    plain, _ = model.prefill(torch.tensor([[5, 9, 2, 7, 11, 12]]))
    torch.testing.assert_close(nxt[0, -1], plain[0, -1], atol=1e-4, rtol=0)


def test_batched_tree_with_padded_cache_rows():
    """Rows with different valid cache lengths (right padding masked out) and explicit positions."""
    model = tiny(40, 4)
    _, cache = model.prefill(torch.tensor([[1, 2, 3, 4], [5, 6, 0, 0]]))
    valid = torch.tensor([[True, True, True, True], [True, True, False, False]])
    tokens = torch.tensor([[7, 8, 9], [10, 11, 12]])
    parents = torch.tensor([[-1, 0, 0], [-1, 0, 1]])
    logits = model.tree(cache, tokens, parents, past_valid=valid)
    for row, seqs in ((0, {0: [1, 2, 3, 4, 7], 1: [1, 2, 3, 4, 7, 8], 2: [1, 2, 3, 4, 7, 9]}),
                      (1, {0: [5, 6, 10], 1: [5, 6, 10, 11], 2: [5, 6, 10, 11, 12]})):
        for node, seq in seqs.items():
            plain, _ = model.prefill(torch.tensor([seq]))
            torch.testing.assert_close(logits[row, node], plain[0, -1], atol=1e-4, rtol=0)


def test_tree_mask_is_additive_float_with_dtype_min():
    mask = tree_attention_mask(torch.tensor([[-1, 0, 0]]), 2, torch.bfloat16)
    assert mask.shape == (1, 1, 3, 5) and mask.dtype == torch.bfloat16
    allowed = mask[0, 0] == 0
    assert allowed.tolist() == [[True, True, True, False, False], [True, True, True, True, False],
                                [True, True, True, False, True]]
    assert float(mask[0, 0, 1, 4]) == torch.finfo(torch.bfloat16).min
    with pytest.raises(ValueError, match="parents"):
        tree_attention_mask(torch.tensor([[-1, 1]]), 0, torch.float32)


def test_bf16_tree_forward_runs():
    model = tiny(30, 5, dtype=torch.bfloat16)
    _, cache = model.prefill(torch.tensor([[1, 2, 3]]))
    logits = model.tree(cache, torch.tensor([[4, 5, 6]]), torch.tensor([[-1, 0, 0]]))
    plain, _ = model.prefill(torch.tensor([[1, 2, 3, 4, 6]]))
    assert logits.dtype == torch.float32
    torch.testing.assert_close(logits[0, 2], plain[0, -1], atol=0.05, rtol=0)


# ----------------------------------------------------------------------------------------------
# greedy: identical to target-only greedy
# ----------------------------------------------------------------------------------------------

PATH_METHODS = ("token", "block", "gbv", "nss", "rrs", "rrsw", "spectr", "traversal")
CHAIN = ("token", "block")
GREEDY_CASES = [(m, Td) for m in PATH_METHODS for Td in ((0.0, 1.0) if m not in CHAIN else (0.0,))]


@pytest.mark.parametrize("method,draft_temperature", GREEDY_CASES)
def test_greedy_equals_target_only(pair, method, draft_temperature):
    target, draft = pair
    prompts = torch.randint(0, 64, (3, 6), generator=torch.Generator().manual_seed(7))
    reference = engine.decode(target, None, prompts, engine.target_only_method(), 24)
    K = 1 if method in CHAIN else 3
    result = engine.decode(target, draft, prompts, methods.paths_method(method, 3, K, draft_temperature), 24,
                           0.0, uniforms=11)
    assert torch.equal(result.tokens, reference.tokens)
    stats = result.stats
    assert stats.target_forwards == stats.iterations  # one verification per iteration, the first reads the prompt
    assert stats.draft_forwards == 1 + 3 * stats.iterations  # prefill + L per iteration
    assert 1.0 < stats.block_efficiency <= 4.0


def test_greedy_full_acceptance_and_one_token_prompt(pair):
    """Draft = target: every draft token is accepted (the 2-pending-token path of the draft cache)."""
    target, _ = pair
    for prompt in (torch.tensor([[9]]), torch.tensor([[3, 1, 4, 1, 5]])):
        reference = engine.decode(target, None, prompt, engine.target_only_method(), 17)
        for method, K in (("block", 1), ("traversal", 2), ("gbv", 2)):
            result = engine.decode(target, target, prompt, methods.paths_method(method, 4, K), 17, uniforms=0)
            assert torch.equal(result.tokens, reference.tokens)
            assert result.stats.mean_accepted == 4.0
            assert result.stats.iterations == 4  # ceil(17 / 5)


def test_stream_source_single_row(pair):
    target, draft = pair
    prompt = torch.tensor([2, 4, 6])
    rrs = methods.paths_method("rrs", 3, 2)
    a = engine.decode(target, draft, prompt, rrs, 12, 1.0, uniforms=NumpyUniforms(3))
    b = engine.decode(target, draft, prompt, rrs, 12, 1.0, uniforms=NumpyUniforms(3))
    assert torch.equal(a.tokens, b.tokens)
    with pytest.raises(ValueError, match="uniforms"):
        engine.decode(target, draft, torch.zeros(2, 3, dtype=torch.long), methods.paths_method("block", 3), 4,
                      uniforms=NumpyUniforms(0))


# ----------------------------------------------------------------------------------------------
# law at T > 0
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def law_pair():
    # Peaked, disagreeing conditionals: every rule branch (accept, reject, residual) is exercised.
    # Very small (hidden 8, 2 heads) so that 241,883 runs take seconds.
    return (tiny(8, 20, head_scale=25.0, hidden=8, heads=2),
            tiny(8, 21, head_scale=25.0, hidden=8, heads=2))


LAW_CASES = [("token", 1, 2, 1.0, None), ("block", 1, 2, 1.0, None), ("gbv", 2, 2, 1.0, None),
             ("traversal", 2, 2, 0.8, 1.2),
             pytest.param("rrsw", 3, 1, 1.0, None, marks=pytest.mark.slow),
             pytest.param("spectr", 2, 2, 1.0, None, marks=pytest.mark.slow),
             pytest.param("rrs", 3, 2, 1.0, None, marks=pytest.mark.slow),
             pytest.param("nss", 2, 2, 1.0, None, marks=pytest.mark.slow)]


@pytest.mark.parametrize("method,K,L,T,Td", LAW_CASES)
def test_first_two_tokens_follow_target_law(law_pair, method, K, L, T, Td):
    target, draft = law_pair
    prompt = torch.tensor([[1, 5, 2, 6]])
    law = exact_two_token_law(target, prompt, T)  # [8, 8]
    n = g_test_sample_size(63)
    counts = np.zeros(64)
    chunk = 60_000
    source = TorchUniforms(sum(map(ord, method)))
    for start in range(0, n, chunk):
        rows = min(chunk, n - start)
        result = engine.decode(target, draft, prompt.expand(rows, -1), methods.paths_method(method, L, K, Td), 2, T,
                               uniforms=source)
        codes = (result.tokens[:, 0] * 8 + result.tokens[:, 1]).numpy()
        counts += np.bincount(codes, minlength=64)
    assert (law > 0).all()
    stat, p_value, df = g_test(counts, law.reshape(-1))
    assert p_value > ALPHA, f"{method}: G = {stat:.1f}, df = {df}, p = {p_value:.3g}, n = {n}"


def test_target_only_sampling_law(law_pair):
    target, _ = law_pair
    prompt = torch.tensor([[1, 5, 2, 6]])
    law = exact_two_token_law(target, prompt, 1.0)
    n = g_test_sample_size(63)
    result = engine.decode(target, None, prompt.expand(n, -1), engine.target_only_method(), 2, 1.0, uniforms=5)
    counts = np.bincount((result.tokens[:, 0] * 8 + result.tokens[:, 1]).numpy(), minlength=64)
    stat, p_value, df = g_test(counts, law.reshape(-1))
    assert p_value > ALPHA, f"G = {stat:.1f}, df = {df}, p = {p_value:.3g}"


# ----------------------------------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------------------------------

def test_bad_input(pair):
    target, draft = pair
    prompt = torch.tensor([[1, 2, 3]])
    block = methods.paths_method("block", 3)
    with pytest.raises(ValueError, match="method"):
        methods.paths_method("nope", 3)
    with pytest.raises(ValueError, match="draft_length"):
        methods.paths_method("block", 0)
    with pytest.raises(ValueError, match="num_paths"):
        methods.paths_method("token", 3, 2)
    with pytest.raises(ValueError, match="max_new_tokens"):
        engine.decode(target, draft, prompt, block, 0)
    with pytest.raises(ValueError, match="temperature"):
        engine.decode(target, draft, prompt, block, 4, -1.0)
    with pytest.raises(ValueError, match="prompt_ids"):
        engine.decode(target, None, torch.tensor([[1, 99]]), engine.target_only_method(), 4)
    with pytest.raises(ValueError, match="draft"):
        engine.decode(target, tiny(30, 1), prompt, block, 4)
    with pytest.raises(TypeError, match="target"):
        engine.decode("model", draft, prompt, block, 4)
    with pytest.raises(TypeError, match="model"):
        CausalLM(object())
    _, cache = target.prefill(prompt)
    with pytest.raises(ValueError, match="length"):
        crop_cache(cache, 9)
    with pytest.raises(ValueError, match="parents"):
        target.tree(cache, torch.tensor([[1, 2]]), torch.tensor([[-1]]))
    with pytest.raises(ValueError, match="past_valid"):
        target.tree(cache, torch.tensor([[1]]), torch.tensor([[-1]]), past_valid=torch.ones(1, 2, dtype=torch.bool))


def test_eager_attention_greedy_and_bf16_smoke():
    """Eager attention (float masks) reproduces greedy too; bf16 decoding runs end to end."""
    target, draft = tiny(48, 30, attn="eager"), tiny(48, 30, noise=0.1, attn="eager")
    prompt = torch.tensor([[4, 8, 15, 16]])
    reference = engine.decode(target, None, prompt, engine.target_only_method(), 15)
    result = engine.decode(target, draft, prompt, methods.paths_method("traversal", 3, 3, 1.0), 15, uniforms=2)
    assert torch.equal(result.tokens, reference.tokens)
    target16, draft16 = tiny(48, 30, dtype=torch.bfloat16), tiny(48, 30, noise=0.1, dtype=torch.bfloat16)
    out = engine.decode(target16, draft16, prompt, methods.paths_method("gbv", 3, 2), 10, 1.0, uniforms=3)
    assert out.tokens.shape == (1, 10) and bool(((out.tokens >= 0) & (out.tokens < 48)).all())
