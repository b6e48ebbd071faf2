"""Runner-up leaves (`speedups.policy.ChainPolicy.grow`, ``leaves="on"``): at T = 0 the draft's
second choice at each chain depth hangs below the chain where the costs say it pays, and the tree
is followed greedily. The output stays target-only's greedy tokens (also in `test_policy`'s
greedy test, every storage), leaves are kept and accepted, they save target forwards on the tiny
pair with cheap target rows, a path that ends in a leaf teaches the calibration one chain token
fewer, and at T > 0 nothing changes."""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec.empirical import engine, methods  # noqa: E402
from verispec.empirical.speedups import policy as torch_policy  # noqa: E402

from .test_decode_tiny import tiny  # noqa: E402
from .test_policy import COSTS, FLAT, PROMPTS  # noqa: E402


@pytest.fixture(scope="module")
def pair():
    return tiny(64, 0, head_scale=4.0), tiny(64, 0, noise=0.1, head_scale=4.0)


def _recording(method):
    """`method` whose verifier records (tree, verdict) of every iteration."""
    seen, inner = [], method.verifier

    class Recorder:
        name, needs_q, trusted, capturable = inner.name, inner.needs_q, True, False

        def __call__(self, p, tree, source, temperature, rows=None):
            verdict = inner(p, tree, source, temperature, rows)
            seen.append((tree, verdict))
            return verdict

    return replace(method, verifier=Recorder()), seen


def _leaf_counts(seen):
    """(leaves kept, paths that end in a leaf) over the recorded iterations: a leaf is a real node
    off the chain (not on paths[:, 0])."""
    kept = ended = 0
    for tree, verdict in seen:
        chain = torch.zeros_like(tree.real).scatter_(1, tree.paths[:, 0].clamp(min=0), tree.paths[:, 0] >= 0)
        chain[:, 0] = True
        leaf = tree.real & ~chain  # [B, N]
        kept += int(leaf.sum())
        last = verdict.nodes.gather(1, (verdict.tau - 1).clamp(min=0).unsqueeze(1))[:, 0]
        ended += int(((verdict.tau > 0) & leaf.gather(1, last.clamp(min=0).unsqueeze(1))[:, 0]).sum())
    return kept, ended


def test_leaves_are_kept_accepted_and_save_target_forwards_at_t0(pair):
    target, draft = pair
    reference = engine.decode(target, None, PROMPTS, engine.target_only_method(), 40)
    runs = {}
    for leaves in ("off", "on"):
        method, seen = _recording(methods.get("adaptive", policy="auto", costs=FLAT, leaves=leaves))
        runs[leaves] = engine.decode(target, draft, PROMPTS, method, 40), _leaf_counts(seen)
        assert runs[leaves][0].tokens.tolist() == reference.tokens.tolist()
    assert runs["off"][1] == (0, 0)
    kept, ended = runs["on"][1]
    assert kept > ended > 0
    logs = runs["on"][0].stats.logs  # the counts the bench records
    assert (int(logs["leaves_kept"].sum()), int(logs["leaf_tokens"].sum())) == (kept, ended)
    assert runs["on"][0].stats.target_forwards < runs["off"][0].stats.target_forwards


def test_no_leaf_is_kept_where_target_rows_are_dear(pair):
    """COSTS prices a 16-row target forward at 4.5 one-row ones: a leaf's extra row never pays."""
    target, draft = pair
    method, seen = _recording(methods.get("adaptive", policy="auto", costs=COSTS, leaves="on"))
    engine.decode(target, draft, PROMPTS, method, 40)
    assert seen and _leaf_counts(seen) == (0, 0)


def test_at_t1_leaves_change_nothing(pair):
    target, draft = pair
    out = [engine.decode(target, draft, PROMPTS, methods.get("adaptive", policy="auto", costs=FLAT, leaves=lv),
                         30, 1.0, uniforms=11) for lv in ("off", "on")]
    assert out[0].tokens.tolist() == out[1].tokens.tolist()
    assert torch.equal(out[0].stats.accepted_lengths, out[1].stats.accepted_lengths)


def test_a_path_that_ends_in_a_leaf_teaches_one_chain_token_fewer():
    """Planted contrast: the same verdict read as a chain path (no leaf_base) counts the rejected
    chain token as accepted."""
    counts = []
    for leaf_base in (None, 5):
        chain = torch_policy.ChainPolicy(torch_policy.PolicyConfig(COSTS, calibration_weight=0), max_length=4,
                                         leaves=True)
        chain.start(1, "cpu")
        chain.begin(torch.tensor([10]))
        for depth in range(4):
            chain.stops(torch.full((1,), 0.9), torch.full((1,), depth), torch.tensor([True]), torch.tensor([4]))
        chain.leaf_base = leaf_base
        # chain nodes 1..4, leaves 5..8: accepted chain nodes 1, 2 then leaf 7 (below node 2, depth 3)
        chain.observe(torch.tensor([4]), torch.tensor([3]), torch.tensor([True]), torch.tensor([[1, 2, 7, -1]]))
        counts.append((float(chain.seen.sum()), float(chain.accepted.sum())))
    assert counts[1] == (3.0, 2.0)  # tokens 1, 2 accepted, token 3 rejected (the leaf took its place)
    assert counts[0] == (4.0, 3.0)


def test_leaves_need_policy_auto_and_the_adaptive_chain():
    with pytest.raises(ValueError, match="leaves"):
        methods.get("adaptive", leaves="on")
    with pytest.raises(ValueError, match="leaves"):
        methods.get("adaptive", policy="auto", costs=COSTS, leaves="maybe")
    for name in ("block", "hybrid"):
        with pytest.raises((ValueError, TypeError), match="leaves"):
            methods.get(name, policy="auto", costs=COSTS, leaves="on")
