"""Ouroboros phrase-pool drafting and the lookahead baseline on tiny random Qwen2 models (fp32, CPU).

- Greedy (T = 0): both decoders reproduce target-only greedy token for token on prompts that
  repeat phrases, with one pool kept warm across prompts (and the pool is actually used: hits,
  draft tokens taken from phrases, target-accepted pool suffixes).
- Law (T > 0), verification step: the tree the decoders build (Ouroboros: draft chain plus pool
  suffixes; lookahead: pool branches plus a non-verifiable Jacobi window) is run through the same
  target tree forward and verified on n = g_test_sample_size(63) = 241,883 rows at once (one
  uniform stream per row). The joint law of the first 2 emitted tokens (V = 8, 64 outcomes; a row
  that emitted 1 token draws its second from the exact conditional) must equal the target's exact
  law: G-test, alpha = 1e-6, power 0.9 against any law at TV >= 0.01.
- Law (T > 0), whole loop: 150 full `ouroboros_method` runs of 2 tokens, pool warm and
  changing between runs (a smoke test: power 0.9 only against TV >= ~0.4; a full-power loop test
  needs ~240k runs at ~30-60 ms each on this machine).
- Whole loop, exact, step by step (also `ouroboros_phrase_method`): on warm-pool T = 1 runs (accepted paths through pool branches)
  every target tree forward equals plain forwards of the emitted prefix plus each verifiable node's
  root path, and the run emits exactly each step's accepted tokens plus y. With the step law above
  and fresh uniforms (`TorchUniforms`), this makes the loop's law the target's. Planted bugs: a
  cache commit keeping tree nodes in index order instead of the accepted path, a chain mask.
- Planted bugs are caught by the verification-step law test: point-mass drafts accepted with
  probability 1, accepted exactly when they are the argmax (Ouroboros' greedy rule at T > 0), the correction drawn from p instead of the residual, a plain causal (chain) mask
  instead of the tree mask.
- The pool: LRU per key and over keys, phrase length, n-grams, counters, warm across calls.
- On a chain the tree rule is token verification with one-hot q (`rules.token_rule`), draw for draw.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from verispec.empirical import engine, kv as kv_module, model as model_module, verifiers as rules  # noqa: E402
from verispec.empirical.drafters import phrases  # noqa: E402
from verispec.empirical.drafters.phrases import token_tree as phrase_tree  # noqa: E402
from verispec.empirical.drafters.phrases import windows as phrase_windows  # noqa: E402
from verispec.empirical.drafters.phrases import phrase_drafters  # noqa: E402
from verispec.empirical.drafters import probabilities  # noqa: E402
from verispec.empirical.verifiers import pointmass  # noqa: E402
from verispec.empirical.verifiers.nodes import PointMassTree  # noqa: E402
from verispec.empirical.model import CausalLM  # noqa: E402
from verispec.empirical.drafters.phrases import PhrasePool, lookahead_method, ouroboros_method  # noqa: E402
from verispec.empirical.verifiers.pointmass import point_mass_tree_uniforms, point_mass_tree_verify  # noqa: E402
from verispec.empirical.uniforms import TorchUniforms, categorical  # noqa: E402

from verispec.testing.gtest import ALPHA, g_test, g_test_sample_size  # noqa: E402


def tiny(vocab_size, seed, *, noise=0.0, head_scale=1.0, hidden=32, heads=4):
    """A 2-layer Qwen2 with random weights (as tests/empirical/test_decode_tiny.py): `noise`
    perturbs a copy (a draft close to the target), `head_scale` sharpens the conditionals."""
    config = transformers.Qwen2Config(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=2,
                                      num_attention_heads=heads, num_key_value_heads=heads // 2,
                                      intermediate_size=2 * hidden, max_position_embeddings=256,
                                      tie_word_embeddings=False)
    model = CausalLM.from_config(config, seed=seed, dtype=torch.float32, attn_implementation="sdpa")
    g = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for parameter in model.model.parameters():
            if noise:
                parameter.add_(noise * parameter.std() * torch.randn(parameter.shape, generator=g))
        model.model.get_output_embeddings().weight.mul_(head_scale)
    return model


@pytest.fixture(scope="module")
def pair():
    return tiny(64, 0), tiny(64, 0, noise=0.1)


@pytest.fixture(scope="module")
def law_pair():
    # V = 8, peaked conditionals (accept, reject and residual branches all matter), very small.
    return tiny(8, 20, head_scale=25.0, hidden=8, heads=2), tiny(8, 21, head_scale=25.0, hidden=8, heads=2)


BASE = [3, 1, 4, 1, 5, 9, 2, 6]
PROMPTS = [BASE, BASE + [5, 3], [7, 7] + BASE[:5], BASE + BASE]  # shared phrases across prompts


# ----------------------------------------------------------------------------------------------
# greedy: identical to target-only greedy
# ----------------------------------------------------------------------------------------------

def test_ouroboros_greedy_equals_target_only_with_warm_pool(pair):
    target, draft = pair
    pool = PhrasePool(phrase_length=3, max_phrases_per_key=8)
    hits = drafted = verified = 0
    for prompt in PROMPTS:
        reference = engine.decode(target, None, torch.tensor([prompt]), engine.target_only_method(), 30)
        method = ouroboros_method(pool, draft_length=4, num_candidates=3, window=3)
        result = engine.decode(target, draft, torch.tensor([prompt]), method, 30, uniforms=1, storage="sequence")
        assert torch.equal(result.tokens, reference.tokens), prompt
        stats = result.stats
        assert stats.target_forwards == stats.iterations  # one tree forward per iteration, the first reads the prompt
        assert stats.accepted_lengths.numel() == stats.iterations
        assert stats.iterations <= 30 and 1.0 <= stats.block_efficiency
        hits, drafted = hits + stats.logs["pool_hits"], drafted + stats.logs["draft_pool_tokens"]
        verified += stats.logs["verified_pool_tokens"]
    assert hits > 0 and drafted > 0 and verified > 0
    assert len(pool) > 0


def test_lookahead_greedy_equals_target_only_with_warm_pool(pair):
    target, _ = pair
    pool = PhrasePool(phrase_length=3)
    hits = verified = 0
    for prompt in PROMPTS:
        reference = engine.decode(target, None, torch.tensor([prompt]), engine.target_only_method(), 30)
        result = engine.decode(target, None, torch.tensor([prompt]), lookahead_method(pool, num_candidates=3, window=4),
                               30, storage="sequence")
        assert torch.equal(result.tokens, reference.tokens), prompt
        assert result.stats.draft_forwards == 0
        assert result.stats.target_forwards == result.stats.iterations
        hits, verified = hits + result.stats.logs["pool_hits"], verified + result.stats.logs["verified_pool_tokens"]
    assert hits > 0 and verified > 0


def test_greedy_edge_cases(pair):
    """A one-token prompt, no Jacobi window, draft = target (every draft token accepted), L = 1."""
    target, draft = pair
    for prompt in ([9], [3, 1, 4, 1, 5]):
        ids = torch.tensor([prompt])
        reference = engine.decode(target, None, ids, engine.target_only_method(), 17)
        for kwargs in (dict(window=0), dict(draft_length=1, num_candidates=1)):
            result = engine.decode(target, draft, ids, ouroboros_method(**kwargs), 17, storage="sequence")
            assert torch.equal(result.tokens, reference.tokens)
        result = engine.decode(target, None, ids, lookahead_method(window=0), 17, storage="sequence")
        assert torch.equal(result.tokens, reference.tokens)
        same = engine.decode(target, target, ids, ouroboros_method(draft_length=4), 17, storage="sequence")
        assert torch.equal(same.tokens, reference.tokens)
        assert bool((same.stats.accepted_lengths[:-1] >= 4).all())
    one = engine.decode(target, draft, torch.tensor([[2, 3]]), ouroboros_method(), 1, storage="sequence")
    assert one.tokens.shape == (1, 1)


# ----------------------------------------------------------------------------------------------
# law at T > 0
# ----------------------------------------------------------------------------------------------

PROMPT = [1, 5, 2, 6]


def _conditionals(target, prefix, T):
    """float64 [8, 8]: p(. | prefix + [y]) for every y."""
    rows = torch.tensor([prefix + [y] for y in range(8)])
    logits, _ = target.prefill(rows)
    return probabilities(logits[:, -1], T)


def _exact_law(target, T):
    logits, _ = target.prefill(torch.tensor([PROMPT]))
    first = probabilities(logits[0, -1], T)  # [8]
    return (first.unsqueeze(1) * _conditionals(target, PROMPT, T)).numpy()  # [8, 8]


def _ranked(probs):
    return torch.argsort(probs, descending=True, stable=True).tolist()


def _law_trees(target, T):
    """The Ouroboros and lookahead verification trees for PROMPT with a hand-filled pool whose
    phrases start with likely tokens, least likely first (so rejections and residuals matter)."""
    logits, _ = target.prefill(torch.tensor([PROMPT]))
    top = _ranked(probabilities(logits[0, -1], T))
    after = _conditionals(target, PROMPT, T)
    pool = PhrasePool(phrase_length=2)
    for a in (top[2], top[0], top[1]):  # root branches (lookahead); the newest is tried first
        second = _ranked(after[a])
        pool.add(PROMPT[-1], (a, second[1]))
        pool.add(PROMPT[-1], (a, second[0]))
    d1 = top[0]  # Ouroboros: draft = [d1], suffixes keyed by d1
    for s in _ranked(after[d1])[:3][::-1]:
        pool.add(d1, (s, top[3]))
    tree_o, _ = phrase_drafters._ouroboros_tree(PROMPT[-1], [d1], pool, 3, 8)
    window = phrase_windows.JacobiWindow(3, 2, PROMPT)
    tree_l, slots = phrase_drafters._lookahead_tree(PROMPT[-1], pool, 3, 8, window)
    assert len(tree_o) == 1 + 1 + 3 * 2 and len(slots) == 3
    return {"ouroboros": tree_o, "lookahead": tree_l}


def _verified_law_counts(target, tree, T, n, seed):
    """(counts [64] of the first two emitted tokens, tau [n]) over n rows verifying `tree` once each."""
    cache = phrase_tree.DraftSequence(target, PROMPT[:-1])
    p = probabilities(cache.forward(tree), T)  # [N, V], the decoders' tree forward
    tokens, parents, verifiable = (t.expand(n, -1) for t in tree.tensors("cpu"))
    need = point_mass_tree_uniforms(parents[:1], verifiable[:1])
    source = TorchUniforms(seed)
    path, tau, y, _ = point_mass_tree_verify(p.unsqueeze(0).expand(n, -1, -1), tokens, parents,
                                             source.take(n, need), verifiable)
    rows = torch.arange(n)
    node = lambda i: tokens[rows, path[:, i].clamp(min=0)]  # noqa: E731
    first = torch.where(tau >= 1, node(0), y)
    exact_next = categorical(_conditionals(target, PROMPT, T)[y], source.take(n, 1)[:, 0])
    second = torch.where(tau >= 2, node(1), torch.where(tau == 1, y, exact_next))
    return np.bincount((first * 8 + second).numpy(), minlength=64), tau


@pytest.mark.parametrize("kind,T", [("ouroboros", 1.0), ("lookahead", 1.0), ("lookahead", 0.6)])
def test_verification_step_follows_target_law(law_pair, kind, T):
    target, _ = law_pair
    tree = _law_trees(target, T)[kind]
    law = _exact_law(target, T).reshape(-1)
    assert (law > 0).all()
    n = g_test_sample_size(63)
    counts, tau = _verified_law_counts(target, tree, T, n, seed=len(kind) + int(10 * T))
    assert [bool((tau == k).any()) for k in range(3)] == [True] * 3  # reject, accept 1, accept 2
    stat, p_value, df = g_test(counts, law)
    assert p_value > ALPHA, f"{kind}: G = {stat:.1f}, df = {df}, p = {p_value:.3g}, n = {n}"


def _always_accept(current, x):
    """Planted in place of the walk's read of p'(x): a point-mass draft accepted with probability 1."""
    return torch.ones(x.shape, dtype=current.dtype)


def _accept_argmax(current, x):
    """Planted in place of the walk's read of p'(x): the paper's greedy rule at T > 0, x accepted
    exactly when it is the argmax of p'."""
    return (current.argmax(-1) == x).to(current.dtype)


