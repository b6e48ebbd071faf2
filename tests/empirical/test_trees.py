"""Draft trees (OPT-Tree, arXiv 2406.17276, and static baselines) on tiny random Qwen2 models (fp32, CPU).

- Greedy: every tree kind at several node budgets (n = 1 included) reproduces target-only greedy
  decoding token for token, on a batch of prompts and on a one-token prompt.
- Forward counts: exactly one draft forward per tree layer and one target forward per iteration
  (plus the draft's prefill): draft_forwards == 1 + sum(layers), target_forwards == iterations (the first
  iteration's tree forward also reads the prompt).
- Structure: the drafted OPT-Tree equals the reference `opt_tree_structure` (pure python) on the
  draft's probabilities recomputed by plain (non-tree) forwards of every prefix; static trees equal
  their rank shapes; the per-iteration predicted E[A] of a whole run equals the recomputation from
  the full emitted prefix (the draft cache stays in sync).
- Planted bugs: a target tree mask letting siblings see each other breaks greedy equality; a draft
  mask letting siblings see each other, or never reset between layers, changes the drafted tree.
- Law at T > 0: the joint law of the first 2 tokens (V = 8, 64 outcomes) equals the exact target law.
  G-test (scipy power_divergence, lambda_="log-likelihood"), false-alarm rate alpha = 1e-6,
  n = g_test_sample_size(63) = 241,883 independent runs (batched), the size for power 0.9 against any
  law at total variation >= 0.01. Draw for draw, with the reference's uniform stream, the output equals
  the reference `methods.opt_tree` run (`NumpyUniforms` / `Sampler`).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from verispec.empirical import engine, model as model_module  # noqa: E402
from verispec.empirical.drafters import tree as trees  # noqa: E402
from verispec.empirical import methods as torch_methods  # noqa: E402
from verispec.empirical.drafters import probabilities  # noqa: E402
from verispec.empirical.model import CausalLM  # noqa: E402
from verispec.empirical.uniforms import NumpyUniforms, TorchUniforms  # noqa: E402
from verispec.reference import methods, registry  # noqa: E402
from verispec.reference.drafters import opt_tree_structure  # noqa: E402
from verispec.reference.models import LanguageModel  # noqa: E402
from verispec.reference.randomness import Sampler  # noqa: E402

from verispec.testing.gtest import ALPHA, g_test, g_test_sample_size  # noqa: E402
from .laws import exact_two_token_law  # noqa: E402

#: tree kind (`trees.TREES`) -> its method name in the registry
TREE_METHOD = {dict(e.torch_fixed)["kind"]: e.name for e in registry.REGISTRY.values() if "kind" in dict(e.torch_fixed)}


def tree_method(tree, **params):
    """The torch tree method drafting trees of kind `tree` (sample-and-follow)."""
    return torch_methods.tree_method(TREE_METHOD[tree], **params)


def tiny(vocab_size, seed, *, noise=0.0, head_scale=1.0, attn_scale=1.0, attn="sdpa", hidden=32, heads=4):
    """A 2-layer Qwen2 with random weights (fp32); `noise` perturbs a copy (a draft close to the
    target); `head_scale` multiplies the LM head (peaked conditionals); `attn_scale` the attention
    projections (attention then moves the logits enough for a wrong mask to flip argmaxes)."""
    config = transformers.Qwen2Config(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=2,
                                      num_attention_heads=heads, num_key_value_heads=heads // 2,
                                      intermediate_size=2 * hidden, max_position_embeddings=256,
                                      tie_word_embeddings=False)
    model = CausalLM.from_config(config, seed=seed, attn_implementation=attn)
    g = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for parameter in model.model.parameters():
            if noise:
                parameter.add_(noise * parameter.std() * torch.randn(parameter.shape, generator=g))
        for name, parameter in model.model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight")):
                parameter.mul_(attn_scale)
        model.model.get_output_embeddings().weight.mul_(head_scale)
    return model


class TorchLM(LanguageModel):
    """A reference oracle over a `CausalLM`: p(. | prefix) from a plain (non-tree) forward."""

    def __init__(self, lm: CausalLM, temperature: float):
        super().__init__(lm.vocab_size)
        self.lm, self.temperature = lm, temperature

    def _compute(self, prefix):
        logits, _ = self.lm.prefill(torch.tensor([prefix]))
        return probabilities(logits[0, -1], self.temperature).numpy()


@pytest.fixture(scope="module")
def pair():
    return tiny(64, 0, head_scale=3.0, attn_scale=2.0), tiny(64, 0, noise=0.3, head_scale=3.0, attn_scale=2.0)


@pytest.fixture(scope="module")
def peaked():
    """Peaked draft conditionals: trees several layers deep, and clear gaps between W's (float
    round-off of tree vs plain forwards decides no tie)."""
    return tiny(32, 5, head_scale=30.0), tiny(32, 6, head_scale=30.0)


# ----------------------------------------------------------------------------------------------
# greedy: identical to target-only greedy
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("tree", trees.TREES)
@pytest.mark.parametrize("budget", [1, 4, 12])
def test_greedy_equals_target_only(pair, tree, budget):
    target, draft = pair
    prompts = torch.randint(0, 64, (3, 6), generator=torch.Generator().manual_seed(7))
    reference = engine.decode(target, None, prompts, engine.target_only_method(), 24)
    result = engine.decode(target, draft, prompts, tree_method(tree, node_budget=budget, max_depth=4), 24)
    assert torch.equal(result.tokens, reference.tokens)
    assert result.tokens.shape == (3, 24)
    stats = result.stats
    assert bool((stats.logs["tree_sizes"] <= budget).all()) and bool((stats.logs["layers"] <= 4).all())
    single = engine.decode(target, draft, torch.tensor([11]), tree_method(tree, node_budget=budget), 9)
    greedy = engine.decode(target, None, torch.tensor([[11]]), engine.target_only_method(), 9)
    assert torch.equal(single.tokens, greedy.tokens)


def test_greedy_full_acceptance(pair):
    """Draft = target: the chain of its argmaxes is accepted whole (two pending draft tokens)."""
    target, _ = pair
    prompt = torch.tensor([[3, 1, 4, 1, 5]])
    reference = engine.decode(target, None, prompt, engine.target_only_method(), 17)
    result = engine.decode(target, target, prompt, tree_method("chain", node_budget=4), 17)
    assert torch.equal(result.tokens, reference.tokens)
    assert result.stats.mean_accepted == 4.0 and result.stats.iterations == 4  # ceil(17 / 5)
    # A one-hot q (draft temperature 0): zero-probability children are never drafted, so every tree
    # is the draft's argmax chain (as deep as the shape allows), W = 1 per node, E[A] predicted = depth.
    for tree in trees.TREES:
        result = engine.decode(target, target, prompt,
                               tree_method(tree, node_budget=6, max_depth=4, draft_temperature=0.0), 17)
        assert torch.equal(result.tokens, reference.tokens)
        depth = 4 if tree == "opt_tree" else max(len(u) for u in trees.static_shape(tree, 6, 4))
        assert result.stats.mean_accepted == depth and bool((result.stats.logs["tree_sizes"] == depth).all())
        assert bool((result.stats.logs["predicted_acceptance"] == depth).all())


# ----------------------------------------------------------------------------------------------
# forward counts
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("tree,budget,threshold,depth", [("opt_tree", 6, 0.0, 3), ("opt_tree", 8, 0.02, 6),
                                                         ("opt_tree", 1, 0.0, 5), ("chain", 5, 0.0, 3),
                                                         ("kary", 7, 0.0, 10), ("eagle", 9, 0.0, 10)])
def test_one_draft_forward_per_layer_one_target_forward_per_iteration(pair, tree, budget, threshold, depth):
    target, draft = pair
    method = tree_method(tree, node_budget=budget, gain_threshold=threshold, max_depth=depth)
    result = engine.decode(target, draft, torch.tensor([[4, 8, 15, 16]]), method, 20)
    s, logs = result.stats, result.stats.logs
    prefill = 1  # the draft reads the prompt but its last token; the target, with the first tree
    assert s.target_forwards == s.iterations  # one tree verification per iteration
    layers = logs["layers"]
    assert s.draft_forwards == prefill + int(layers.sum())  # one forward per layer, none wasted
    assert layers.numel() == s.iterations and bool((layers >= 1).all()) and bool((layers <= depth).all())
    if tree == "chain":
        assert bool((layers == min(budget, depth)).all())
    if tree == "opt_tree" and budget == 1:  # the one node's children can never be chosen: pruned
        assert s.draft_forwards == 1 + s.iterations
    predicted = logs["predicted_acceptance"]
    assert s.accepted_lengths.numel() == predicted.numel() == logs["tree_sizes"].numel()
    assert bool((predicted > 0).all()) and float(predicted.mean()) > 0


# ----------------------------------------------------------------------------------------------
# structure: the drafted tree equals the pure-python recomputation
# ----------------------------------------------------------------------------------------------

def _reference_opt_tree(draft_ref, prefix, n, threshold, depth, width=None):
    """(nodes {node: W}, layers) from `opt_tree_structure` on plain-forward probabilities."""
    asked = []

    def q_of(u):
        asked.append(len(u))
        return draft_ref.probs(tuple(prefix) + u)

    children = opt_tree_structure(q_of, n, threshold, depth, width)
    weights, stack = {}, [((), 1.0)]
    while stack:
        u, w = stack.pop()
        for t in children.get(u, []):
            weights[u + (t,)] = w * float(draft_ref.probs(tuple(prefix) + u)[t])
            stack.append((u + (t,), weights[u + (t,)]))
    return weights, max(asked) + 1


def _reference_static(draft_ref, prefix, shape):
    """{node: W} of a static rank shape, from plain-forward probabilities."""
    nodes, weights = {(): ()}, {}
    for ranks in shape:  # breadth first: parents first
        u = nodes[ranks[:-1]]
        q = draft_ref.probs(tuple(prefix) + u)
        t = int(np.argsort(-q, kind="stable")[ranks[-1]])
        nodes[ranks] = u + (t,)
        weights[u + (t,)] = (weights[u] if u else 1.0) * float(q[t])
    return weights


def _same_tree(got: dict, want: dict) -> bool:
    return set(got) == set(want) and all(abs(got[u] - want[u]) <= 1e-5 * want[u] for u in want)


OPT_CASES = [(6, 0.0, 3), (10, 0.0, 4), (10, 0.05, 8), (3, 0.0, 6), (1, 0.0, 3)]


def _check_opt_tree_cases(draft, prefixes, prune=False, width=None):
    """True iff every drafted OPT-Tree equals the reference on every case (and counts forwards).
    Unpruned drafting builds exactly the reference's layers; pruned drafting may stop earlier.
    With a width, each layer's forward feeds at most `width` rows (2 pending rows first)."""
    draft_ref = TorchLM(draft, 1.0)
    stopped_early = False
    for prefix in prefixes:
        for n, threshold, depth in OPT_CASES:
            before = draft.forward_count
            dt = trees.draft_tree(draft, torch.tensor([prefix]), "opt_tree", n, threshold, depth, prune=prune,
                                  width=width)
            prefill = int(len(prefix) > 1)  # all but the last token; none for a one-token prefix
            assert draft.forward_count - before == prefill + dt.draft_forwards  # + one per layer
            want, layers = _reference_opt_tree(draft_ref, prefix, n, threshold, depth, width)
            if width is not None and dt.draft_rows - 2 > width * (dt.draft_forwards - 1):
                return False
            built = int(dt.layers[0])
            if not _same_tree(dt.nodes(0), want) or dt.draft_forwards != built or not (
                    built == layers if not prune else built <= layers):
                return False
            assert float(dt.predicted_acceptance[0]) == pytest.approx(sum(want.values()), rel=1e-5)
            stopped_early |= layers < depth
    assert stopped_early  # the threshold case stops before max_depth
    return True


