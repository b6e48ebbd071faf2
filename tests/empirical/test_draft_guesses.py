"""Prompt-lookup guesses checked by the draft model (`guess_length`, bench ``g=``): the adaptive
and hybrid chains keep their tokens and q rows exactly, take fewer draft forwards where the
draft's tokens repeat the context, and keep the target's law (engine tau vs the reference's exact
law, with a planted bug)."""

from __future__ import annotations

import copy
import dataclasses

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec import bench  # noqa: E402
from verispec.empirical import engine, methods  # noqa: E402
from verispec.empirical.drafters import adaptive  # noqa: E402

from .test_adaptive import PROMPTS, check_tau_law, exact_models, pair  # noqa: E402,F401 (fixtures)
from .test_decode_tiny import tiny  # noqa: E402
from .test_policy import FLAT  # noqa: E402


@pytest.fixture(scope="module")
def peaked_pair():
    """A peaked pair: sampled chains at T = 1 repeat the context often enough for guesses to hit."""
    return tiny(64, 0, head_scale=16.0), tiny(64, 0, noise=0.1, head_scale=16.0)


def _trees(target, draft, name, guess_length, storage, T, N=60, **params):
    """(every DraftTree the target verified, the decode result) for one run at uniforms seed 3;
    `params`: more of the method's parameters (the cost policy's)."""
    trees = []
    method = methods.get(name, draft_length=3, max_draft_length=8, confidence_threshold=0.0, guess_length=guess_length,
                         **params)
    method = dataclasses.replace(method, observe=lambda logits, tree, rows: trees.append(tree))
    batch = PROMPTS if storage != "sequence" else PROMPTS[:1]
    return trees, engine.decode(target, draft, batch, method, N, temperature=T, uniforms=3, storage=storage)


def assert_same_chains(target, draft, name, storage, T, fewer=True, **params):
    """Same uniforms: every iteration's tree (tokens, parents, q) with guesses equals the chain
    drafted one token per forward (in fewer draft forwards unless fewer=False)."""
    plain_trees, plain = _trees(target, draft, name, 0, storage, T, **params)
    trees, guessed = _trees(target, draft, name, 4, storage, T, **params)
    assert torch.equal(guessed.tokens, plain.tokens)
    assert len(trees) == len(plain_trees)
    for a, b in zip(plain_trees, trees):
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.parents, b.parents) and torch.equal(a.real, b.real)
        assert a.q.shape == b.q.shape and torch.allclose(a.q, b.q, atol=1e-5, rtol=0)
    if fewer:
        assert guessed.stats.draft_forwards < plain.stats.draft_forwards
    return guessed


@pytest.mark.parametrize("name", ["adaptive", "hybrid"])
@pytest.mark.parametrize("storage", ["padded", "packed", "sequence", "static"])
@pytest.mark.parametrize("T, models", [(0.0, "pair"), (1.0, "peaked_pair")])
def test_guesses_keep_every_chain_and_save_forwards(request, name, storage, T, models):
    """The draft's own continuations repeat the context (tiny models loop), so guesses hit (hybrid
    at T = 1: its own lookup phrases take most repeats, so no fewer forwards is required); at
    T = 0 the output is target-only greedy decoding."""
    target, draft = request.getfixturevalue(models)
    guessed = assert_same_chains(target, draft, name, storage, T, fewer=name == "adaptive" or T == 0)
    if T == 0:
        greedy = engine.decode(target, None, PROMPTS[:guessed.tokens.shape[0]], engine.target_only_method(), 60)
        assert torch.equal(guessed.tokens, greedy.tokens)


@pytest.fixture(scope="module")
def sharp_pair():
    """Sharper still: the policy's long chains at T = 1 repeat the context often enough for the
    guesses to ride in some forwards (with `peaked_pair` on this seed they happen not to)."""
    return tiny(64, 0, head_scale=32.0), tiny(64, 0, noise=0.1, head_scale=32.0)


@pytest.mark.parametrize("T, models", [(0.0, "pair"), (1.0, "sharp_pair")])
def test_guesses_keep_the_cost_policy_chains(request, T, models):
    """Under the cost policy (what the bench runs adaptive with) the guesses still only save
    draft forwards: the policy stops each chain where it stops it when
    drafting one token per forward, so the trees, q rows and tokens are the same."""
    target, draft = request.getfixturevalue(models)
    assert_same_chains(target, draft, "adaptive", "padded", T, policy="auto", costs=FLAT)


def test_draft_cache_stays_in_sync_with_guesses(pair):
    """An identical draft at T = 0 has every chain accepted whole: the draft cache holds exactly the
    emitted tokens (guess nodes the chain did not take are dropped at the commit)."""
    twin = copy.deepcopy(pair[0])
    method = methods.get("adaptive", draft_length=3, confidence_threshold=0.0, schedule="constant", guess_length=4)
    result = engine.decode(pair[0], twin, PROMPTS[:1], method, 60, storage="sequence")
    tau, lengths = result.stats.accepted_lengths, result.stats.logs["chain_lengths"]
    assert tau[:-1].tolist() == lengths[:-1].tolist()
    plain = engine.decode(pair[0], twin, PROMPTS[:1], methods.get("adaptive", draft_length=3, confidence_threshold=0.0,
                                                                  schedule="constant"), 60, storage="sequence")
    assert result.stats.draft_forwards < plain.stats.draft_forwards