def _residual_is_p(p, q, weight=1.0):
    """Planted: the correction drawn from p instead of norm(max(p' - one-hot(x), 0))."""
    return p


def _chain_mask_forward(self, tree):
    """Planted: the tree forward under a plain causal mask (every node sees all earlier nodes)."""
    tokens, _, _ = tree.tensors(self.model.device)
    chain = torch.arange(-1, tokens.shape[1] - 1).unsqueeze(0)
    return self.kv.append(tokens, chain, torch.ones_like(tokens, dtype=torch.bool))[0]


@pytest.mark.parametrize("owner,name,bug", [
    (pointmass, "gather_last", _always_accept), (pointmass, "gather_last", _accept_argmax),
    (pointmass, "residual", _residual_is_p), (phrase_tree.DraftSequence, "forward", _chain_mask_forward)],
    ids=["accept_1", "greedy_match", "residual_p", "chain_mask"])
def test_planted_verification_bugs_are_caught(law_pair, monkeypatch, owner, name, bug):
    target, _ = law_pair
    tree = _law_trees(target, 1.0)["lookahead"]
    law = _exact_law(target, 1.0).reshape(-1)
    monkeypatch.setattr(owner, name, bug)
    n = g_test_sample_size(63)
    stat, p_value, _ = g_test(_verified_law_counts(target, tree, 1.0, n, seed=3)[0], law)
    assert p_value < ALPHA, f"planted {name} not caught: G = {stat:.1f}, p = {p_value:.3g}"


