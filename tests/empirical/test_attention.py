"""Packed (EMS-SD) varlen attention: each row's queries see only that row's keys.

Exactness (fp32, atol 1e-5): on tiny random Qwen2 models (sdpa and eager bases) a packed batch of
rows with different lengths — prefill, chain steps with some rows idle, tree blocks, a compaction
that reorders the kept slots — gives, at every packed token, the logits of that row's own token
sequence run alone through the unmodified model. Planted bugs (a row that also sees another row's
cache; a tree block treated as a chain) fail the same check. The work issued to SDPA is counted:
sum_b q_b k_b scores, linear in B at fixed row lengths (a dense block-diagonal forward is
quadratic). `CountingCache` counts the slots a forward really writes.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from verispec.empirical.speedups import attention  # noqa: E402
from verispec.empirical.speedups.counting_cache import CountingCache  # noqa: E402
from verispec.empirical.speedups.attention import (PackedRows, new_counting_cache, packed_forward,  # noqa: E402
                                                   packed_rows, use_packed_attention)
from verispec.empirical.model import CausalLM, gather_cache  # noqa: E402

ATOL = 1e-5


def tiny(vocab_size=40, seed=0, attn="sdpa", dtype=torch.float32):
    config = transformers.Qwen2Config(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                                      max_position_embeddings=256, tie_word_embeddings=False)
    return CausalLM.from_config(config, seed=seed, dtype=dtype, attn_implementation=attn)


class PackedBatch:
    """A packed cache plus, per row, the true token sequence its slots hold (the test's ground truth)."""

    def __init__(self, lm, B, builder=packed_rows):
        self.lm, self.builder = lm, builder
        self.cache = new_counting_cache(lm)
        self.owner = torch.zeros(0, dtype=torch.long)  # [K]
        self.slot_token = []  # token held by each slot, cache order
        self.seqs = [[] for _ in range(B)]

    def step(self, blocks):
        """blocks: {row: [(token, local parent or -1), ...]} -> ({(row, j): logits [V]}, max error vs
        each node's root path run alone after the row's sequence)."""
        tokens, rows, parents, positions, where = [], [], [], [], {}
        for b in sorted(blocks):
            start, depth = len(tokens), []
            for j, (tok, parent) in enumerate(blocks[b]):
                depth.append(0 if parent < 0 else depth[parent] + 1)
                where[(b, j)] = len(tokens)
                tokens.append(tok), rows.append(b), parents.append(-1 if parent < 0 else start + parent)
                positions.append(len(self.seqs[b]) + depth[-1])
        rows_t = torch.tensor(rows)
        spec = self.builder(self.owner, rows_t, torch.tensor(parents))
        logits = packed_forward(self.lm, torch.tensor([tokens]), self.cache, torch.tensor([positions]), spec)
        self.owner = torch.cat([self.owner, rows_t])
        self.slot_token += tokens
        error, out = 0.0, {}
        for (b, j), i in where.items():
            path, node = [], j
            while node >= 0:
                path.append(blocks[b][node][0])
                node = blocks[b][node][1]
            alone, _ = self.lm.forward(torch.tensor([self.seqs[b] + path[::-1]]))  # no cache, no mask
            out[(b, j)] = logits[0, i]
            error = max(error, float((logits[0, i] - alone[0, -1]).abs().max()))
        return out, error

    def keep(self, K_old, new_paths, generator):
        """Keep the first K_old slots and, of the last block, row b's slots new_paths[b] (root
        first); the kept slots are gathered in a random order (slot order must not matter)."""
        kept = list(range(K_old))
        for b, slots in new_paths.items():
            kept += slots
            self.seqs[b] += [self.slot_token[s] for s in slots]
        order = torch.tensor(kept)[torch.randperm(len(kept), generator=generator)]
        gather_cache(self.cache, order)
        self.owner = self.owner[order]
        self.slot_token = [self.slot_token[s] for s in order.tolist()]

    def commit_all(self, blocks):
        """Rows keep their whole (chain) block."""
        for b in sorted(blocks):
            self.seqs[b] += [tok for tok, _ in blocks[b]]


def chain(tokens):
    return [(t, j - 1) for j, t in enumerate(tokens)]


def run_scenario(lm, builder=packed_rows):
    """Prefill 3 rows of lengths 5, 1, 8; a chain step with row 1 idle; a tree step; compaction
    in a random slot order; a last chain step. Returns the largest error over all steps."""
    use_packed_attention(lm)
    g = torch.Generator().manual_seed(0)
    V = lm.vocab_size
    draw = lambda n: torch.randint(0, V, (n,), generator=g).tolist()  # noqa: E731
    batch = PackedBatch(lm, 3, builder)
    errors = []
    for blocks in ({0: chain(draw(5)), 1: chain(draw(1)), 2: chain(draw(8))},
                   {0: chain(draw(2)), 2: chain(draw(1))}):
        errors.append(batch.step(blocks)[1])
        batch.commit_all(blocks)
    t = draw(7)
    tree = {0: [(t[0], -1), (t[1], 0), (t[2], 0), (t[3], 1), (t[4], 2)],  # two branches
            1: [(t[5], -1)],
            2: [(t[6], -1), (t[0], 0), (t[1], 0)]}
    K = batch.owner.numel()
    errors.append(batch.step(tree)[1])
    # row 0 keeps root -> node 2 -> node 4; row 1 its root; row 2 root -> node 2 (slot offsets 0, 5, 6)
    batch.keep(K, {0: [K + 0, K + 2, K + 4], 1: [K + 5], 2: [K + 6, K + 8]}, g)
    errors.append(batch.step({0: chain(draw(1)), 1: chain(draw(3)), 2: chain(draw(2))})[1])
    return max(errors)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_equals_each_row_alone(attn):
    assert run_scenario(tiny(attn=attn)) <= ATOL


def _leaky(owner, rows, parents=None):
    """Planted bug: row 1 also sees row 0's cached slots."""
    spec = packed_rows(owner, rows, parents)
    leaked = (owner == 0).nonzero().squeeze(1)
    segments = []
    for b, start, end, index, mask in spec.segments:
        if b == 1 and leaked.numel():
            index = torch.cat([leaked, index])
            if mask is not None:
                mask = torch.cat([torch.ones(end - start, leaked.numel(), dtype=torch.bool), mask], dim=1)
        segments.append((b, start, end, index, mask))
    return dataclasses.replace(spec, segments=tuple(segments))


def _as_chain(owner, rows, parents=None):
    """Planted bug: the tree's parents are ignored (every block read as a causal chain)."""
    return packed_rows(owner, rows)


@pytest.mark.parametrize("planted", [_leaky, _as_chain])
def test_planted_mask_bugs_are_caught(planted):
    assert run_scenario(tiny(), planted) > 1e-3


def test_other_forwards_are_unchanged():
    """After `use_packed_attention`, a 4D-float-mask tree forward and a plain forward give
    bit-identical logits to the model before the switch."""
    lm = tiny(seed=3)
    prefix = torch.tensor([[5, 9, 2, 7]])
    tokens, parents = torch.tensor([[11, 12, 15, 13]]), torch.tensor([[-1, 0, 0, 1]])

    def run():
        plain, cache = lm.forward(prefix)
        return plain, lm.tree(cache, tokens, parents)

    before = run()
    assert use_packed_attention(lm) == "verispec_packed_sdpa" == use_packed_attention(lm)
    after = run()
    assert all(torch.equal(a, b) for a, b in zip(before, after))


def test_work_is_sum_of_row_lengths(monkeypatch):
    """Scores issued to SDPA per layer = sum_b q_b k_b: at fixed row lengths, linear in B."""
    lm = tiny()
    use_packed_attention(lm)
    issued = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def counting(q, k, v, **kwargs):
        issued.append(q.shape[0] * q.shape[2] * k.shape[2])
        return sdpa(q, k, v, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counting)
    per_row = []
    for B in (1, 2, 4):
        cache, S, q = new_counting_cache(lm), 6, 3
        rows = torch.arange(B).repeat_interleave(S)
        packed_forward(lm, torch.zeros(1, B * S, dtype=torch.long), cache,
                       torch.arange(S).repeat(B).unsqueeze(0), packed_rows(torch.zeros(0, dtype=torch.long), rows))
        issued.clear()
        spec = packed_rows(rows, torch.arange(B).repeat_interleave(q))
        packed_forward(lm, torch.ones(1, B * q, dtype=torch.long), cache, (S + torch.arange(q)).repeat(B)[None], spec)
        layers = lm.model.config.num_hidden_layers
        assert len(issued) == layers  # one SDPA call per layer, whatever B: no loop over rows
        assert sum(issued) == layers * spec.scores == layers * B * q * (S + q)
        per_row.append(sum(issued) / B)
    assert per_row[0] == per_row[1] == per_row[2]  # dense block-diagonal: B * q * B * (S + q)


def test_ragged_rows_pad_only_the_gathered_keys(monkeypatch):
    """Rows of different lengths: one SDPA call per layer over R q_max k_max scores; the cache
    gains exactly the Q new slots (no padded slot written)."""
    lm = tiny()
    use_packed_attention(lm)
    cache = new_counting_cache(lm)
    lengths = [2, 7, 4]
    rows = torch.arange(3).repeat_interleave(torch.tensor(lengths))
    positions = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
    packed_forward(lm, torch.ones(1, rows.numel(), dtype=torch.long), cache, positions,
                   packed_rows(torch.zeros(0, dtype=torch.long), rows))
    issued = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def counting(q, k, v, **kwargs):
        issued.append((q.shape[0], q.shape[2], k.shape[2]))
        return sdpa(q, k, v, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counting)
    new = torch.tensor([0, 1, 1, 1, 2])  # q_b = 1, 3, 1
    spec = packed_rows(rows, new)
    packed_forward(lm, torch.ones(1, 5, dtype=torch.long), cache,
                   torch.tensor([[2, 7, 8, 9, 4]]), spec)
    layers = lm.model.config.num_hidden_layers
    assert issued == [(3, 3, 10)] * layers  # R = 3 rows, q_max = 3, k_max = 7 + 3
    assert spec.padded_scores == 3 * 3 * 10 and spec.scores == 1 * 3 + 3 * 10 + 1 * 5
    assert cache.slots_written == sum(lengths) + 5


def test_counting_cache_counts_real_writes():
    lm = tiny()
    padded = new_counting_cache(lm)
    tokens = torch.tensor([[0, 0, 3, 4, 5], [6, 7, 8, 9, 10]])  # row 0 left-padded by 2
    mask = torch.zeros(2, 1, 5, 5)
    mask[0, :, :, :2] = torch.finfo(torch.float32).min
    lm.forward(tokens, padded, attention_mask=mask + torch.full((5, 5), torch.finfo(torch.float32).min).triu(1))
    real = 3 + 5
    assert padded.slots_written == 10 and padded.slots_written - real == 2 and padded.slots_held() == 10
    use_packed_attention(lm)
    packed = new_counting_cache(lm)
    rows = torch.tensor([0, 0, 0, 1, 1, 1, 1, 1])
    packed_forward(lm, torch.tensor([[3, 4, 5, 6, 7, 8, 9, 10]]), packed,
                   torch.tensor([[0, 1, 2, 0, 1, 2, 3, 4]]), packed_rows(torch.zeros(0, dtype=torch.long), rows))
    assert packed.slots_written - real == 0 and packed.slots_held() == 8
    clone = copy.deepcopy(packed)
    assert clone.slots_written == 8 and isinstance(clone, CountingCache)


def test_bad_input():
    lm = tiny()
    empty = torch.zeros(0, dtype=torch.long)
    with pytest.raises(ValueError, match="rows"):
        packed_rows(empty, torch.tensor([1, 0]))
    with pytest.raises(ValueError, match="rows"):
        packed_rows(empty, empty)
    with pytest.raises(TypeError, match="owner"):
        packed_rows([0, 1], torch.tensor([0]))
    with pytest.raises(ValueError, match="parents"):
        packed_rows(empty, torch.tensor([0, 1]), parents=torch.tensor([-1, 0]))  # parent in another row
    with pytest.raises(ValueError, match="parents"):
        packed_rows(empty, torch.tensor([0, 0]), parents=torch.tensor([1, -1]))  # not earlier
    spec = packed_rows(empty, torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="use_packed_attention"):
        packed_forward(lm, torch.tensor([[1, 2]]), lm.new_cache(), torch.tensor([[0, 1]]), spec)
    use_packed_attention(lm)
    with pytest.raises(ValueError, match="cache"):
        packed_forward(lm, torch.tensor([[1, 2]]), lm.forward(torch.tensor([[1]]))[1], torch.tensor([[0, 1]]), spec)
    with pytest.raises(ValueError, match="tokens"):
        packed_forward(lm, torch.tensor([[1, 2, 3]]), lm.new_cache(), torch.tensor([[0, 1]]), spec)
    with pytest.raises(TypeError, match="rows"):
        attention.packed_attention_mask(lm, "rows")
    with pytest.raises(TypeError, match="lm"):
        use_packed_attention(lm.model)
    assert isinstance(spec, PackedRows) and spec.scores == 4


def test_bf16_matches_dense_block_diagonal():
    """bf16 smoke: the varlen path agrees with the dense block-diagonal mask it replaces."""
    lm = tiny(dtype=torch.bfloat16)
    use_packed_attention(lm)
    rows = torch.tensor([0, 0, 0, 1, 1, 2])
    spec = packed_rows(torch.zeros(0, dtype=torch.long), rows)
    tokens, positions = torch.tensor([[1, 2, 3, 4, 5, 6]]), torch.tensor([[0, 1, 2, 0, 1, 0]])
    varlen = packed_forward(lm, tokens, new_counting_cache(lm), positions, spec)
    same = rows.view(-1, 1) == rows.view(1, -1)
    allowed = same & (torch.arange(6).view(1, -1) <= torch.arange(6).view(-1, 1))
    dense_mask = torch.zeros(1, 1, 6, 6, dtype=torch.bfloat16).masked_fill_(~allowed, torch.finfo(torch.bfloat16).min)
    dense, _ = lm.forward(tokens, lm.new_cache(), position_ids=positions, attention_mask=dense_mask)
    torch.testing.assert_close(varlen, dense, atol=5e-2, rtol=0)


def _draft_layers(lm, layer2_spec):
    """Two draft-tree layers on a packed cache: layer 1 feeds siblings (row 0: a, b; row 1: c) below
    the committed prompts; layer 2 feeds one child below each (their parents are cached,
    uncommitted slots). Returns the largest error against each node's root path run alone."""
    use_packed_attention(lm)
    prompts, cache = [[5, 9, 2], [7, 1]], new_counting_cache(lm)
    owner = torch.tensor([0, 0, 0, 1, 1])
    packed_forward(lm, torch.tensor([[5, 9, 2, 7, 1]]), cache, torch.tensor([[0, 1, 2, 0, 1]]),
                   packed_rows(torch.zeros(0, dtype=torch.long), owner))
    a, b, c, d, e, f = 11, 12, 13, 14, 15, 16
    rows1 = torch.tensor([0, 0, 1])
    layer1 = packed_forward(lm, torch.tensor([[a, b, c]]), cache, torch.tensor([[3, 3, 2]]),
                            packed_rows(owner, rows1, torch.tensor([-1, -1, -1])))  # siblings a, b
    owner = torch.cat([owner, rows1])  # slots 5, 6, 7 hold a, b, c (uncommitted)
    layer2 = packed_forward(lm, torch.tensor([[d, e, f]]), cache, torch.tensor([[4, 4, 3]]), layer2_spec(owner))
    expected = [(layer1, 0, prompts[0] + [a]), (layer1, 1, prompts[0] + [b]), (layer1, 2, prompts[1] + [c]),
                (layer2, 0, prompts[0] + [a, d]), (layer2, 1, prompts[0] + [b, e]), (layer2, 2, prompts[1] + [c, f])]
    return max(float((logits[0, i] - lm.forward(torch.tensor([seq]))[0][0, -1]).abs().max())
               for logits, i, seq in expected)


def test_uncommitted_forest_across_forwards():
    """A tree grown one forward per layer: a node sees its row's committed prefix and its cached
    ancestors, never a cached sibling (planted: every cached slot treated as committed)."""
    rows, parents = torch.tensor([0, 0, 1]), torch.tensor([-2 - 5, -2 - 6, -2 - 7])  # d below a, e below b, f below c

    def spec(forest):
        return lambda owner: packed_rows(owner, rows, parents, forest=forest)

    assert _draft_layers(tiny(seed=5), spec(torch.tensor([-1] * 5 + [-2, -2, -2]))) <= ATOL
    # planted: the cached siblings treated as committed (d also sees b, e also sees a)
    assert _draft_layers(tiny(seed=5), lambda owner: packed_rows(owner, rows, torch.tensor([-1, -1, -1]))) > 1e-3
    with pytest.raises(ValueError, match="forest"):  # cached parents without a forest
        _draft_layers(tiny(seed=5), spec(None))
    with pytest.raises(ValueError, match="forest"):  # a chain that leaves the row
        _draft_layers(tiny(seed=5), spec(torch.tensor([-1] * 5 + [-2, -2, 3])))
    with pytest.raises(ValueError, match="forest"):  # a cached parent that is committed
        _draft_layers(tiny(seed=5), spec(torch.full((8,), -1)))


def test_transformers_generate_unchanged_after_switch():
    """transformers' own generate (plain and assisted) gives the same tokens after the switch: the
    registered mask function is the base implementation's, and non-packed forwards delegate."""
    target, draft = tiny(50, seed=1), tiny(50, seed=2)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    kwargs = dict(max_new_tokens=12, do_sample=False, pad_token_id=0)

    def run():
        return (target.model.generate(ids, **kwargs),
                target.model.generate(ids, assistant_model=draft.model, **kwargs))

    before = run()
    use_packed_attention(target)
    use_packed_attention(draft)
    assert all(torch.equal(a, b) for a, b in zip(before, run()))
