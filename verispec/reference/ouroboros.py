"""Ouroboros' phrase drafts and their point-mass tree verification: the reference twin of
`verispec.empirical.drafters.phrases.PhraseOuroborosDrafter`.

Ouroboros (Zhao et al. 2024, "Ouroboros: Generating Longer Drafts Phrase by Phrase for Faster
Speculative Decoding", arXiv 2402.13720) drafts with the draft model phrase by phrase. One draft
step at context c looks up the pool phrases keyed by c's last token and keeps the longest phrase
prefix that agrees with the draft model's own argmax chain, then the draft's argmax after it: a
step emits 1 + (matched phrase tokens) tokens, all of them the draft's greedy continuation of c.
Steps repeat until the chain holds at least L tokens (the last phrase is not cut, so the chain may
run past L, as in the paper). The K newest pool phrases keyed by the chain's last token then hang
after the chain as a trie ("lengthening drafts via phrases").

Every drafted token is a deterministic function of the context and of the pool snapshot, so its
draft law is a point mass, and `point_mass_tree_verify` checks the trie by recursive rejection
with one point-mass proposal per child: every emitted token is an exact draw from the target. The
paper's verifier is greedy (longest prefix equal to the target's argmax); at T = 0 they coincide.

The pool here is a fixed snapshot ``{key token: [phrase, ...] newest first}``. In the engine the
pool changes between iterations, but only from what earlier iterations saw (and, with a lookahead
window, from the draft model's outputs), so each iteration is this method with that iteration's
snapshot: checking the method for a snapshot checks the loop.

Planted bugs of this method (each fails `verispec.testing.assert_lossless`) are in
`verispec.testing.planted_drafters`.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from .drafters import Draft, Drafter, require_draft_model
from .methods import Method
from .models import check_positive_int
from .probability import argmax, is_exact, one_hot, residual

__all__ = ["check_pool", "phrase_chain", "ouroboros_phrases", "point_mass_tree_verify", "ouroboros_method"]


def check_pool(pool) -> dict[int, tuple[tuple[int, ...], ...]]:
    """{key: phrases newest first} as tuples of ints; TypeError / ValueError on anything else."""
    if not isinstance(pool, Mapping):
        raise TypeError(f"pool: expected a mapping key token -> phrases, got {type(pool).__name__}")
    out = {}
    for key, phrases in pool.items():
        if isinstance(key, bool) or not isinstance(key, int) or key < 0:
            raise ValueError(f"pool: keys must be token ids >= 0, got {key!r}")
        if isinstance(phrases, (str, bytes)) or not isinstance(phrases, Sequence):
            raise TypeError(f"pool: expected a sequence of phrases under key {key}, got {type(phrases).__name__}")
        checked = []
        for phrase in phrases:
            if isinstance(phrase, (str, bytes)) or not isinstance(phrase, Sequence) or not phrase or not all(
                    isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in phrase):
                raise ValueError(f"pool: phrase {phrase!r} under key {key} is not a non-empty sequence of token ids")
            checked.append(tuple(phrase))
        out[key] = tuple(checked)
    return out


def _greedy_match(model, context: tuple, phrase: tuple) -> int:
    """How many leading tokens of `phrase` equal the draft model's argmax chain after `context`."""
    m = 0
    while m < len(phrase) and argmax(model.probs(context + phrase[:m])) == phrase[m]:
        m += 1
    return m


def phrase_chain(model, context: tuple, pool, draft_length: int, guess_set: int) -> tuple[int, ...]:
    """The draft chain of Ouroboros' phrase-by-phrase drafting (module docstring).

    Each step at context c: m = the longest agreement of the `guess_set` newest phrases keyed by
    c[-1] with the draft's argmax chain; the step adds the draft's greedy continuation of c of
    length m + 1. Steps repeat until >= `draft_length` tokens.

    Returns:
        the chain, between L and L - 1 + (longest phrase) + 1 tokens. The same tokens as the
        draft's greedy chain; only its length depends on the pool.
    """
    chain: tuple[int, ...] = ()
    while len(chain) < draft_length:
        here = context + chain
        phrases = pool.get(here[-1], ())[:guess_set] if here else ()
        m = max((_greedy_match(model, here, phrase) for phrase in phrases), default=0)
        for _ in range(m + 1):
            chain += (argmax(model.probs(context + chain)),)
    return chain