def test_whole_loop_law_smoke(law_pair):
    target, draft = law_pair
    law = _exact_law(target, 1.0).reshape(-1)
    pool = PhrasePool(phrase_length=2)
    for key in range(8):
        pool.add_ngrams([key, key, (key + 1) % 8])
    source, counts, verified = TorchUniforms(17), np.zeros(64), 0
    for _ in range(150):
        method = ouroboros_method(pool, draft_length=1, num_candidates=3, window=2)
        result = engine.decode(target, draft, torch.tensor([PROMPT]), method, 2, 1.0, source, storage="sequence")
        counts[int(result.tokens[0, 0]) * 8 + int(result.tokens[0, 1])] += 1
        verified += result.stats.logs["verified_pool_tokens"]
    stat, p_value, df = g_test(counts, law)
    assert p_value > ALPHA, f"G = {stat:.1f}, df = {df}, p = {p_value:.3g}"
    assert verified > 0  # pool suffixes were accepted by the target


# Whole loop, step by step (exact): the law of a T > 0 run is the product of its verification
# steps' laws when (a) every step is the tested rule, (b) on the target's true conditionals after
# the emitted prefix and each node's root path, (c) with fresh uniforms (`TorchUniforms` never
# hands out a uniform twice), and (d) the loop emits exactly the accepted tokens plus y. (a) and
# (c) hold by construction; this checks (b) and (d) on every target forward of warm-pool runs whose
# accepted paths go through pool branches, against plain (non-tree, no cache) forwards.