PREFIXES = [[3, 7, 1], [20, 4, 9, 9, 0], [13]]


@pytest.mark.parametrize("prune", [False, True])
def test_opt_tree_equals_reference_structure(peaked, prune):
    _, draft = peaked
    assert _check_opt_tree_cases(draft, PREFIXES, prune)


@pytest.mark.parametrize("prune", [False, True])
@pytest.mark.parametrize("width", [1, 2])
def test_opt_tree_with_a_width_equals_reference_structure(peaked, prune, width):
    """The width-capped tree (EAGLE-2's per-layer expansion) is the reference's, and its layer
    forwards feed at most `width` rows; uncapped, the same cases feed wider layers."""
    _, draft = peaked
    assert _check_opt_tree_cases(draft, PREFIXES, prune, width)
    uncapped = [trees.draft_tree(draft, torch.tensor([p]), "opt_tree", 10, 0.0, 4, prune=prune) for p in PREFIXES]
    assert any(t.draft_rows - 2 > width * (t.draft_forwards - 1) for t in uncapped)


def test_width_is_refused_for_static_trees_and_bad_values(peaked):
    _, draft = peaked
    with pytest.raises(ValueError, match="width"):
        trees.draft_tree(draft, torch.tensor([[3, 7]]), "kary", 6, 0.0, 3, width=2)
    with pytest.raises(ValueError, match="width"):
        trees.draft_tree(draft, torch.tensor([[3, 7]]), "opt_tree", 6, 0.0, 3, width=0)
    with pytest.raises(TypeError, match="width"):
        trees.draft_tree(draft, torch.tensor([[3, 7]]), "opt_tree", 6, 0.0, 3, width=1.5)