def test_planted_unchecked_guess_is_caught(pair, monkeypatch):
    """Planted: a guess column's q used for the next token without checking that the drawn token
    equals the guess (the q of another prefix, and a draft cache that keeps the guess)."""
    monkeypatch.setattr(adaptive, "_matches", lambda token, guess, j: torch.full_like(token, j < guess.shape[1],
                                                                                   dtype=torch.bool))
    with pytest.raises(AssertionError):
        assert_same_chains(*pair, "adaptive", "sequence", 0.0)
    with pytest.raises(AssertionError):
        test_draft_cache_stays_in_sync_with_guesses(pair)


#: The exact-law case: a prompt whose last 2-gram recurs (so the first iteration has a guess), a
#: cap of 2 and threshold 0.3 (chains often reach their second token, where a guess can ride).
GUESS_CASE = dict(draft_length=2, threshold=0.3, guess_length=2, prompt=(1, 3, 2, 1, 3))


def _count_drawn(monkeypatch, inner=adaptive.AdaptiveChainDrafter._draws):
    """Spy on `_draws`: the list of the most chain tokens one forward gave a row."""
    drawn = []

    def counting(self, forward, chain, going):
        before = chain.depth.clone()
        inner(self, forward, chain, going)
        drawn.append(int((chain.depth - before).max()))

    monkeypatch.setattr(adaptive.AdaptiveChainDrafter, "_draws", counting)
    return drawn


def test_engine_tau_with_guesses_matches_the_reference_exact_law(exact_models, monkeypatch):
    """tau_1, tau_2 of 4000 rows vs the exact law of the reference adaptive chain (Bernstein, alpha
    1e-6, as test_adaptive); the guesses really ride: some draft forward drew two chain tokens.
    They ride in only ~3% of row-forwards here (V = 4 context-sensitive models rarely repeat), too
    rare for this test to see a bug of the guess path alone: the same-uniforms tests above carry
    those (planted bugs included); this one checks the whole engine with guesses on."""
    drawn = _count_drawn(monkeypatch)
    check_tau_law(exact_models, "adaptive", "token", **GUESS_CASE)
    assert max(drawn) >= 2


def test_planted_q_of_the_wrong_column_is_caught(peaked_pair, monkeypatch):
    """Planted: a token drawn from a guess column's q is recorded with the q of the forward's first
    draw (the column the forward was anchored on): the verifier would divide by a law the token was
    not drawn from. The same-uniforms comparison sees the q rows differ."""
    inner, record = adaptive.AdaptiveChainDrafter._draws, adaptive._Chain.record

    def anchored(self, forward, chain, going):
        chain.first_q = None
        inner(self, forward, chain, going)

    def stale(chain, going, token, q):
        chain.first_q = q if chain.first_q is None else chain.first_q
        record(chain, going, token, chain.first_q)

    monkeypatch.setattr(adaptive.AdaptiveChainDrafter, "_draws", anchored)
    monkeypatch.setattr(adaptive._Chain, "record", stale)
    with pytest.raises(AssertionError):
        assert_same_chains(*peaked_pair, "adaptive", "sequence", 1.0)


def test_planted_one_uniform_per_forward_is_caught(peaked_pair, monkeypatch):
    """Planted: every token a forward gives reads the uniform of the forward's first draw (one
    uniform per forward where the chain needs one per depth): the second token is no longer an
    independent draw from its q. The same-uniforms comparison sees other tokens."""
    inner, uniforms = adaptive.AdaptiveChainDrafter._draws, adaptive._Chain.uniforms

    def frozen(self, forward, chain, going):
        chain.frozen = uniforms(chain, self.source, going)
        inner(self, forward, chain, going)
        del chain.frozen

    monkeypatch.setattr(adaptive.AdaptiveChainDrafter, "_draws", frozen)
    monkeypatch.setattr(adaptive._Chain, "uniforms", lambda chain, source, going: chain.frozen)
    with pytest.raises(AssertionError):
        assert_same_chains(*peaked_pair, "adaptive", "sequence", 1.0)


def test_bad_guess_lengths_are_refused():
    for bad in (-1, 1.5, 0.0, True, "2"):
        with pytest.raises((ValueError, TypeError), match="guess_length"):
            adaptive.adaptive_method(2, guess_length=bad)
        with pytest.raises((ValueError, TypeError), match="guess_length"):
            adaptive.hybrid_method(2, guess_length=bad)
    assert adaptive.adaptive_method(2).params["guess_length"] == 0


def test_bench_takes_g_on_adaptive_runners_only():
    assert bench.parse_method("adaptive:L=20,M=20,g=4,dq=8", 4, 1).param("guess_length") == 4
    assert bench.parse_method("hybrid:g=2", 4, 1).param("guess_length") == 2
    assert bench.parse_method("adaptive", 4, 1).param("guess_length") is None  # the registry's 0
    for bad in ("block:g=4", "hf:g=4", "adaptive:g=0"):
        with pytest.raises(ValueError, match="g \\(|bad parameter"):
            bench.parse_method(bad, 4, 1)
