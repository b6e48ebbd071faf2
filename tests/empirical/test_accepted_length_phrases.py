"""Lookahead's drafting state (phrase pool + Jacobi window) against a cache-free twin.

Lookahead (`verispec.empirical.drafters.phrases.LookaheadDrafter`) has no draft model: its drafts are
pool phrases, fed by the n-grams of the emitted text and by the trajectories of a Jacobi window
whose guesses ride in the target's own tree forward. None of that state can break losslessness
(every drafted token is a point mass), so, as with a draft KV cache, a bug in it only moves the
accepted length. The drafts are a deterministic function of the emitted history, which makes
two checks possible:

1. Exact: `LookaheadTwin` replays the emitted history with cache-free forwards of the target
   (`as_reference.TorchLanguageModel`: one forward over the whole prefix per node, no KV cache)
   and its own pool and window; at every iteration the decoder's drafted tree (tokens, parents,
   verifiable flags, window nodes included) must equal the twin's. A state bug that changes any
   tree is caught with certainty at the iteration where it first acts.
2. Statistical (the accepted length): from the twin's tree and the cache-free p at its nodes the
   exact law of tau for that iteration follows (point-mass tree verification emits an exact draw
   from p at every node and follows it when it is a child, so P(tau >= d along a path) is the
   product of p along it). Over all iterations of R independent runs S = sum (tau_i - E[tau_i |
   history]) is a martingale with increments in [-L, L] and predictable variance
   W = sum Var[tau_i | history] (exact). Freedman's inequality with a union over a grid of G
   variance levels v_g = n L^2 / 4 / 2^g (W <= v_g for the smallest such g) rejects when
   |S| >= t(v_g), 2 exp(-t^2 / (2 (v_g + L t / 3))) = ALPHA / G: a level-ALPHA test whatever the
   (data-dependent) W. Measured (40 runs, n = 1109 iterations): mean deviation -0.023, bound
   0.134; power 0.9 against a mean shift >= bound + L sqrt(ln 10 / (2 n)) = 0.20 (Azuma under the
   alternative). Planted "n-grams never added" (the emitted text never reaches the pool) shifts
   it by -0.23 (bound 0.124) and is caught; the planted window bug moves tau by about -0.05 on
   these models (the n-gram phrases dominate), too little for this test: check 1 catches it.

Models: `tiny(28, vocab_size=6)` of `test_accepted_length_exact` (context-sensitive, peaked; a
seed whose greedy continuations vary, most tiny seeds repeat one token, which would hide window
bugs), T = 1, phrase length 2, K = 3 candidates, W = 2 window slots, 40 tokens per run; mean
P(0 < tau < 2 | history) = 0.28 (partial acceptance, asserted).
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec.empirical import engine  # noqa: E402
from verispec.empirical.drafters import phrases as ob  # noqa: E402
from verispec.empirical.drafters.phrases import windows as phrase_windows  # noqa: E402
from verispec.empirical.drafters.phrases import phrase_drafters  # noqa: E402
from verispec.empirical.as_reference import TorchLanguageModel  # noqa: E402

from .test_accepted_length_exact import tiny  # noqa: E402

ALPHA = 1e-6
TEMPERATURE = 1.0
PHRASE, K, W = 2, 3, 2
TOKENS = 40
SEED, VOCAB = 28, 6  # a target whose greedy continuations vary (most tiny seeds repeat one token)


@pytest.fixture(scope="module")
def target():
    return tiny(SEED, vocab_size=VOCAB)


class LookaheadTwin:
    """Lookahead's drafting replayed from the emitted history, with cache-free target forwards.

    `tree()` builds the iteration's tree from the twin's own pool and window (the same trie
    construction as the decoder), computes p at every node by forwarding the whole prefix, and
    returns (tree, the exact law of tau {tau: P}); `step(emitted)` advances the pool and window
    by what the decoder emitted in that iteration."""

    def __init__(self, ref: TorchLanguageModel, prompt):
        self.ref, self.seq = ref, list(prompt)
        self.pool = ob.PhrasePool(phrase_length=PHRASE)
        self.window = phrase_windows.JacobiWindow(W, PHRASE, self.seq) if W else None

    def _probs(self, tree) -> list:
        """p at every node [N] x float64 [V]: the prefix + the node's root path, no cache."""
        prefixes = []
        for j in range(len(tree)):
            path, k = [], j
            while tree.parents[k] >= 0:
                path.append(tree.tokens[k])
                k = tree.parents[k]
            prefixes.append(tuple(self.seq) + tuple(reversed(path)))
        by_length: dict[int, list[int]] = {}
        for j, prefix in enumerate(prefixes):
            by_length.setdefault(len(prefix), []).append(j)
        probs = [None] * len(tree)
        for nodes in by_length.values():  # one batched forward per prefix length
            for j, p in zip(nodes, self.ref._forward_last([prefixes[j] for j in nodes])):
                probs[j] = p
        return probs

    def tree(self):
        tree, self.slots = phrase_drafters._lookahead_tree(self.seq[-1], self.pool, K, self.ref.vocab_size, self.window)
        probs = self._probs(tree)
        self.argmax = [int(p.argmax()) for p in probs]  # the window's next guesses read these

        def law(j):  # {tau: P} of the walk below node j (trie children: distinct tokens)
            out = {0: 1.0}
            for token, child in tree.children[j].items():
                p = float(probs[j][token])
                out[0] -= p
                for tau, q in law(child).items():
                    out[tau + 1] = out.get(tau + 1, 0.0) + p * q
            return out

        return tree, law(0)

    def step(self, emitted) -> None:
        """The decoder's order: the window's outputs first, then the emitted text's n-grams."""
        if self.window is not None:
            self.window.update([self.argmax[j] for j in self.slots], self.pool)
        before = len(self.seq)
        self.seq += list(emitted)
        self.pool.add_ngrams(self.seq[max(0, before - PHRASE):])