@pytest.mark.parametrize("fixture", ["pair", "peaked"])
def test_pruning_keeps_the_tree_and_saves_draft_rows(request, fixture):
    """Pruned and unpruned OPT-Trees have the same nodes (and W, E[A] up to float round-off) on
    random prefixes of a flat and a peaked draft, n from 4 to 40; pruning feeds fewer rows."""
    _, draft = request.getfixturevalue(fixture)
    gen = torch.Generator().manual_seed(7)
    saved = 0
    for case in range(12):
        prefix = torch.randint(0, draft.vocab_size, (1, 1 + case % 5), generator=gen)
        n, depth = (4, 12, 25, 40)[case % 4], (3, 6, 10)[case % 3]
        full = trees.draft_tree(draft, prefix, "opt_tree", n, 0.0, depth, prune=False)
        pruned = trees.draft_tree(draft, prefix, "opt_tree", n, 0.0, depth, prune=True)
        # same nodes; W equal up to round-off (the pruned layer forwards feed other rows)
        assert _same_tree(pruned.nodes(0), full.nodes(0)), (case, n, depth)
        assert float(pruned.predicted_acceptance[0]) == pytest.approx(float(full.predicted_acceptance[0]), rel=1e-5)
        assert pruned.draft_rows <= full.draft_rows and pruned.draft_forwards <= full.draft_forwards
        saved += full.draft_rows - pruned.draft_rows
    assert saved > 0


