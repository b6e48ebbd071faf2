"""Batched mode for every chain, multi-path, selection and tree method (`engine.decode` on a list
of prompts with storage "padded", "vanilla" or "packed" = EMS-SD), on tiny random Qwen2 models
(fp32, CPU; no hub). tests/empirical/test_batched.py covers token and block in depth; this file
holds every other method that batches (`verispec.bench.batched.BATCHED_METHODS`) to the same checks.

- Greedy (T = 0): every row of a batch of 5 prompts of different lengths (1-12 tokens) equals
  its prompt's batch-1 run and target-only greedy, in all three storages.
- T = 1: the three storages read the same uniforms in the same order, so with one seed they emit
  identical tokens row by row (rows accepting different lengths: the coupling is not vacuous).
- Law at T = 1 on the padded layout, for multi-path rules (gbv, spectr, traversal) and a tree
  (opt_tree): the joint law of the first 2 generated tokens (V = 8, 64 outcomes) equals the
  target's exact law from the model's softmax. G-test (`verispec.testing.gtest`), alpha = 1e-6,
  power 0.9 against any law at total variation >= 0.03 (n = g_test_sample_size(63, tv=0.03)
  rows); at TV >= 0.01 (n = 241,883, as test_batched.py) under `-m slow`.
- Planted bug: rows that see each other in the packed layout fail the greedy check.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from verispec.bench.batched import BATCHED_METHODS  # noqa: E402
from verispec.empirical import engine, kv, methods  # noqa: E402
from verispec.empirical.uniforms import TorchUniforms  # noqa: E402
from verispec.reference import registry  # noqa: E402
from verispec.testing.gtest import ALPHA, g_test, g_test_sample_size  # noqa: E402

from .laws import exact_two_token_law  # noqa: E402
from .test_batched import (LAW_PROMPT, leaky_rows, coupled_pair,  # noqa: E402,F401
                           law_pair, pair, prompts)  # (fixtures)

N_TOKENS = 10
STORAGES = ("padded", "vanilla", "packed")
#: token and block: tests/empirical/test_batched.py
OTHERS = [name for name in BATCHED_METHODS if name not in ("token", "block")]


@pytest.fixture(scope="module")
def few(prompts):
    """5 of test_batched's prompts: lengths 5, 1, 9, 3, 12 (some repeat a phrase: prompt lookup drafts)."""
    return prompts[:5]


@pytest.fixture(scope="module")
def greedy(pair, few):
    return torch.cat([engine.decode(pair[0], None, p, engine.target_only_method(), N_TOKENS).tokens for p in few])


def _decode(pair, name, prompts, storage, T=0.0, seed=0, n=N_TOKENS, **params):
    target, draft = pair
    draft = draft if registry.spec(name).needs_draft else None
    return engine.decode(target, draft, prompts, methods.get(name, **params), n, T, seed, storage=storage)


def check_rows(pair, prompts, greedy, name):
    """Every storage's batch equals the per-row (B = 1) runs and target-only greedy, row by row."""
    single = torch.cat([_decode(pair, name, [p], "sequence").tokens for p in prompts])
    assert torch.equal(single, greedy), f"{name}: batch-1 runs differ from greedy"
    for storage in STORAGES:
        batch = _decode(pair, name, prompts, storage)
        bad = (batch.tokens != single).any(1).nonzero().squeeze(1).tolist()
        assert not bad, f"{name}/{storage}: rows {bad} differ from their batch-1 runs"


def test_every_batched_method_is_registered_and_phrase_pools_are_not(pair):
    torch_names = set(registry.names("torch"))
    assert set(BATCHED_METHODS) <= torch_names and "block" in BATCHED_METHODS and "gbv" in BATCHED_METHODS
    pools = {"ouroboros", "ouroboros_phrase", "lookahead"}
    assert {name for name in registry.REGISTRY if registry.spec(name).keeps_pool} == pools
    assert torch_names - set(BATCHED_METHODS) - {"target_only"} == pools
    for name in torch_names - set(BATCHED_METHODS) - {"target_only"}:  # the rest refuse a batch
        with pytest.raises(ValueError, match="prompts"):
            _decode(pair, name, [torch.tensor([1, 2]), torch.tensor([3])], "padded")


@pytest.mark.parametrize("name", OTHERS)
def test_greedy_rows_equal_batch1(pair, few, greedy, name):
    check_rows(pair, few, greedy, name)


@pytest.mark.parametrize("name", OTHERS)
def test_storages_draw_the_same_tokens_at_t1(coupled_pair, name):
    """Coupling: same uniforms in the same order -> identical outputs in every storage (16 prompts
    of 1-9 tokens; a draft that disagrees often, so rows accept different lengths)."""
    g = torch.Generator().manual_seed(9)
    prompts = [torch.randint(0, 4, (int(n),), generator=g) for n in torch.randint(1, 10, (16,), generator=g)]
    runs = {storage: _decode(coupled_pair, name, prompts, storage, T=1.0, seed=7) for storage in STORAGES}
    for storage in STORAGES[1:]:
        assert torch.equal(runs[storage].tokens, runs["padded"].tokens), f"{name}/{storage}"
    assert runs["packed"].stats.accepted_lengths.unique().numel() > 1  # rows accepted different lengths


LAW_CASES = [("gbv", {"num_paths": 2, "draft_length": 2}), ("spectr", {"num_paths": 2, "draft_length": 2}),
             ("traversal", {"num_paths": 2, "draft_length": 2}), ("opt_tree", {"node_budget": 4})]


def _g_test_first_two_tokens(law_pair, name, params, tv):
    target, draft = law_pair
    law = exact_two_token_law(target, LAW_PROMPT, 1.0)
    n = g_test_sample_size(63, tv=tv)
    counts, source = np.zeros(64), TorchUniforms(sum(map(ord, name)))
    for start in range(0, n, 60_000):
        rows = min(60_000, n - start)
        result = engine.decode(target, draft, [LAW_PROMPT] * rows, methods.get(name, **params), 2, 1.0, source,
                               storage="padded")
        counts += np.bincount((result.tokens[:, 0] * 8 + result.tokens[:, 1]).numpy(), minlength=64)
    stat, p_value, df = g_test(counts, law.reshape(-1))
    assert p_value > ALPHA, f"{name}: G = {stat:.1f}, df = {df}, p = {p_value:.3g}, n = {n}"


@pytest.mark.parametrize("name,params", LAW_CASES)
def test_first_two_tokens_follow_target_law_batched(law_pair, name, params):
    """n = g_test_sample_size(63, tv=0.03) rows: power 0.9 against any law at TV >= 0.03."""
    _g_test_first_two_tokens(law_pair, name, params, 0.03)


@pytest.mark.slow
@pytest.mark.parametrize("name,params", LAW_CASES)
def test_first_two_tokens_follow_target_law_batched_tv_001(law_pair, name, params):
    """n = 241,883 rows: power 0.9 against any law at TV >= 0.01, as test_batched.py."""
    _g_test_first_two_tokens(law_pair, name, params, 0.01)


def test_planted_leak_between_rows_is_caught(pair, few, greedy, monkeypatch):
    check_rows(pair, few, greedy, "gbv")
    monkeypatch.setattr(kv.PackedKV, "_varlen_rows", leaky_rows)
    with pytest.raises(AssertionError):
        check_rows(pair, few, greedy, "gbv")
