"""PackedKV: draft tree layers below cached siblings run per-row (varlen) attention with a forest.

A draft tree grows one forward per layer (`trees.TreeDrafter`): layer d + 1's nodes hang below
layer d's nodes, which sit in the cache uncommitted next to their siblings. A node must see its
row's committed slots and its cached ancestors, never a cached sibling (nor an uncle), and never
another row's slot. `PackedKV` passes those uncommitted slots to `attention.packed_rows` as a
`forest`, so such forwards also cost sum_b q_b k_b scores, with no dense [Q, S + Q] mask.

Checked here on a tiny random Qwen2 (fp32, sdpa and eager): for rows of different lengths, three
layer forwards (with padding nodes), a commit and a further forward, every real node's logits
equal those of the row's own tokens (prompt + the node's root path) run alone through the
unmodified model, to 1e-5 (measured largest difference in the failure message); the dense mask is
never built. Planted: cached siblings seen as committed, a row that sees another row's cache:
both caught.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec.empirical.speedups import attention as attention_module  # noqa: E402
from verispec.empirical import kv as kv_module  # noqa: E402

from .test_decode_tiny import tiny  # noqa: E402

ATOL = 1e-5
PROMPTS = [[3, 1, 4, 1, 5], [9], [2, 7, 1, 8, 2, 8, 1]]
# The forwards of one iteration: (tokens [B, n], parents [B, n] in forest numbering, real [B, n]).
# Forward 1: root + two children. Forward 2: a layer below each child (siblings cached). Forward
# 3: one node below a layer-2 node (its uncles and cousins cached); row 1 runs nothing there.
LAYERS = [
    ([[0, 11, 12], [0, 11, 12], [0, 11, 12]], [[-1, 0, 0]] * 3, [[1, 1, 1], [1, 1, 0], [1, 1, 1]]),
    ([[13, 14, 15], [13, 14, 15], [13, 14, 15]], [[1, 1, 2]] * 3, [[1, 1, 1], [1, 1, 0], [1, 0, 1]]),
    ([[6], [6], [6]], [[4], [5], [5]], [[1], [0], [1]]),
]


@pytest.fixture(scope="module", params=["sdpa", "eager"])
def model(request):
    return tiny(16, 5, head_scale=4.0, attn=request.param)


def _plain(model, tokens):
    logits, _ = model.forward(torch.tensor([tokens]))
    return logits[0, -1]


def _paths(layers, b):
    """Row b's forest nodes -> token path below the root (forest numbering, append order)."""
    tokens, parents = [], []
    for layer_tokens, layer_parents, _ in layers:
        tokens += layer_tokens[b]
        parents += layer_parents[b]
    paths = []
    for j, parent in enumerate(parents):
        paths.append((paths[parent] if parent >= 0 else ()) + (tokens[j],))
    return paths


def run_layers(model):
    """Prefill, three layer forwards, compare with plain forwards; returns the largest difference."""
    kv = kv_module.PackedKV(model, len(PROMPTS))
    lengths = torch.tensor([len(p) for p in PROMPTS])
    tokens = torch.zeros(len(PROMPTS), int(lengths.max()), dtype=torch.long)
    for b, prompt in enumerate(PROMPTS):
        tokens[b, :len(prompt)] = torch.tensor(prompt)
    kv.prefill(tokens, lengths - 1)  # the root (each prompt's last token) comes with the tree
    layers = [([[PROMPTS[b][-1] if t == 0 and j == 0 and i == 0 else t for j, t in enumerate(row)]
                for b, row in enumerate(layer_tokens)], parents, real)
              for i, (layer_tokens, parents, real) in enumerate(LAYERS)]
    worst, offset = 0.0, 0
    for layer_tokens, parents, real in layers:
        real_t = torch.tensor(real, dtype=torch.bool)
        logits = kv.append(torch.tensor(layer_tokens), torch.tensor(parents), real_t)  # [B, n, V]
        for b in range(len(PROMPTS)):
            paths = _paths(layers, b)
            for j in range(real_t.shape[1]):
                if real[b][j]:
                    want = _plain(model, PROMPTS[b][:-1] + list(paths[offset + j]))
                    worst = max(worst, float((logits[b, j] - want).abs().max()))
        offset += real_t.shape[1]
    # keep root -> first child -> its first layer-2 node (row 1: the root only)
    keep = torch.zeros(len(PROMPTS), offset, dtype=torch.bool)
    keep[0, [0, 1, 3]] = True
    keep[1, 0] = True
    keep[2, [0, 1, 3]] = True
    kv.commit(keep)
    after = kv.append(torch.full((3, 1), 10), torch.full((3, 1), -1), torch.ones(3, 1, dtype=torch.bool))
    kept = {0: [11, 13], 1: [], 2: [11, 13]}
    for b, prompt in enumerate(PROMPTS):
        want = _plain(model, prompt + kept[b] + [10])
        worst = max(worst, float((after[b, 0] - want).abs().max()))
    assert kv.padded_slots == 0
    return worst


def _no_dense(self, *args):
    raise AssertionError("the dense block-diagonal mask was built")


def test_tree_layers_below_siblings_run_per_row(model, monkeypatch):
    forests = []
    packed_rows = attention_module.packed_rows

    def spy(owner, rows, parents=None, forest=None):
        forests.append(forest is not None)
        return packed_rows(owner, rows, parents, forest)

    monkeypatch.setattr(kv_module.PackedKV, "_attention_mask", _no_dense)
    monkeypatch.setattr(kv_module, "packed_rows", spy)  # the name the packed KV calls
    worst = run_layers(model)
    assert worst <= ATOL, f"largest logit difference to plain per-row forwards: {worst:.2e}"
    assert forests == [False, False, True, True, False]  # prefill, root layer, 2 layers below siblings, after


def _siblings_chained(self, m, S):
    """Bug: a row's uncommitted cached slots read as one chain (each slot's parent = the row's
    previous uncommitted slot), so a node also sees its cached siblings and uncles."""
    forest = torch.full((S,), -1, dtype=torch.long, device=self.owner.device)
    for b in range(self.slot.shape[0]):
        slots = torch.sort(self.slot[b, :m][self.slot[b, :m] >= 0]).values.tolist()
        for k, slot in enumerate(slots):
            forest[slot] = slots[k - 1] if k else -2
    return forest


def _other_row(owner, rows, parents=None, forest=None):
    """Bug: in forest forwards, row 0 also owns row 2's committed slots (a row sees another
    row's cache; row 2 loses its prefix)."""
    if forest is None:
        return _PACKED_ROWS(owner, rows, parents, forest)
    return _PACKED_ROWS(torch.where((owner == 2) & (forest == -1), 0, owner), rows, parents, forest)


_PACKED_ROWS = attention_module.packed_rows


@pytest.mark.parametrize("owner,name,bug", [(kv_module.PackedKV, "_forest", _siblings_chained),
                                            (kv_module, "packed_rows", _other_row)])
def test_planted_forest_bugs_are_caught(model, monkeypatch, owner, name, bug):
    monkeypatch.setattr(owner, name, bug)
    assert run_layers(model) > 1e-3  # a well-formed spec (packed_rows accepts it), wrong visibility