def decode(target, prompt, seed, trees=None):
    """One lookahead run -> (tokens [TOKENS], taus [iterations]); `trees` collects each
    iteration's drafted tree as (tokens, parents, verifiable) lists."""
    draft = ob.LookaheadDrafter.draft

    def recording(self, rows):
        tree = draft(self, rows)
        trees.append((tree.tokens[0].tolist(), tree.parents[0].tolist(), tree.verifiable[0].tolist()))
        return tree

    if trees is not None:
        ob.LookaheadDrafter.draft = recording
    try:
        method = ob.lookahead_method(ob.PhrasePool(phrase_length=PHRASE), num_candidates=K, window=W)
        result = engine.decode(target, None, torch.tensor(prompt), method, TOKENS, TEMPERATURE, seed, storage="sequence")
    finally:
        ob.LookaheadDrafter.draft = draft
    return result.tokens[0].tolist(), result.stats.accepted_lengths.tolist()


def replay(target, prompt, tokens, taus):
    """Yield (twin tree, exact law of tau, decoder's tau) for every iteration of one run."""
    twin, pos = LookaheadTwin(TorchLanguageModel(target, TEMPERATURE), prompt), 0
    for tau in taus:
        tree, law = twin.tree()
        yield tree, law, tau
        twin.step(tokens[pos:pos + tau + 1])
        pos += tau + 1


def freedman_threshold(variance_cap: float, bound: float, alpha: float) -> float:
    """t with 2 exp(-t^2 / (2 (v + b t / 3))) = alpha (Freedman 1975, two-sided)."""
    c = math.log(2 / alpha)
    a = 2 * bound * c / 3
    return (a + math.sqrt(a * a + 8 * variance_cap * c)) / 2


def check_martingale(deviation: float, variance: float, n: int, bound: float, alpha: float = ALPHA, grid: int = 12):
    """Assert |S| < t at the smallest grid level v_g >= W (module docstring); returns the report."""
    cap = n * bound * bound / 4  # Var <= L^2 / 4 for tau in [0, L]
    g = 0
    while g + 1 < grid and cap / 2 ** (g + 1) >= variance:
        g += 1
    t = freedman_threshold(cap / 2 ** g, bound, alpha / grid)
    line = (f"mean(tau - E[tau | history]) = {deviation / n:+.4f} over n = {n} iterations, "
            f"bound {t / n:.4f} (alpha {alpha:g}, W = {variance:.1f} <= v = {cap / 2 ** g:.1f})")
    assert abs(deviation) < t, line
    return line