def _record_loop(monkeypatch, target):
    """Log every target tree forward of the engine (tree tokens, parents, verifiable, logits
    [N, V]) and every verdict (accepted tokens, y)."""
    forwards, steps = [], []
    tree_forward, check_verdict = engine._tree_forward, engine.check_verdict

    def logged_forward(kv, tree, unread=None):
        logits, order = tree_forward(kv, tree, unread)
        if kv.model is target:
            verifiable = tree.real if tree.verifiable is None else tree.verifiable
            forwards.append((tree.tokens[0].tolist(), tree.parents[0].tolist(), verifiable[0].tolist(),
                             logits[0].clone()))
        return logits, order

    def logged_verdict(verdict, tree, name):
        check_verdict(verdict, tree, name)
        tau = int(verdict.tau[0])
        steps.append(([int(tree.tokens[0, j]) for j in verdict.nodes[0, :tau]], int(verdict.token[0])))

    monkeypatch.setattr(engine, "_tree_forward", logged_forward)
    monkeypatch.setattr(engine, "check_verdict", logged_verdict)
    monkeypatch.setattr(PointMassTree, "trusted", False)  # the engine checks (and here logs) every verdict
    return forwards, steps


def _check_loop(target, prompt, out, forwards, steps):
    """(b) and (d) for one run: out = the run's N tokens. Every verifiable node's logits must be a
    plain forward of the emitted prefix and the node's root path (a KV-cache bug shows here)."""
    assert len(forwards) == len(steps)
    seq = list(prompt)
    for (tokens, parents, verifiable, logits), (accepted, y) in zip(forwards, steps):
        assert tokens[0] == seq[-1]  # the root is the last emitted token
        for j in range(len(tokens)):
            if not verifiable[j]:
                continue  # a Jacobi window node: its logits only seed guesses
            path, node = [], j
            while node >= 0:
                path, node = [tokens[node]] + path, parents[node]
            plain = target.prefill(torch.tensor([seq[:-1] + path]))[0][0, -1]  # [V]
            assert torch.allclose(logits[j], plain, atol=1e-5), (len(seq), j)
        seq += accepted + [y]
    assert seq[len(prompt):len(prompt) + out.shape[1]] == out[0].tolist()