def _trie_draft(chain: tuple, tails: Sequence[tuple], vocab_size: int, exact: bool) -> Draft:
    """The chain, then the tails as a trie after its last token; one-hot proposal where a node
    has a single child, none where it has several (a deterministic tree)."""
    paths = [chain + tail for tail in tails] or [chain]

    def proposal(node):
        children = {path[len(node)] for path in paths if path[:len(node)] == node and len(path) > len(node)}
        return one_hot(next(iter(children)), vocab_size, exact) if len(children) == 1 else None

    return Draft.from_paths(paths, proposal)


def ouroboros_phrases(draft_length: int, pool, num_candidates: int = 3, guess_set: int = 20) -> Drafter:
    """Ouroboros' draft: `phrase_chain` then the `num_candidates` newest pool phrases keyed by
    its last token, as a point-mass trie.

    Args:
        draft_length: L >= 1 (the paper's gamma: the chain is at least this long).
        pool: {key token: [phrase, ...] newest first}, phrases of token ids (any lengths >= 1).
        num_candidates: K >= 1 phrases hung after the chain (the paper's top-k).
        guess_set: G >= 1 phrases the draft model checks per step (the paper's guess set size).

    Raises:
        TypeError / ValueError: a bad pool or a parameter that is not an int >= 1.
    """
    L = check_positive_int(draft_length, "draft_length")
    K = check_positive_int(num_candidates, "num_candidates")
    G = check_positive_int(guess_set, "guess_set")
    phrases = check_pool(pool)
    longest = max((len(p) for ps in phrases.values() for p in ps), default=0)

    def build(draft_model, context, rand):
        model = require_draft_model(draft_model, "ouroboros_phrases")
        chain = phrase_chain(model, tuple(context), phrases, L, G)
        tails = [t for t in phrases.get(chain[-1], ())[:K] if max(t) < model.vocab_size]
        exact = is_exact(model.probs(tuple(context)))
        return _trie_draft(chain, tails, model.vocab_size, exact)

    # max_depth, the deepest node: a chain of L - 1 + longest + 1 tokens, then a tail of `longest`
    return Drafter("ouroboros_phrases", build, gamma=L, max_depth=L + 2 * longest, num_candidates=K, guess_set=G)


def point_mass_tree_verify(target, draft_model, context, draft, rand) -> tuple[int, ...]:
    """Recursive rejection with a one-hot proposal per child on a deterministic trie: exact draws
    from the target at any temperature.

    At each node the children x are tried in order, x accepted with probability p'(x) (p' = p at
    first; after a rejection p' <- norm(max(p' - one-hot(x), 0))); if none is accepted the
    correction is drawn from p', at a leaf the bonus from p. This is token verification with
    q = one-hot per child (Leviathan et al. 2023, arXiv 2211.17192, Algorithm 1), i.e. SpecInfer's
    recursive rejection sampling (arXiv 2305.09781) with one point-mass proposal per child.
    """
    node: tuple[int, ...] = ()
    while True:
        current = target.probs(tuple(context) + node)  # [V], p' of the walk at this node
        for x in draft.children(node):
            if rand.bernoulli(current[x]):
                node += (x,)
                break
            current = residual(current, one_hot(x, len(current), is_exact(current)))
        else:
            return node + (rand.categorical(current),)


def ouroboros_method(draft_length: int, pool, num_candidates: int = 3, guess_set: int = 20) -> Method:
    """`ouroboros_phrases` + `point_mass_tree_verify` (reads the context's tokens: not model-state-only)."""
    drafter = ouroboros_phrases(draft_length, pool, num_candidates, guess_set)
    return Method("ouroboros", drafter, point_mass_tree_verify, dict(drafter.params))
