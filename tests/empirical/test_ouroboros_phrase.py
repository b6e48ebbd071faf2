"""Ouroboros phrase by phrase (`ouroboros_phrase_method`, `PhraseOuroborosDrafter`) on tiny
random Qwen2 models (fp32, CPU).

- T = 0: target-only greedy, token for token, with one pool warm across prompts, for several
  (L, K, G, W) and with the output's n-grams off (the paper's pool sources only).
- The twin: with W = 0, every tree the engine drafter builds (draft chain + pool tails) is the
  reference twin's draft (`verispec.reference.ouroboros.ouroboros_phrases`) for that iteration's
  pool snapshot, on the same draft model seen as a reference LanguageModel. The twin is checked
  lossless by `assert_lossless` (tests/reference/test_ouroboros_reference.py), and the engine's
  point-mass tree rule is the reference rule draw for draw (shared uniforms, below).
- Whole phrases: a pool that holds the draft's continuation makes one draft forward yield
  several tokens and the chain run past L; the target's verification adds phrases.
- The pool refinements: rejected-draft phrases and in-place guess corrections, on hand-made trees.
- The T > 0 loop (true conditionals at every node, planted cache bugs caught) is in
  tests/empirical/test_ouroboros.py (kind "ouroboros_phrase").
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from verispec.empirical import engine  # noqa: E402
from verispec.empirical.drafters import phrases  # noqa: E402
from verispec.empirical.drafters.phrases import token_tree as phrase_tree  # noqa: E402
from verispec.empirical.drafters.phrases import windows as phrase_windows  # noqa: E402
from verispec.empirical.drafters.phrases import phrase_drafters  # noqa: E402
from verispec.empirical.as_reference import TorchLanguageModel  # noqa: E402
from verispec.empirical.drafters import probabilities  # noqa: E402
from verispec.empirical.drafters.phrases import PhrasePool, ouroboros_phrase_method  # noqa: E402
from verispec.empirical.verifiers import pointmass  # noqa: E402
from verispec.reference import ouroboros as ref  # noqa: E402
from verispec.reference.randomness import Sampler  # noqa: E402

from .replay import replay_sampler  # noqa: E402
from .test_ouroboros import PROMPTS, tiny  # noqa: E402


@pytest.fixture(scope="module")
def pair():
    return tiny(64, 0), tiny(64, 0, noise=0.1)


@pytest.mark.parametrize("params", [
    dict(), dict(draft_length=2, num_candidates=1, guess_set=1, window=0),
    dict(draft_length=5, guess_set=20, window=3, output_ngrams=False)], ids=["default", "small", "paper_sources"])
def test_greedy_equals_target_only_with_warm_pool(pair, params):
    target, draft = pair
    pool = PhrasePool(phrase_length=3)
    hits = 0
    for prompt in PROMPTS:
        ids = torch.tensor([prompt])
        result = engine.decode(target, draft, ids, ouroboros_phrase_method(pool, phrase_length=3, **params), 30, storage="sequence")
        reference = engine.decode(target, None, ids, engine.target_only_method(), 30)
        assert torch.equal(result.tokens, reference.tokens), prompt
        hits += result.stats.logs["pool_hits"]
    assert hits > 0 and len(pool) > 0


def _draft_seen(monkeypatch):
    """Record (sequence, pool snapshot {key: phrases newest first}, tree root paths) at every
    draft of `PhraseOuroborosDrafter`."""
    seen = []
    original = phrases.PhraseOuroborosDrafter.draft

    def draft(self, rows):
        snapshot = {key: self.pool.phrases(key) for key in self.pool.keys()}
        before = list(self.seq)
        out = original(self, rows)
        tokens, parents = self.tree.tokens, self.tree.parents
        leaves = set(range(len(tokens))) - set(parents)
        paths = set()
        for leaf in leaves:
            path, node = [], leaf
            while node > 0:
                path, node = [tokens[node]] + path, parents[node]
            paths.add(tuple(path))
        seen.append((before, snapshot, paths))
        return out

    monkeypatch.setattr(phrases.PhraseOuroborosDrafter, "draft", draft)
    return seen


def test_engine_drafts_are_the_reference_twins(pair, monkeypatch):
    target, draft = pair
    seen = _draft_seen(monkeypatch)
    pool = PhrasePool(phrase_length=3)
    for i, prompt in enumerate(PROMPTS):
        method = ouroboros_phrase_method(pool, draft_length=3, num_candidates=2, guess_set=4, window=0,
                                         phrase_length=3)
        engine.decode(target, draft, torch.tensor([prompt]), method, 24, 1.0, i, storage="sequence")
    oracle = TorchLanguageModel(draft, temperature=1.0)
    longer = 0
    for seq, snapshot, paths in seen:
        twin = ref.ouroboros_phrases(3, snapshot, num_candidates=2, guess_set=4)(oracle, tuple(seq), Sampler(0))
        assert set(twin.paths) == paths, seq
        longer += max(len(p) for p in paths) > 3
    assert longer > 0  # some drafts took whole phrases or pool tails


def test_whole_phrases_cut_draft_forwards(pair):
    """A pool holding the draft's greedy continuation: draft forwards per drafted token < 1."""
    target, draft = pair
    prompt = PROMPTS[0]
    greedy = engine.decode(draft, None, torch.tensor([prompt]), engine.target_only_method(), 40).tokens[0].tolist()
    pool = PhrasePool(phrase_length=4)
    pool.add_ngrams(prompt[-1:] + greedy)
    ids = torch.tensor([prompt])
    run = engine.decode(target, draft, ids, ouroboros_phrase_method(pool, draft_length=4, window=0, phrase_length=4,
                                                                    output_ngrams=False), 40, storage="sequence")
    assert run.stats.logs["draft_pool_tokens"] > 0
    cold_method = ouroboros_phrase_method(PhrasePool(phrase_length=4), draft_length=4, window=0, output_ngrams=False,
                                          phrase_length=4)
    cold = engine.decode(target, draft, ids, cold_method, 40, storage="sequence")
    assert run.stats.draft_forwards < cold.stats.draft_forwards