def _whole_loop_runs(law_pair, kind):
    """Three warm-pool T = 1 runs of 40 tokens; yields (prompt, result) after each."""
    target, draft = law_pair
    pool = PhrasePool(phrase_length=2)
    for key in range(8):
        pool.add_ngrams([key, key, (key + 1) % 8, key])
    for i, prompt in enumerate((PROMPT, PROMPT + [3], [7, 0])):
        if kind == "ouroboros":
            method = ouroboros_method(pool, draft_length=1, num_candidates=3, window=2)
        elif kind == "ouroboros_phrase":
            method = phrases.ouroboros_phrase_method(pool, draft_length=1, num_candidates=3, guess_set=4, window=2,
                                                     phrase_length=2)
        else:
            method = lookahead_method(pool, num_candidates=3, window=2)
        result = engine.decode(target, None if kind == "lookahead" else draft, torch.tensor([prompt]), method, 40,
                               1.0, i, storage="sequence")
        yield prompt, result


@pytest.mark.parametrize("kind", ["ouroboros", "ouroboros_phrase", "lookahead"])
def test_whole_loop_steps_use_true_conditionals(law_pair, monkeypatch, kind):
    target, _ = law_pair
    forwards, steps = _record_loop(monkeypatch, target)
    verified = 0
    for prompt, result in _whole_loop_runs(law_pair, kind):
        _check_loop(target, prompt, result.tokens, forwards, steps)
        verified += result.stats.logs["verified_pool_tokens"]
        forwards.clear(), steps.clear()
    assert verified > 0  # accepted paths went through pool branches


def _keep_in_index_order(self, keep):
    """Planted: a commit keeps the KV of tree nodes 0..k-1 (k = the nodes to keep): right on the
    draft chain or the first pool branch, wrong once a later branch is accepted."""
    return torch.arange(keep.shape[1]) < keep.sum(1, keepdim=True)


def _causal_visible(valid, ancestry):
    """Planted: the tree forward under a plain causal mask (every node sees all earlier nodes)."""
    allowed = _VISIBLE(valid, ancestry)
    n = ancestry.shape[1]
    allowed[..., -n:] |= torch.ones(n, n, dtype=torch.bool).tril()
    return allowed


_VISIBLE = model_module.visible_slots


@pytest.mark.parametrize("kind", ["ouroboros", "ouroboros_phrase", "lookahead"])
@pytest.mark.parametrize("owner,name,bug", [(kv_module.KVState, "_check_keep", _keep_in_index_order),
                                            (model_module, "visible_slots", _causal_visible)],
                         ids=["commit_index_order", "chain_mask"])
def test_planted_loop_bugs_are_caught(law_pair, monkeypatch, kind, owner, name, bug):
    target, _ = law_pair
    monkeypatch.setattr(owner, name, bug)
    forwards, steps = _record_loop(monkeypatch, target)
    with pytest.raises(AssertionError):
        for prompt, result in _whole_loop_runs(law_pair, kind):
            _check_loop(target, prompt, result.tokens, forwards, steps)
            forwards.clear(), steps.clear()


def test_chain_rule_is_token_verification_with_one_hot_q():
    """On a chain the tree rule is `rules.token_rule` with q = one-hot(draft), draw for draw."""
    g = torch.Generator().manual_seed(0)
    B, L, V = 4000, 3, 5
    p = torch.distributions.Dirichlet(torch.full((V,), 0.4)).sample((B, L + 1)).double()
    p = p / p.sum(-1, keepdim=True)
    draft = torch.randint(0, V, (B, L), generator=g)
    u = torch.rand(B, L + 1, generator=g, dtype=torch.float64)
    reference = rules.token_rule(p, torch.nn.functional.one_hot(draft, V).double(), draft, u)
    tokens = torch.cat([torch.zeros(B, 1, dtype=torch.long), draft], dim=1)
    parents = torch.arange(-1, L).expand(B, L + 1)
    path, tau, y, used = point_mass_tree_verify(p, tokens, parents, u)
    assert torch.equal(tau, reference.tau) and torch.equal(used, reference.consumed)
    assert torch.equal(y, reference.tokens[torch.arange(B), tau])
    assert torch.equal(path[:, 0], torch.where(tau >= 1, 1, -1))


