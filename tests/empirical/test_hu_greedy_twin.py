"""hu_greedy's torch twin (`drafters.greedy_paths.GreedyDraftDrafter` + `TopDownSelection("hu_greedy")`)
against the numpy reference (Hu et al. 2025, arXiv 2502.18779):

- The drafter and the step on shared uniforms: on random nodes (V 2-7, K 1-4, flat to peaked q,
  q with zeros or a single token), the torch `greedy_draft` drafts the reference's tokens with the
  reference's q_last, and the torch `hu_greedy_step` emits the reference's token reading as many
  uniforms. This checks the torch drafter's law, which the engine test below cannot (both sides
  use it).
- On the engine (tiny random Qwen2 pair, V = 16): the twin and the reference rule through the
  adapter emit the same tokens and accepted lengths at T in {0, 0.7, 1} (rejections asserted); at
  T = 0 it reproduces target-only greedy decoding. Planted: a step that tests the FIRST draft (a
  greedy one) instead of the drawn one diverges.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from verispec.empirical.drafters import greedy_paths as torch_drafter  # noqa: E402
from verispec.empirical.verifiers import multistep  # noqa: E402
from verispec.reference import drafters as reference_drafters  # noqa: E402
from verispec.reference.verifiers.hu_greedy import hu_greedy_step  # noqa: E402

from .replay import replay_sampler  # noqa: E402


def _nodes(count=300, seed=0):
    rng = np.random.default_rng(seed)
    for i in range(count):
        V, K = int(rng.integers(2, 8)), int(rng.integers(1, 5))
        alpha = [0.1, 0.5, 1.0, 5.0][i % 4]
        p, q = rng.dirichlet([alpha] * V), rng.dirichlet([alpha] * V)
        if i % 5 == 0:
            q[rng.random(V) < 0.4] = 0.0  # zeros: fewer positive tokens than K
            q = q / q.sum() if q.sum() > 0 else np.eye(V)[0]
        if i % 23 == 0:
            q = np.eye(V)[int(rng.integers(V))]  # a single positive token: one draft, no greedy one
        yield p, q, K, rng.random(3)


def test_torch_drafter_and_step_equal_the_reference_on_shared_uniforms():
    uses = set()
    for p, q, K, u in _nodes():
        drafts, q_last = reference_drafters.greedy_draft(q, K, replay_sampler(u[:1]))
        sampler = replay_sampler(u[1:])
        y = hu_greedy_step(p, q_last, drafts, sampler)
        tokens, drawn, t_q_last = torch_drafter.greedy_draft(torch.tensor(q).unsqueeze(0), K,
                                                             torch.tensor(u[:1]))
        assert tokens[0][drawn[0]].tolist() == list(drafts), (q, K)
        np.testing.assert_allclose(t_q_last[0].numpy(), q_last, rtol=0, atol=1e-15)
        row = torch.where(drawn, tokens, -1)  # [1, K]
        t_y, used = multistep.hu_greedy_step(torch.tensor(p).unsqueeze(0), t_q_last, row,
                                              torch.tensor(u[1:]).unsqueeze(0))
        assert (int(t_y[0]), int(used[0])) == (y, sampler.generator.used)
        uses.add((len(drafts) > 1, int(used[0])))
    assert uses == {(False, 1), (False, 2), (True, 1), (True, 2)}  # accepted, corrected; with greedy drafts


pytest.importorskip("transformers")

from verispec.empirical import engine, methods  # noqa: E402

from .test_decode_tiny import tiny  # noqa: E402
from .test_engine import twin_and_adapter  # noqa: E402

CASES = [dict(draft_length=2, num_paths=2), dict(draft_length=3, num_paths=3)]


@pytest.fixture(scope="module")
def pair():
    return tiny(16, 5, head_scale=3.0), tiny(16, 6, head_scale=3.0)


@pytest.mark.parametrize("T", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("params", CASES, ids=["L2-K2", "L3-K3"])
def test_twin_and_adapter_emit_the_same_tokens(pair, params, T):
    rejected = 0
    for seed in range(3):
        twin, ref = twin_and_adapter(pair, "hu_greedy", params, T, seed, tokens=12)
        assert torch.equal(twin.tokens, ref.tokens), seed
        assert torch.equal(twin.stats.accepted_lengths, ref.stats.accepted_lengths), seed
        rejected += int((twin.stats.accepted_lengths < params["draft_length"]).sum())
    assert T == 0 or rejected > 0  # the corrections and the residual were exercised


def test_planted_step_testing_a_greedy_draft_diverges(pair, monkeypatch):
    original = multistep.hu_greedy_step

    def first_draft(p, q, drafts, u):  # tests path 0 (greedy, q_last = 0 there) instead of the drawn one
        return original(p, q, torch.where(drafts[:, :1] >= 0, drafts[:, :1], drafts[:, -1:]), u)

    monkeypatch.setattr(multistep, "hu_greedy_step", first_draft)
    diverged = [not torch.equal(*(r.tokens for r in twin_and_adapter(pair, "hu_greedy", CASES[0], 1.0, seed, tokens=12)))
                for seed in range(3)]
    assert any(diverged)


def test_greedy_target_equals_target_only(pair):
    target, draft = pair
    prompts = [torch.tensor([3, 1, 4, 1, 5]), torch.tensor([9]), torch.tensor([2, 7, 1, 8, 2, 8, 1])]
    greedy = torch.cat([engine.decode(target, None, p.unsqueeze(0), engine.target_only_method(), 10).tokens
                        for p in prompts])
    result = engine.decode(target, draft, prompts, methods.get("hu_greedy", draft_length=3, num_paths=3), 10, uniforms=3)
    assert torch.equal(result.tokens, greedy)