@pytest.mark.parametrize("tree,budget,depth", [("chain", 4, 10), ("kary", 9, 3), ("eagle", 12, 10),
                                               ("eagle", 12, 2)])
def test_static_trees_equal_their_shapes(peaked, tree, budget, depth):
    _, draft = peaked
    shape = trees.static_shape(tree, budget, depth, branching=3)
    for prefix in PREFIXES:
        dt = trees.draft_tree(draft, torch.tensor([prefix]), tree, budget, 0.0, depth, branching=3)
        assert _same_tree(dt.nodes(0), _reference_static(TorchLM(draft, 1.0), prefix, shape))
        assert dt.draft_forwards == max(len(u) for u in shape)


def test_static_shapes():
    assert trees.static_shape("chain", 3, 10) == [(0,), (0, 0), (0, 0, 0)]
    assert trees.static_shape("chain", 50, 4) == [(0,) * d for d in range(1, 5)]
    assert trees.static_shape("kary", 5, 10, branching=2) == [(0,), (1,), (0, 0), (0, 1), (1, 0)]
    assert trees.static_shape("kary", 9, 1, branching=3) == [(0,), (1,), (2,)]
    # EAGLE-style: scores 0.6 (0), 0.36 (0,0), 0.216 (0,0,0), 0.15 (1) beat 0.1296 (0,0,0,0)
    assert trees.static_shape("eagle", 4, 10) == [(0,), (1,), (0, 0), (0, 0, 0)]
    eagle = trees.static_shape("eagle", 50, 10)
    assert len(eagle) == 50 and all(u[:-1] in eagle or len(u) == 1 for u in eagle)
    assert max(max(u) for u in eagle) <= 3 and max(len(u) for u in eagle) <= 10


