"""Block verification's greedy shortcut (`block_rule(greedy=True)`): with a one-hot target every
weight w_i is 0 or 1 and the stop probability h_i equals w_i, so the rule skips the
vocabulary-wide pass and must emit exactly what the full rule emits on the same uniforms."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from verispec.empirical.drafters import DraftTree  # noqa: E402
from verispec.empirical.uniforms import TorchUniforms  # noqa: E402
from verispec.empirical.verifiers import block, block_rule  # noqa: E402
from verispec.empirical.verifiers.nodes import PathRule  # noqa: E402


def _instance(seed: int, B: int, L: int, V: int, one_hot_q: bool):
    """A one-hot target p [B, L+1, V], a draft law q [B, L, V] (Dirichlet rows, or one-hot: a
    greedy draft), drafted tokens that follow the target's argmax for a random number of steps
    (so every tau in 0..L occurs), and uniforms [B, L+1]."""
    g = torch.Generator().manual_seed(seed)
    hot = torch.randint(V, (B, L + 1), generator=g)
    p = torch.zeros(B, L + 1, V, dtype=torch.float64).scatter_(-1, hot.unsqueeze(-1), 1.0)
    follow = torch.randint(L + 1, (B, 1), generator=g)  # drafted tokens 1..follow match the argmax
    other = (hot[:, :L] + torch.randint(1, V, (B, L), generator=g)) % V
    draft = torch.where(torch.arange(L) < follow, hot[:, :L], other)
    if one_hot_q:
        q = torch.zeros(B, L, V, dtype=torch.float64).scatter_(-1, draft.unsqueeze(-1), 1.0)
    else:
        q = torch.distributions.Dirichlet(torch.ones(V, dtype=torch.float64)).sample((B, L))
    return p, q, draft, torch.rand(B, L + 1, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("one_hot_q", [False, True])
@pytest.mark.parametrize("L", [1, 2, 5])
def test_greedy_block_rule_emits_exactly_what_the_full_rule_emits(L, one_hot_q):
    for seed in range(20):
        p, q, draft, u = _instance(seed, 16, L, 7, one_hot_q)
        full, fast = block_rule(p, q, draft, u), block_rule(p, q, draft, u, greedy=True)
        for a, b in zip(full, fast):
            assert torch.equal(a, b)
        assert set(full.tau.tolist()) <= set(range(L + 1))


def test_the_shortcut_is_wrong_without_a_one_hot_target_and_validation_says_so():
    """The planted misuse: h_i = w_i is not block verification when p is not one-hot, so the
    equality above is not vacuous, and `validate` names p."""
    g = torch.Generator().manual_seed(0)
    B, L, V = 256, 3, 4
    p = torch.distributions.Dirichlet(torch.ones(V, dtype=torch.float64)).sample((B, L + 1))
    q = torch.distributions.Dirichlet(torch.ones(V, dtype=torch.float64)).sample((B, L))
    draft = torch.randint(V, (B, L), generator=g)
    u = torch.rand(B, L + 1, generator=g, dtype=torch.float64)
    full, fast = block_rule(p, q, draft, u), block_rule(p, q, draft, u, greedy=True, validate=False)
    assert not torch.equal(full.tau, fast.tau)
    with pytest.raises(ValueError, match="p"):
        block_rule(p, q, draft, u, greedy=True)


def _chain_tree(draft: torch.Tensor, q: torch.Tensor, chain: bool) -> DraftTree:
    """The chain draft [B, L] with q [B, L, V] as an engine tree in node layout (node j = depth j);
    `chain`: flagged as a chain (the verifier reads slices) or not (per-length groups)."""
    B, L = draft.shape
    tokens = torch.cat([torch.zeros(B, 1, dtype=torch.long), draft], 1)  # [B, 1 + L]
    parents = (torch.arange(L + 1) - 1).expand(B, L + 1)
    q_nodes = torch.cat([q, torch.zeros_like(q[:, :1])], 1)  # [B, 1 + L, V]: the deepest node drew nothing
    return DraftTree(tokens, parents, torch.ones(B, L + 1, dtype=torch.bool), q_nodes,
                     paths=torch.arange(1, L + 1).expand(B, 1, L).clone(), chain=chain)


@pytest.mark.parametrize("chain", [True, False])
def test_the_engine_verifier_takes_the_shortcut_at_temperature_zero_only(monkeypatch, chain):
    calls = []
    real = block.stop_probability
    monkeypatch.setattr(block, "stop_probability", lambda *a: calls.append(1) or real(*a))
    p, q, draft, _ = _instance(3, 4, 4, 6, one_hot_q=True)
    rule = PathRule("block")
    out = {}
    for T in (0, 1):
        out[T] = rule(p, _chain_tree(draft, q, chain), TorchUniforms(7), T)
        assert len(calls) == T  # the vocabulary-wide pass runs at T = 1 only
    for a, b in zip(out[0], out[1]):
        assert torch.equal(a, b)