def test_greedy_tables_follow_the_argmax():
    """T = 0 tables: the walk takes the argmax child wherever it is among the children."""
    p = torch.zeros(1, 4, 3, dtype=torch.float64)
    p[0, 0, 2] = p[0, 2, 1] = p[0, 1, 0] = p[0, 3, 0] = 1.0  # root -> 2, node 2 -> 1
    tokens = torch.tensor([[0, 1, 2, 1]])  # root, children 1 (token 1) and 2 (token 2); 3 under 2
    parents = torch.tensor([[-1, 0, 0, 2]])
    path, tau, y, _ = point_mass_tree_verify(p, tokens, parents, torch.full((1, 9), 0.999))
    assert path[0, :2].tolist() == [2, 3] and int(tau[0]) == 2 and int(y[0]) == 0


# ----------------------------------------------------------------------------------------------
# the pool
# ----------------------------------------------------------------------------------------------

def test_pool_lru_per_key_and_refresh():
    pool = PhrasePool(phrase_length=2, max_phrases_per_key=2)
    pool.add(1, (10, 11))
    pool.add(1, (12, 13))
    pool.add(1, [10, 11])  # refresh: now the newest
    pool.add(1, (14, 15))  # evicts the least recently added, (12, 13)
    assert pool.phrases(1) == [(14, 15), (10, 11)]
    assert len(pool) == 2 and 1 in pool and 2 not in pool


def test_pool_capacity_evicts_least_recently_used_key():
    pool = PhrasePool(phrase_length=1, max_phrases_per_key=3, capacity=2)
    pool.add(1, (5,))
    pool.add(2, (6,))
    assert pool.candidates(1) == [(5,)]  # a lookup marks key 1 recently used
    pool.add(3, (7,))  # evicts key 2
    assert pool.keys() == [1, 3]
    assert pool.candidates(2) == []
    assert (pool.lookups, pool.hits) == (2, 1)


def test_pool_ngrams_candidates_and_phrase_length():
    pool = PhrasePool(phrase_length=3)
    assert pool.add_ngrams([1, 2, 3]) == 0 and len(pool) == 0
    assert pool.add_ngrams(torch.tensor([1, 2, 3, 4, 1, 2, 5, 6])) == 5
    assert pool.phrases(1) == [(2, 5, 6), (2, 3, 4)]
    assert pool.candidates(1, 1) == [(2, 5, 6)]
    assert pool.phrases(2) == [(3, 4, 1)]
    assert all(len(ph) == 3 for key in pool.keys() for ph in pool.phrases(key))
    with pytest.raises(ValueError, match="phrase_length"):
        pool.add(1, (2, 3))


def test_pool_state_round_trip():
    pool = PhrasePool(phrase_length=2, max_phrases_per_key=2, capacity=3)
    pool.add_ngrams([1, 2, 3, 1, 4, 5, 6, 1, 2, 7])
    pool.candidates(4)  # touches key 4's recency
    copy = PhrasePool.from_state(json.loads(json.dumps(pool.state())))
    assert copy.keys() == pool.keys() and copy.state() == pool.state()
    assert all(copy.phrases(k) == pool.phrases(k) for k in pool.keys())
    copy.add(9, (1, 1)), pool.add(9, (1, 1))  # evicts the same least recently used key
    assert copy.keys() == pool.keys()
    for bad, error in ((None, TypeError), ({"table": [[1]]}, TypeError),
                       ({**pool.state(), "phrase_length": 0}, ValueError),
                       ({**pool.state(), "table": [[1, [[2, 3, 4]]]]}, ValueError)):
        with pytest.raises(error):
            PhrasePool.from_state(bad)


def test_pool_is_warm_across_calls(pair):
    target, draft = pair
    pool = PhrasePool(phrase_length=3)
    base = torch.tensor([BASE])
    first = engine.decode(target, draft, base, ouroboros_method(pool), 24, storage="sequence")
    size = len(pool)
    assert size > 0 and first.stats.logs["pool_phrases"] == size
    second = engine.decode(target, draft, base, ouroboros_method(pool), 24, storage="sequence")
    assert torch.equal(first.tokens, second.tokens)
    rate = lambda stats: stats.logs["pool_hits"] / stats.logs["pool_lookups"]  # noqa: E731
    assert rate(second.stats) > rate(first.stats)
    assert second.stats.target_forwards < first.stats.target_forwards
    look = PhrasePool(phrase_length=3)
    a = engine.decode(target, None, base, lookahead_method(look), 24, storage="sequence")
    b = engine.decode(target, None, base, lookahead_method(look), 24, storage="sequence")
    assert b.stats.target_forwards < a.stats.target_forwards