@pytest.mark.parametrize("tree", ["opt_tree", "kary"])
def test_draft_cache_stays_in_sync(peaked, tree):
    """Per iteration, the predicted E[A] and tree size of a whole run equal the recomputation from
    the full emitted prefix with plain forwards (a stale draft cache would change both)."""
    target, draft = peaked
    prompt = [5, 17, 2]
    n, depth = 7, 4
    method = tree_method(tree, node_budget=n, max_depth=depth, branching=2, draft_temperature=1.0)
    result = engine.decode(target, draft, torch.tensor([prompt]), method, 16)
    s = result.stats
    draft_ref, prefix, emitted = TorchLM(draft, 1.0), list(prompt), result.tokens[0].tolist()
    assert s.accepted_lengths.sum() > 0  # some iterations accept: the pending/kept paths are used
    for i in range(s.iterations):
        if tree == "opt_tree":
            want, _ = _reference_opt_tree(draft_ref, prefix, n, 0.0, depth)
        else:
            want = _reference_static(draft_ref, prefix, trees.static_shape(tree, n, depth, 2))
        assert float(s.logs["predicted_acceptance"][i]) == pytest.approx(sum(want.values()), rel=1e-5)
        assert int(s.logs["tree_sizes"][i]) == len(want)
        prefix += emitted[len(prefix) - len(prompt):][:int(s.accepted_lengths[i]) + 1]


# ----------------------------------------------------------------------------------------------
# planted bugs
# ----------------------------------------------------------------------------------------------

def test_planted_target_mask_bug_breaks_greedy_equality(pair, monkeypatch):
    """Siblings seeing each other in the verification forward (a causal mask inside the tree,
    planted in the KV state's visibility, which both models use)."""
    target, draft = pair
    prompts = torch.randint(0, 64, (3, 6), generator=torch.Generator().manual_seed(7))
    reference = engine.decode(target, None, prompts, engine.target_only_method(), 24)
    correct = model_module.visible_slots

    def leaky(valid, ancestry):
        allowed = correct(valid, ancestry)  # [B, n, S]
        n = ancestry.shape[1]
        allowed[..., -n:] |= torch.ones(n, n, dtype=torch.bool).tril()
        return allowed

    monkeypatch.setattr(model_module, "visible_slots", leaky)
    for tree in ("opt_tree", "kary", "eagle"):  # a chain has no siblings: the bug is invisible there
        result = engine.decode(target, draft, prompts, tree_method(tree, node_budget=12, max_depth=4), 24)
        assert not torch.equal(result.tokens, reference.tokens), tree


def test_planted_draft_mask_bugs_change_the_tree(peaked, monkeypatch):
    """Draft-side mask bugs leave greedy output intact (the verifier never reads q) but draft the
    wrong tree: the structure check catches both."""
    _, draft = peaked
    correct = model_module.visible_slots

    def siblings_visible(valid, ancestry):  # a layer's nodes see each other
        allowed = correct(valid, ancestry)
        allowed[..., -ancestry.shape[1]:] = True
        return allowed

    def never_reset(valid, ancestry):  # every node sees every node run so far (the original's defect)
        allowed = correct(valid, ancestry)
        allowed[..., valid.shape[1]:allowed.shape[2] - ancestry.shape[1]] = True
        return allowed

    for name, bug in (("siblings", siblings_visible), ("never_reset", never_reset)):
        with monkeypatch.context() as m:
            m.setattr(model_module, "visible_slots", bug)
            assert not _check_opt_tree_cases(draft, PREFIXES), name
            assert not _check_opt_tree_cases(draft, PREFIXES, prune=True), name


# ----------------------------------------------------------------------------------------------
# law at T > 0
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def law_pair():
    # Peaked, disagreeing conditionals; very small (hidden 8, 2 heads, eager attention: fastest on
    # 60,000-row batches) so that 241,883 runs take seconds.
    return (tiny(8, 20, head_scale=25.0, hidden=8, heads=2, attn="eager"),
            tiny(8, 21, head_scale=25.0, hidden=8, heads=2, attn="eager"))


@pytest.mark.parametrize("tree,budget,depth,T,Td", [("opt_tree", 3, 2, 1.0, None),
                                                    pytest.param("eagle", 5, 3, 0.7, 1.5, marks=pytest.mark.slow)])