def _tree(chain, guesses, n):
    tree = phrase_tree.Tree()
    anchor = tree.add_chain(-1, chain)[-1]
    for g in guesses:
        tree.add_path(anchor, g)
    return tree, anchor


def test_target_phrases_from_the_rejected_draft():
    # root 9, draft 1 2 3; the target's argmax after each node: 1 (accepts 1), 5 (rejects 2),
    # then after 2 -> 3 (agrees with the draft), after 3 -> 7
    tree, anchor = _tree([9, 1, 2, 3], [], 2)
    argmax = [1, 5, 3, 7]
    pool = PhrasePool(phrase_length=2)
    assert phrase_drafters._target_phrases(pool, tree, anchor, argmax) == 1
    assert pool.phrases(2) == [(3, 7)] and 1 not in pool and 3 not in pool  # from node "2" on
    fully = PhrasePool(phrase_length=2)
    assert phrase_drafters._target_phrases(fully, tree, anchor, [1, 2, 3, 7]) == 0  # nothing rejected


def test_guess_corrections_replace_in_place():
    pool = PhrasePool(phrase_length=2)
    for phrase in [(4, 4), (1, 2), (5, 6)]:
        pool.add(3, phrase)
    guesses = [(5, 6), (1, 2)]
    tree, anchor = _tree([9, 3], guesses, 2)  # nodes: 0 root, 1 "3", 2 "5", 3 "6", 4 "1", 5 "2"
    argmax = [3, 5, 8, 0, 1, 0]
    phrase_drafters._correct_guesses(pool, tree, anchor, guesses, argmax)
    assert pool.phrases(3) == [(5, 8), (5, 1), (4, 4)]  # (argmax after "3", after the guess's 1st)


def test_point_mass_tree_rule_is_the_reference_draw_for_draw(pair):
    """Shared uniforms: the engine's rule and the reference `point_mass_tree_verify` emit the same
    tokens on a chain + trie of pool tails at T = 1."""
    target, _ = pair
    oracle = TorchLanguageModel(target, temperature=1.0)
    context = tuple(PROMPTS[1])
    top = sorted(range(64), key=lambda t: -oracle.probs(context)[t])[:3]
    chain, tails = (top[0],), [(top[1], top[0]), (top[0], top[2]), (top[2],)]
    draft = ref._trie_draft(chain, tails, 64, False)
    tree, _ = _tree([context[-1], *chain], tails, 2)
    cache = phrase_tree.DraftSequence(target, list(context[:-1]))
    p = probabilities(cache.forward(tree), 1.0).unsqueeze(0)  # [1, N, V]
    tokens, parents, verifiable = tree.tensors("cpu")
    need = pointmass.point_mass_tree_uniforms(parents, verifiable)
    gen = torch.Generator().manual_seed(5)
    for _ in range(50):
        u = torch.rand(1, need, generator=gen, dtype=torch.float64)
        path, tau, y, _ = pointmass.point_mass_tree_verify(p, tokens, parents, u, verifiable)
        emitted = tuple(tree.tokens[int(j)] for j in path[0, :int(tau[0])]) + (int(y[0]),)
        assert ref.point_mass_tree_verify(oracle, None, context, draft, replay_sampler(u[0].tolist())) == emitted


def test_bad_input(pair):
    target, draft = pair
    with pytest.raises(ValueError):
        ouroboros_phrase_method(guess_set=0)
    with pytest.raises(TypeError):
        ouroboros_phrase_method(output_ngrams=1)
    with pytest.raises(TypeError):
        ouroboros_phrase_method(pool={})
    with pytest.raises(ValueError, match="phrase_length"):
        ouroboros_phrase_method(phrase_length=0)
    with pytest.raises(ValueError, match="phrase_length"):  # a pool of another phrase length
        ouroboros_phrase_method(PhrasePool(phrase_length=4), phrase_length=6)