# ----------------------------------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------------------------------

def test_bad_input(pair):
    target, draft = pair
    prompt = torch.tensor([[1, 2, 3]])
    for kwargs, error, match in [
        (dict(draft_length=0), ValueError, "draft_length"),
        (dict(num_candidates=0), ValueError, "num_candidates"),
        (dict(window=-1), ValueError, "window"),
        (dict(window=1.5), TypeError, "window"),
        (dict(pool={}), TypeError, "pool"),
    ]:
        with pytest.raises(error, match=match):
            ouroboros_method(**kwargs)
    method = ouroboros_method()
    for kwargs, error, match in [(dict(temperature=-1.0), ValueError, "temperature"),
                                 (dict(uniforms="seed"), TypeError, "uniforms")]:
        with pytest.raises(error, match=match):
            engine.decode(target, draft, prompt, method, 4, storage="sequence", **kwargs)
    with pytest.raises(ValueError, match="max_new_tokens"):
        engine.decode(target, draft, prompt, method, 0, storage="sequence")
    with pytest.raises(ValueError, match="prompts"):
        engine.decode(target, draft, torch.tensor([[1, 2], [3, 4]]), method, 4)
    with pytest.raises(ValueError, match="prompt_ids"):
        engine.decode(target, None, torch.tensor([[1, 99]]), lookahead_method(), 4, storage="sequence")
    with pytest.raises(ValueError, match="draft"):
        engine.decode(target, tiny(30, 1), prompt, method, 4, storage="sequence")
    with pytest.raises(TypeError, match="target"):
        engine.decode("model", None, prompt, lookahead_method(), 4, storage="sequence")
    with pytest.raises(TypeError, match="draft"):
        engine.decode(target, None, prompt, method, 4, storage="sequence")
    with pytest.raises(ValueError, match="num_candidates"):
        lookahead_method(num_candidates=0)


def test_bad_pool_and_rule_input():
    for kwargs, match in [(dict(phrase_length=0), "phrase_length"), (dict(capacity=0), "capacity"),
                          (dict(max_phrases_per_key=0), "max_phrases_per_key")]:
        with pytest.raises(ValueError, match=match):
            PhrasePool(**kwargs)
    with pytest.raises(TypeError, match="phrase_length"):
        PhrasePool(phrase_length=2.0)
    pool = PhrasePool(phrase_length=2)
    with pytest.raises(ValueError, match="key"):
        pool.add(-1, (1, 2))
    with pytest.raises(TypeError, match="key"):
        pool.add(True, (1, 2))
    with pytest.raises(TypeError, match="phrase"):
        pool.add(1, "ab")
    with pytest.raises(TypeError, match="phrase"):
        pool.add(1, (1.5, 2))
    p = torch.full((1, 2, 3), 1 / 3, dtype=torch.float64)
    tokens, parents, u = torch.tensor([[0, 1]]), torch.tensor([[-1, 0]]), torch.full((1, 4), 0.5)
    with pytest.raises(ValueError, match="parents"):
        point_mass_tree_verify(p, tokens, torch.tensor([[-1, -1]]), u)
    with pytest.raises(ValueError, match="tokens"):
        point_mass_tree_verify(p, torch.tensor([[0, 3]]), parents, u)
    with pytest.raises(ValueError, match="uniforms"):
        point_mass_tree_verify(p, tokens, parents, u[:, :1])
    with pytest.raises(ValueError, match="uniforms"):
        point_mass_tree_verify(p, tokens, parents, torch.full((1, 4), 1.0))
    with pytest.raises(ValueError, match="p"):
        point_mass_tree_verify(p * 2, tokens, parents, u)
    with pytest.raises(TypeError, match="tokens"):
        point_mass_tree_verify(p, tokens.double(), parents, u)
    with pytest.raises(ValueError, match="verifiable"):
        point_mass_tree_verify(p, tokens, parents, u, verifiable=torch.ones(1, 3, dtype=torch.bool))
