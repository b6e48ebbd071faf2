"""Ouroboros' draft KV cache against a cache-free draft: the drafted trees are the same, iteration by iteration.

Both Ouroboros drafters (`ouroboros_method`, `ouroboros_phrase_method`) keep the draft
model's KV in a `_DraftSequence` (a `kv.SequenceKV`): tree forwards of pending tokens, pool
phrases and the Jacobi window, commits of the matched path, and a rollback to the longest prefix
the emitted text shares with the cache. A desync there (a rollback that does not crop, a commit
that keeps a rejected node) leaves every output an exact draw from the target (the drafts are
point masses), so no lossless test sees it; it only changes the drafts and hence the accepted
length.

Ouroboros' drafts are a deterministic function of the emitted history (argmaxes of the draft and
target models, pool contents). So the check is exact: decode once with the draft cache and once
with `CacheFreeDraft` in its place (the same interface; every node's logits from ONE forward of
the whole prefix + the node's path, no cache), with the same target and the same uniforms. With a
correct cache the two runs draft the same tree (tokens, parents, verifiable flags) at every
iteration and emit the same tokens. This is stronger than comparing mean accepted lengths: a
desync is caught at the first iteration where it changes a draft, with certainty (no false-alarm
rate). Planted: "rollback keeps the cache" (the token list is cut, the KV is not) and "commit
keeps the first rejected node" are caught.

Models: `tiny(28, vocab_size=6)` as target, the same with every parameter perturbed by 0.3 of its
std as draft (context-sensitive, peaked); T = 1; 40 tokens per run.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec.empirical import engine  # noqa: E402
from verispec.empirical.drafters import phrases as ob  # noqa: E402
from verispec.empirical.drafters.phrases import phrase_drafters, token_tree as phrase_tree  # noqa: E402

from .test_accepted_length_exact import tiny  # noqa: E402

TOKENS = 40
PROMPTS = [(1, 3), (2, 0, 5), (4,)]


@pytest.fixture(scope="module")
def pair():
    return tiny(28, vocab_size=6), tiny(28, noise=0.3, vocab_size=6)


class CacheFreeDraft:
    """`phrases.tree.DraftSequence`'s interface without a KV cache: `forward(tree)` runs, for every tree node,
    the held tokens + the node's root path through the model in one cache-free forward."""

    def __init__(self, model, tokens):
        self.model, self.tokens, self.rows = model, list(tokens), 0

    def forward(self, tree) -> torch.Tensor:
        prefixes = []
        for j in range(len(tree)):
            path, k = [], j
            while k >= 0:
                path.append(tree.tokens[k])
                k = tree.parents[k]
            prefixes.append(self.tokens + path[::-1])
        self.rows += len(tree)
        out = torch.zeros(len(tree), self.model.vocab_size)  # [N, V]
        by_length: dict[int, list[int]] = {}
        for j, prefix in enumerate(prefixes):
            by_length.setdefault(len(prefix), []).append(j)
        with torch.inference_mode():
            for nodes in by_length.values():
                ids = torch.tensor([prefixes[j] for j in nodes], device=self.model.device)  # [n, length]
                out[nodes] = self.model.model(input_ids=ids, use_cache=False).logits[:, -1].float().cpu()
        return out

    def commit(self, tree, nodes) -> None:
        self.tokens += [tree.tokens[j] for j in nodes]

    def rollback(self, length: int) -> None:
        del self.tokens[length:]


RUNNERS = {
    "ouroboros": (ob.OuroborosDrafter, lambda t, d, p, seed: engine.decode(
        t, d, torch.tensor(p), ob.ouroboros_method(ob.PhrasePool(phrase_length=2), draft_length=3, num_candidates=3,
                                                   window=2), TOKENS, 1.0, seed, storage="sequence")),
    "ouroboros_phrase": (ob.PhraseOuroborosDrafter, lambda t, d, p, seed: engine.decode(
        t, d, torch.tensor(p), ob.ouroboros_phrase_method(ob.PhrasePool(phrase_length=2), draft_length=3,
                                                          num_candidates=3, guess_set=3, window=2, phrase_length=2),
        TOKENS, 1.0, seed, storage="sequence")),
}


def decode(pair, runner, prompt, seed, monkeypatch, cache_free):
    """One run -> (tokens, [each iteration's drafted tree as (tokens, parents, verifiable)])."""
    drafter, run = RUNNERS[runner]
    trees = []
    draft = drafter.draft

    def recording(self, rows):
        tree = draft(self, rows)
        trees.append((tree.tokens[0].tolist(), tree.parents[0].tolist(), tree.verifiable[0].tolist()))
        return tree

    with monkeypatch.context() as patch:
        patch.setattr(drafter, "draft", recording)
        if cache_free:
            patch.setattr(phrase_drafters, "DraftSequence", CacheFreeDraft)
        result = run(*pair, prompt, seed)
    return result.tokens[0].tolist(), trees


def check_same_drafts(pair, runner, monkeypatch, runs=3):
    accepted = []
    for r in range(runs):
        prompt = PROMPTS[r % len(PROMPTS)]
        tokens, trees = decode(pair, runner, prompt, r, monkeypatch, cache_free=False)
        twin_tokens, twin_trees = decode(pair, runner, prompt, r, monkeypatch, cache_free=True)
        for i, (got, want) in enumerate(zip(trees, twin_trees)):
            assert got == want, f"run {r} iteration {i}: cached draft {got}, cache-free draft {want}"
        assert tokens == twin_tokens and len(trees) == len(twin_trees)
        accepted.append(TOKENS / len(trees))
    return accepted


@pytest.mark.parametrize("runner", list(RUNNERS))
def test_cached_draft_equals_cache_free_draft(pair, runner, monkeypatch):
    tokens_per_iteration = check_same_drafts(pair, runner, monkeypatch)
    assert max(tokens_per_iteration) > 1.2  # drafts were accepted (partially): the trees mattered


def _rollback_keeps_cache(self, length):
    """Bug: the token list is cut back, the KV cache is not (it keeps the stale draft tokens)."""
    del self.tokens[length:]


def _commit_keeps_rejected(self, tree, nodes):
    """Bug: the commit also keeps the first tree node after the kept path when there is one."""
    extra = [j for j in range(len(tree)) if tree.parents[j] == (nodes[-1] if nodes else -1) and j not in nodes]
    keep = torch.zeros(1, len(tree), dtype=torch.bool, device=self.model.device)
    keep[0, nodes] = True
    if extra and nodes:
        keep[0, extra[0]] = True
        nodes = list(nodes) + [extra[0]]
    self.kv.commit(keep)
    self.tokens += [tree.tokens[j] for j in nodes[:len(nodes) - (1 if extra and nodes else 0)]]


@pytest.mark.parametrize("runner", list(RUNNERS))
@pytest.mark.parametrize("name,bug", [("rollback", _rollback_keeps_cache), ("commit", _commit_keeps_rejected)])
def test_planted_draft_cache_bug_is_caught(pair, runner, monkeypatch, name, bug):
    monkeypatch.setattr(phrase_tree.DraftSequence, name, bug)
    with pytest.raises(AssertionError, match="iteration"):
        check_same_drafts(pair, runner, monkeypatch)