# ----------------------------------------------------------------------------------------------
# Planted drafting-state bugs (monkeypatched into LookaheadDrafter.accept)
# ----------------------------------------------------------------------------------------------

def _window_reads_parent(self, tree, verdict):
    """The Jacobi window reads each slot's output one node early (its parent's): an off-by-one
    in the gather of the tree forward's logits."""
    self.window.update([self.argmax[j - 1] for j in self.slots], self.pool)
    self.verified += int(verdict.tau[0])
    self._emit(verdict)


def _no_ngrams(self, tree, verdict):
    """The emitted text never reaches the pool (only the window's trajectories do)."""
    self.window.update([self.argmax[j] for j in self.slots], self.pool)
    nodes = [int(j) for j in verdict.nodes[0, :int(verdict.tau[0])]]
    self.seq += [self.tree.tokens[j] for j in nodes] + [int(verdict.token[0])]


PROMPTS = [(1, 3), (2, 0)]


def _trees_match(target, runs):
    for r in range(runs):
        prompt = PROMPTS[r % len(PROMPTS)]
        trees = []
        tokens, taus = decode(target, prompt, seed=r, trees=trees)
        for i, ((tree, _, _), drafted) in enumerate(zip(replay(target, prompt, tokens, taus), trees)):
            expected = (tree.tokens, tree.parents, tree.verifiable)
            assert drafted == expected, f"run {r} iteration {i}: drafted {drafted}, twin {expected}"


def test_drafted_trees_equal_the_cache_free_twin(target):
    _trees_match(target, runs=4)


@pytest.mark.parametrize("plant", [_window_reads_parent, _no_ngrams])
def test_planted_state_bug_changes_a_tree(target, monkeypatch, plant):
    monkeypatch.setattr(ob.LookaheadDrafter, "accept", plant)
    with pytest.raises(AssertionError, match="iteration"):
        _trees_match(target, runs=4)


def _tau_statistic(target, runs):
    deviation = variance = 0.0
    n = 0
    partial = 0.0
    for r in range(runs):
        prompt = PROMPTS[r % len(PROMPTS)]
        tokens, taus = decode(target, prompt, seed=1000 + r)
        for _, law, tau in replay(target, prompt, tokens, taus):
            mu = sum(k * p for k, p in law.items())
            deviation += tau - mu
            variance += sum(k * k * p for k, p in law.items()) - mu * mu
            partial += sum(p for k, p in law.items() if 0 < k < PHRASE)
            n += 1
    return deviation, variance, n, partial / n


@pytest.mark.slow
def test_measured_tau_equals_exact_given_history(target):
    deviation, variance, n, partial = _tau_statistic(target, runs=40)
    assert partial > 0.1  # partial acceptance: mean P(0 < tau < L | history)
    check_martingale(deviation, variance, n, PHRASE)


@pytest.mark.slow
def test_planted_no_ngrams_is_caught_by_tau(target, monkeypatch):
    monkeypatch.setattr(ob.LookaheadDrafter, "accept", _no_ngrams)
    deviation, variance, n, _ = _tau_statistic(target, runs=40)
    with pytest.raises(AssertionError, match="history"):
        check_martingale(deviation, variance, n, PHRASE)


def test_freedman_threshold_level():
    """The grid test keeps its level on a simulated martingale whose step law depends on the
    past (alpha 0.05, 4000 simulations of 200 steps)."""
    import numpy as np

    rng = np.random.default_rng(0)
    rejections = 0
    for _ in range(4000):
        deviation = variance = 0.0
        last = 0
        for _ in range(200):
            p = 0.2 if last else 0.6  # P(tau = 2); else tau = 0
            tau = 2 * (rng.random() < p)
            deviation += tau - 2 * p
            variance += 4 * p * (1 - p)
            last = tau
        try:
            check_martingale(deviation, variance, 200, 2, alpha=0.05)
        except AssertionError:
            rejections += 1
    assert rejections / 4000 <= 0.05