def test_first_two_tokens_follow_target_law(law_pair, tree, budget, depth, T, Td):
    target, draft = law_pair
    prompt = torch.tensor([[5]])  # one token: no prefill, the cheapest run
    law = exact_two_token_law(target, prompt, T)
    n = g_test_sample_size(63)
    counts, chunk = np.zeros(64), 60_500
    source = TorchUniforms(sum(map(ord, tree)))
    accepted = []
    for start in range(0, n, chunk):
        rows = min(chunk, n - start)
        method = tree_method(tree, node_budget=budget, max_depth=depth, draft_temperature=Td)
        result = engine.decode(target, draft, prompt.expand(rows, -1), method, 2, T, uniforms=source)
        counts += np.bincount((result.tokens[:, 0] * 8 + result.tokens[:, 1]).numpy(), minlength=64)
        accepted.append(result.stats.accepted_lengths)
    taus = torch.cat(accepted)
    assert bool((taus == 0).any()) and bool((taus == 2).any())  # rejections and whole paths both occur
    assert (law > 0).all()
    stat, p_value, df = g_test(counts, law.reshape(-1))
    assert p_value > ALPHA, f"{tree}: G = {stat:.1f}, df = {df}, p = {p_value:.3g}, n = {n}"


def test_draw_for_draw_equal_to_reference_method(peaked):
    """Same uniform stream (NumpyUniforms(seed) vs Sampler(seed)): same tokens as the reference
    `methods.opt_tree` (deterministic tree + sample-and-follow) on the models' plain-forward laws."""
    target, draft = peaked
    T, n, threshold, depth = 1.0, 5, 0.01, 3
    method = methods.opt_tree(n, threshold, depth)
    prompt = (7, 3, 30)
    for seed in range(3):
        want = methods.generate(TorchLM(target, T), TorchLM(draft, T), method, prompt, 14, rng=Sampler(seed))
        got = engine.decode(target, draft, torch.tensor([prompt]),
                            tree_method("opt_tree", node_budget=n, gain_threshold=threshold, max_depth=depth), 14, T,
                            uniforms=NumpyUniforms(seed))
        assert tuple(got.tokens[0].tolist()) == want


# ----------------------------------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------------------------------

def test_bad_input(pair):
    target, draft = pair
    prompt = torch.tensor([[1, 2, 3]])
    opt = torch_methods.tree_method("opt_tree")
    for error, name, kwargs in [(ValueError, "tree", dict(tree="nope")), (TypeError, "tree", dict(tree=3))]:
        with pytest.raises(error, match=name):
            trees.TreeDrafter(**kwargs)
    cases = [(ValueError, "node_budget", dict(node_budget=0)), (TypeError, "node_budget", dict(node_budget=2.5)),
             (ValueError, "threshold", dict(gain_threshold=-0.1)), (ValueError, "threshold", dict(gain_threshold="x")),
             (ValueError, "max_depth", dict(max_depth=0)), (ValueError, "branching", dict(branching=0))]
    for error, name, kwargs in cases:
        with pytest.raises(error, match=name):
            torch_methods.tree_method("opt_tree", **kwargs)
    with pytest.raises(ValueError, match="draft_temperature"):
        engine.decode(target, draft, prompt, torch_methods.tree_method("opt_tree", draft_temperature=-1.0), 4)
    for error, name, T in [(ValueError, "temperature", -1.0), (TypeError, "temperature", "hot")]:
        with pytest.raises(error, match=name):
            engine.decode(target, draft, prompt, opt, 4, T)
    with pytest.raises(ValueError, match="max_new_tokens"):
        engine.decode(target, draft, prompt, opt, 0)
    with pytest.raises(ValueError, match="prompt_ids"):
        engine.decode(target, draft, torch.tensor([[1, 99]]), opt, 4)
    with pytest.raises(ValueError, match="draft"):
        engine.decode(target, tiny(30, 1), prompt, opt, 4)
    with pytest.raises(TypeError, match="target"):
        engine.decode("model", draft, prompt, opt, 4)
    with pytest.raises(ValueError, match="uniforms"):
        engine.decode(target, draft, torch.zeros(2, 3, dtype=torch.long), opt, 4, 1.0, uniforms=NumpyUniforms(0))
    with pytest.raises(ValueError, match="tree"):
        trees.static_shape("opt_tree", 4, 3)
    with pytest.raises(TypeError, match="draft"):
        trees.draft_tree(target.model, prompt)