def test_paper_defaults_reach_the_drafter():
    """phrase_length 6 (lookahead level 7) and guess set 20, the authors' values, are the
    defaults; a fresh pool per decode call has that phrase length and room for the guess set."""
    drafter = ouroboros_phrase_method().drafter()
    assert (drafter.G, drafter.pool.phrase_length, drafter.pool.max_phrases_per_key) == (20, 6, 20)
    assert ouroboros_phrase_method().drafter().pool is not drafter.pool
    wide = ouroboros_phrase_method(guess_set=32, phrase_length=3).drafter()
    assert (wide.G, wide.pool.phrase_length, wide.pool.max_phrases_per_key) == (32, 3, 32)


def test_planted_cut_phrases_are_caught(pair, monkeypatch):
    """Planted: the drafter cuts the last phrase at L (the simplified drafter's rule): its drafts
    are no longer the twin's."""
    whole = phrase_drafters._draft
    monkeypatch.setattr(phrase_drafters, "_draft", lambda *args, whole_phrases=False: whole(*args))
    with pytest.raises(AssertionError):
        test_engine_drafts_are_the_reference_twins(pair, monkeypatch)


def test_bench_runner(tmp_path):
    """`verispec bench --methods ouroboros_phrase[:L=,K=,G=,W=]`: parsed with the decoder's
    defaults, greedy-exact on tiny models, pool counters in the summary."""
    import inspect
    import types

    from verispec import bench
    from verispec.reference import registry

    from .test_bench import PROMPTS as BENCH_PROMPTS, CharTokenizer, config

    defaults = inspect.signature(ouroboros_phrase_method).parameters
    spec = bench.parse_method("ouroboros_phrase", 4, 2)
    declared = registry.spec("ouroboros_phrase").defaults("torch")
    assert spec.params == (("draft_length", 4),)  # the rest: the registry's defaults, the factory's own
    names = ("num_candidates", "window", "guess_set", "phrase_length")
    assert [declared[k] for k in names] == [defaults[k].default for k in names]
    assert bench.parse_method("ouroboros_phrase:G=20,W=0,L=5", 4, 2) == bench.BenchMethod(
        "ouroboros_phrase:G=20,W=0,L=5", "ouroboros_phrase", (("draft_length", 5), ("guess_set", 20), ("window", 0)))
    with pytest.raises(ValueError, match="guess set"):
        bench.parse_method("ouroboros:G=4", 4, 2)
    pair = types.SimpleNamespace(target=tiny(64, 0, head_scale=4.0), draft=tiny(64, 0, noise=0.1, head_scale=4.0),
                                 tokenizer=CharTokenizer(64))  # as test_bench's tiny_pair
    assert bench.parse_method("ouroboros_phrase:n=3", 4, 2).params == (("draft_length", 4), ("phrase_length", 3))
    methods = ("ouroboros_phrase", "ouroboros_phrase:G=2,W=0,n=3")
    results = bench.run_bench(config(methods=methods, temperatures=(0.0,), max_new_tokens=12),
                              str(tmp_path / "b.json"), pair=pair, prompts=BENCH_PROMPTS, plot=False)
    rows = {r["runner"]: r for r in results["summary"]}
    for label in methods:
        assert rows[label]["greedy_match_rate"] == 1.0 and "pool_hit_rate" in rows[label]
        assert rows[label]["draft_rows"] >= rows[label]["draft_forwards"] - 1  # the prefill has no rows counted


def test_2d_window_layout_and_phrases():
    """Lookahead's 2D window (W = 3, n = 3): level 0 after the anchor, column i after L_i; from the
    n-th forward on, (column i, new token) is a phrase keyed by L_i; columns shift down."""
    window = phrase_windows.JacobiWindow2D(3, 3, [1, 2, 3, 4])
    pool = PhrasePool(phrase_length=3)
    for f in range(3):
        tree = phrase_tree.Tree()
        anchor = tree.add(9, -1)
        tops = window.attach(tree, anchor)
        level0, columns = list(window.level0), [list(c) for c in window.columns]
        if f == 0:
            assert tree.parents == [-1, 0, 1, 0, 3, 1, 5, 2, 7] and tops == [4, 6, 8]
            assert not any(tree.children[j] for j in range(len(tree)))  # not verifiable
        window.update([10 * f + i for i in range(3)], pool)
        assert window.level0 == [c[0] for c in columns[1:]]
        assert window.columns == [c[1:] + [10 * f + i] for i, c in enumerate(columns)]
    assert len(pool) == 3 and pool.phrases(9) == [(0, 10, 20)]  # (column 0, new) keyed by the anchor
    assert pool.phrases(level0[0]) == [tuple(columns[1]) + (21,)]
