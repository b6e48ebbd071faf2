"""The phrase-pool drafters of the engine (`OuroborosDrafter`, `PhraseOuroborosDrafter`,
`LookaheadDrafter`; one iteration of each in its docstring) and the factories of their methods
(`ouroboros_method`, `ouroboros_phrase_method`, `lookahead_method`), each verified by
point-mass tree verification (`verispec.empirical.verifiers.nodes.PointMassTree`).
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..base import Drafter, DraftTree
from ...torch_method import TorchMethod
from ...verifiers.nodes import PointMassTree
from ...validation import check_int, check_positive
from .pool import PhrasePool, candidates, check_pool
from .token_tree import DraftSequence, Tree
from .windows import JacobiWindow, JacobiWindow2D

__all__ = ["ouroboros_method", "ouroboros_phrase_method", "lookahead_method", "OuroborosDrafter",
           "PhraseOuroborosDrafter", "LookaheadDrafter"]


# --- Drafting and pool refinement ---

def _draft_forward(dcache: DraftSequence, context: list[int], pool: PhrasePool, window: JacobiWindow | None,
                   room: int, num_candidates: int) -> tuple[list[int], int]:
    """One draft forward: unseen tokens, then pool phrases keyed by the last token (trie, at most
    room - 1 deep) and the Jacobi window. Returns (new draft tokens: the longest phrase prefix
    matching the draft's argmax then its argmax after it, 1..room tokens; phrase tokens used)."""
    tree = Tree()
    pending = tree.add_chain(-1, context[len(dcache.tokens):])
    anchor = pending[-1]
    for phrase in candidates(pool, context[-1], num_candidates, room - 1, dcache.model.vocab_size):
        tree.add_path(anchor, phrase)
    slots = window.attach(tree, anchor) if window is not None else []
    greedy = dcache.forward(tree).argmax(-1).tolist()  # [N], the draft's point-mass choices
    path, node = [], anchor
    while greedy[node] in tree.children[node]:  # longest phrase prefix the draft agrees with
        node = tree.children[node][greedy[node]]
        path.append(node)
    dcache.commit(tree, pending + path)
    if window is not None:
        window.update([greedy[j] for j in slots], pool)
    return [tree.tokens[j] for j in path] + [greedy[node]], len(path)


def _draft(dcache, seq, pool, window, L, K, whole_phrases=False):
    """Draft L tokens phrase by phrase (whole_phrases: at least L, the last phrase not cut, as
    Ouroboros' draft does). Returns (draft, draft forwards, pool tokens used)."""
    common = 0  # the draft cache must hold a proper prefix of seq (its last token is unseen)
    limit = min(len(dcache.tokens), len(seq) - 1)
    while common < limit and dcache.tokens[common] == seq[common]:
        common += 1
    dcache.rollback(common)
    draft, forwards, used = [], 0, 0
    while len(draft) < L:
        room = pool.phrase_length + 1 if whole_phrases else L - len(draft)
        new, from_pool = _draft_forward(dcache, seq + draft, pool, window, room, K)
        draft += new
        forwards, used = forwards + 1, used + from_pool
    return draft, forwards, used


def _ouroboros_tree(last: int, proposal: list[int], pool: PhrasePool, K: int, vocab_size: int):
    """The verification tree: root = last emitted token, then the draft, then the K newest pool
    phrases keyed by the last draft token as a trie under it. Returns (tree, draft-end node)."""
    tree = Tree()
    anchor = tree.add_chain(-1, [last] + list(proposal))[-1]
    for phrase in candidates(pool, proposal[-1], K, pool.phrase_length, vocab_size):
        tree.add_path(anchor, phrase)
    return tree, anchor


def _lookahead_tree(last: int, pool: PhrasePool, K: int, vocab_size: int, window: JacobiWindow | None):
    """Root = last emitted token; the K newest pool phrases keyed by it (trie); the Jacobi window
    (not verifiable). Returns (tree, window slot nodes)."""
    tree = Tree()
    root = tree.add(last, -1)
    for phrase in candidates(pool, last, K, pool.phrase_length, vocab_size):
        tree.add_path(root, phrase)
    return tree, (window.attach(tree, root) if window is not None else [])


def _refine(pool: PhrasePool, tree: Tree, anchor: int, argmax: list[int]) -> None:
    """Candidate refinement: for every pool phrase hung at `anchor`, the target's argmax after
    the anchor and after each phrase token but the last is the target's own phrase for the
    anchor's token; insert it (the newest entry). argmax: [N] over the tree's nodes."""
    n = pool.phrase_length
    for first in tree.children[anchor].values():
        node, refined = first, [argmax[anchor]]
        while len(refined) < n:
            refined.append(argmax[node])
            if not tree.children[node]:
                break
            node = next(iter(tree.children[node].values()))
        if len(refined) == n:
            pool._insert(tree.tokens[anchor], tuple(refined))


def _guess_nodes(tree: Tree, anchor: int, phrase: Sequence[int]) -> list[int]:
    """The trie nodes of `phrase` hung at `anchor` (as many as were added)."""
    nodes, node = [], anchor
    for t in phrase:
        node = tree.children[node].get(int(t))
        if node is None:
            break
        nodes.append(node)
    return nodes


def _correct_guesses(pool: PhrasePool, tree: Tree, anchor: int, guesses: list[tuple], argmax: list[int]) -> None:
    """Ouroboros' refinement of the guesses it verified: each guess g hung at `anchor` is
    replaced, at its place in the pool, by (argmax after the anchor, argmax after g_1, ...,
    argmax after g_{n-1}): one Jacobi step of the target on g. argmax: [N] over the tree's nodes."""
    key, n = tree.tokens[anchor], pool.phrase_length
    for guess in guesses:
        nodes = _guess_nodes(tree, anchor, guess)
        if len(guess) == n and len(nodes) >= n - 1:
            pool.replace(key, guess, (argmax[anchor],) + tuple(argmax[j] for j in nodes[:n - 1]))


def _target_phrases(pool: PhrasePool, tree: Tree, anchor: int, argmax: list[int]) -> int:
    """Phrases from the rejected part of the draft chain (nodes 1..anchor): from the first node
    whose token is not the target's argmax at its parent, every chain node v gives the phrase
    (argmax after v, then after each following node whose token equals the argmax before it),
    keyed by v's token, when it reaches `phrase_length` tokens. Returns how many were added."""
    n, added = pool.phrase_length, 0
    first = next((j for j in range(1, anchor + 1) if tree.tokens[j] != argmax[tree.parents[j]]), None)
    for v in range(first, anchor + 1) if first is not None else ():
        phrase, node = [], v
        while node is not None and len(phrase) < n:
            phrase.append(argmax[node])
            node = tree.children[node].get(argmax[node])  # along the draft, then the guesses
        if len(phrase) == n:
            pool._insert(tree.tokens[v], tuple(phrase))
            added += 1
    return added


# --- The drafters ---

class _PhraseDrafter(Drafter):
    """Shared by both: one prompt, the pool, the emitted sequence, the target's argmax at every
    node of the last tree forward (`observe`) and the pool counters."""

    trusted = True
    output_ngrams = True  # (b): the verified output's n-grams go to the pool
    target_phrases = 0  # phrases the target's verification added (`PhraseOuroborosDrafter` only)

    def __init__(self, pool: PhrasePool, K: int, W: int):
        self.pool, self.K, self.W = pool, K, W
        self.lookups, self.hits = pool.lookups, pool.hits
        self.drafted = self.verified = 0

    def start(self, draft, tokens, lengths, temperature, source, storage="sequence") -> None:
        if tokens.shape[0] != 1:
            raise ValueError(f"prompts: phrase-pool drafters decode one prompt (batch 1) per call, "
                             f"got batch {tokens.shape[0]}")
        super().start(draft, tokens, lengths, temperature, source, storage)
        self.seq = tokens[0, :int(lengths[0])].tolist()
        self.window = JacobiWindow(self.W, self.pool.phrase_length, self.seq) if self.W else None

    def _draft_tree(self, tree: Tree, device) -> DraftTree:
        """The `Tree` as a node-layout draft tree of point masses (window nodes not verifiable)."""
        self.tree = tree
        tokens, parents, verifiable = tree.tensors(device)
        return DraftTree(tokens, parents, torch.ones_like(verifiable), None, point_mass=True, verifiable=verifiable)

    def observe(self, logits, tree, rows) -> None:
        self.argmax = logits[0].argmax(-1).tolist()  # [N], the target's choice after every node

    def _emit(self, verdict) -> list[int]:
        """Append the accepted tokens and y to the sequence and the output's n-grams to the pool
        (b); returns the accepted node ids."""
        nodes = [int(j) for j in verdict.nodes[0, :int(verdict.tau[0])]]
        before = len(self.seq)
        self.seq += [self.tree.tokens[j] for j in nodes] + [int(verdict.token[0])]
        if self.output_ngrams:
            self.pool.add_ngrams(self.seq[max(0, before - self.pool.phrase_length):])
        return nodes

    def logs(self) -> dict:
        return {"pool_lookups": self.pool.lookups - self.lookups, "pool_hits": self.pool.hits - self.hits,
                "draft_pool_tokens": self.drafted, "verified_pool_tokens": self.verified,
                "pool_phrases": len(self.pool), "target_phrases": self.target_phrases}


class OuroborosDrafter(_PhraseDrafter):
    """Ouroboros, simplified: phrase-by-phrase drafting with the draft model, then the draft plus
    the pool's suffixes keyed by its last token as one tree.

    The drafter of `ouroboros_method` (Zhao et al. 2024, arXiv 2402.13720; phrases cut at L, the K
    newest phrases checked by the draft, the target's continuations inserted as new phrases), one
    iteration:

    1. Draft, phrase by phrase: every draft forward is one tree forward of the draft model holding
       the tokens it has not seen yet, the newest pool phrases keyed by the last token (a trie) and a
       Jacobi window. Walking the trie along the draft's own argmax accepts the longest matching
       phrase prefix, then the draft's argmax after it: one forward yields several draft tokens.
       Repeat until the draft holds `draft_length` tokens.
    2. Verify: ONE target tree forward over [last token, draft, pool phrases keyed by the last draft
       token hung after the draft] (4D float mask, position ids = prefix length + depth); the target
       KV cache keeps the accepted path by a gather.
    3. Fill the pool: the draft's Jacobi window trajectories (a), the n-grams of the verified output
       (b), and the target's own argmax continuations of the pool phrases it just scored (candidate
       refinement, c). The pool object outlives the call (warm start across prompts).

    Differences from the original Ouroboros code (thunlp/Ouroboros, read, not copied):
    - its draft runs full lookahead decoding (2D window: 20 slots x 6 levels, guess set 20) and checks
      pool phrases in the same forward; here the draft forward holds one Jacobi level (`window`
      slots) and the K newest phrases as a trie.
    - its target corrections are n-grams of the target's argmax along a rejected draft suffix and
      refined guesses written over the newest pool entries; here (b) is the n-grams of the committed
      output and (c) inserts the target's continuation of every scored phrase as the newest entry.
    - on full acceptance it keeps the longest matching guess; the T = 0 walk here does the same.
    - it is greedy only; here T > 0 is supported (lossless). Both stop at EOS (here through
      `engine.decode(eos_token_id=...)`).
    - defaults: its gamma 4, window 20, lookahead level 7 (phrases of 6), guess set 20, top-k 3; here
      draft_length 4, window 4, phrase_length 4, max_phrases_per_key 20, num_candidates 3 (small
      trees: CPU forwards cost grows with rows).
    """

    needs_model = True

    def __init__(self, pool: PhrasePool, L: int, K: int, W: int):
        super().__init__(pool, K, W)
        self.L = L

    def start(self, draft, tokens, lengths, temperature, source, storage="sequence") -> None:
        super().start(draft, tokens, lengths, temperature, source, storage)
        self.dcache = DraftSequence(draft, self.seq[:-1])

    def draft(self, rows) -> DraftTree:
        proposal, _, used = _draft(self.dcache, self.seq, self.pool, self.window, self.L, self.K)
        self.drafted += used
        self.draft_rows = self.dcache.rows
        tree, self.anchor = _ouroboros_tree(self.seq[-1], proposal, self.pool, self.K, self.dcache.model.vocab_size)
        return self._draft_tree(tree, rows.last.device)

    def accept(self, tree, verdict) -> None:
        nodes = self._emit(verdict)  # (b) the verified output
        self.verified += sum(1 for j in nodes if j > self.anchor)
        _refine(self.pool, self.tree, self.anchor, self.argmax)  # (c) the target's continuations


class PhraseOuroborosDrafter(_PhraseDrafter):
    """Ouroboros as in the paper: whole-phrase drafting (the chain is at least L tokens; the last
    phrase is not cut), the G newest phrases checked per draft forward, the K newest hung after
    the chain, and the pool refined from the target's verification (rejected-draft phrases,
    in-place guess corrections).

    The drafter of `ouroboros_phrase_method`: Ouroboros phrase by phrase, as the paper's
    Algorithm 1 and the public code (thunlp/Ouroboros, read, not copied) do it, one iteration:

    1. Draft phrase by phrase: each draft forward holds the tokens the draft has not seen, the G
       newest pool phrases keyed by the last token (whole phrases, a trie; the paper's guess set) and
       lookahead decoding's 2D window (W columns, n - 1 levels; `JacobiWindow2D`), whose W
       new n-grams per forward go to the pool. The draft's argmax walks the trie: the longest
       phrase prefix it agrees with plus its argmax after it are drafted, so a forward yields
       1 + (matched) tokens, all of them the draft's greedy continuation. Forwards repeat until the chain holds >= L tokens (gamma); the
       last phrase is not cut, so the chain may reach L + phrase_length - 1 + 1 tokens.
    2. Lengthen and verify: ONE target tree forward over [last token, chain, the K newest phrases
       keyed by the chain's last token as a trie] (the paper's top-k), point-mass verification.
    3. Refine the pool from the target's verification (for later iterations only): (i) from the
       first chain token that is not the target's argmax at its parent, every chain node v gives the
       phrase "target argmax after v, then after each following node whose token equals the argmax
       before it", keyed by v's token (the paper's "generating phrases from verification results");
       (ii) each of the K phrases g hung after the chain is replaced, at its place in the pool, by
       (argmax after the chain, argmax after g_1, ..., after g_{n-1}): one Jacobi step of the target
       on g; (iii) the 2D window's n-grams (step 1), and (unless output_ngrams=False) the verified
       output's n-grams.

    Its reference twin, checked lossless by exact enumeration, is
    `verispec.reference.ouroboros.ouroboros_method`: the drafts are the same function of the context
    and the pool snapshot (tested on every iteration of engine runs). How it still differs from the
    paper and its code:
    - the 2D window is seeded with the context's last tokens and adds phrases from the n-th forward
      on (the code seeds it with random prompt tokens and fills it level by level);
    - the draft checks the G newest phrases (the code: all of the key's guess set, up to 20: the
      same at the default G = 20 and a pool of 20 phrases per key);
    - the phrases of (i) may continue into the pool tails after the chain (the code stops at the
      chain's end); (iii)'s output n-grams are not in the paper (output_ngrams=False drops them);
    - the draft's phrases are checked by the draft's argmax on the trie (the code: one chain per
      phrase);
    - verification: the paper's is greedy (longest prefix equal to the target's argmax); here
      point-mass recursive rejection, identical at T = 0 and lossless at any T > 0;
    - defaults L 4, K 3, G 20, n 6 as the code's (gamma 4, top-k 3, guess set 20, lookahead level
      7), but W 4 (the code: window 20) because CPU forwards cost grows with rows: up to G n + W n - 1
      rows ride in every draft forward (W = 0 or flat_window=True for fewer). EOS stops decoding
      through `engine.decode(eos_token_id=...)`, as in the code.
    """

    needs_model = True

    def __init__(self, pool: PhrasePool, L: int, K: int, W: int, G: int, output_ngrams: bool = True,
                 flat_window: bool = False):
        super().__init__(pool, K, W)
        self.L, self.G, self.output_ngrams, self.flat_window = L, G, output_ngrams, flat_window

    def start(self, draft, tokens, lengths, temperature, source, storage="sequence") -> None:
        super().start(draft, tokens, lengths, temperature, source, storage)
        if self.W and not self.flat_window:
            self.window = JacobiWindow2D(self.W, self.pool.phrase_length, self.seq)
        self.dcache = DraftSequence(draft, self.seq[:-1])

    def draft(self, rows) -> DraftTree:
        chain, _, used = _draft(self.dcache, self.seq, self.pool, self.window, self.L, self.G, whole_phrases=True)
        self.drafted += used
        self.draft_rows = self.dcache.rows
        V, n = self.dcache.model.vocab_size, self.pool.phrase_length
        self.guesses = candidates(self.pool, chain[-1], self.K, n, V)  # point masses, fixed before verification
        tree = Tree()
        self.anchor = tree.add_chain(-1, [self.seq[-1]] + chain)[-1]
        for guess in self.guesses:
            tree.add_path(self.anchor, guess)
        return self._draft_tree(tree, rows.last.device)

    def accept(self, tree, verdict) -> None:
        nodes = self._emit(verdict)
        self.verified += sum(1 for j in nodes if j > self.anchor)
        # the target's verification results refine the pool for LATER iterations only
        self.target_phrases += _target_phrases(self.pool, self.tree, self.anchor, self.argmax)
        _correct_guesses(self.pool, self.tree, self.anchor, self.guesses, self.argmax)


class LookaheadDrafter(_PhraseDrafter):
    """Lookahead-style: the pool's phrases keyed by the last token and a Jacobi window riding in
    the target's own tree forward; no draft model.

    The drafter of `lookahead_method`: a simplified lookahead decoding (Fu et al. 2024, arXiv 2402.02057),
    target only: each target forward holds [last token, the pool phrases keyed by it (verification
    branches), a Jacobi window of W guesses (lookahead branch)]; the window's outputs become the next
    guesses and their trajectories over `phrase_length` steps become pool phrases; the verified
    output's n-grams are added too. Not implemented from the paper: the 2D window of N - 1 levels
    decoded in one forward (here one level; the trajectories are collected over consecutive
    forwards, the window shifting by one slot per forward whatever was accepted), and its custom
    kernels / multi-device lookahead parallelism.
    """

    def draft(self, rows) -> DraftTree:
        tree, self.slots = _lookahead_tree(self.seq[-1], self.pool, self.K, rows.vocab_size, self.window)
        return self._draft_tree(tree, rows.last.device)

    def accept(self, tree, verdict) -> None:
        if self.window is not None:
            self.window.update([self.argmax[j] for j in self.slots], self.pool)
        self.verified += int(verdict.tau[0])
        self._emit(verdict)


# --- The methods ---

def ouroboros_method(pool: PhrasePool | None = None, draft_length: int = 4, num_candidates: int = 3,
                     window: int = 4) -> TorchMethod:
    """Ouroboros (Zhao et al. 2024, arXiv 2402.13720), simplified, as a method of the engine:
    `engine.decode(target, draft, prompt, ouroboros_method(), N, T, uniforms, "sequence")` decodes
    one prompt (B = 1; a batch raises ValueError naming `prompts`).

    See `OuroborosDrafter` for one iteration (phrase-by-phrase drafting
    with the draft model, one target tree forward over the draft plus pool suffixes, point-mass
    verification, pool filling and candidate refinement).

    Args:
        pool: a `PhrasePool` to read and fill (every decode with this method reads and fills it,
            so it stays warm across prompts); None: a fresh `PhrasePool()` per decode call.
        draft_length: L >= 1 draft tokens per iteration (Ouroboros' gamma).
        num_candidates: K >= 1 newest pool phrases tried per lookup (draft side and target side).
        window: W >= 0 Jacobi window slots in every draft forward (0: no draft lookahead).

    Returns:
        `TorchMethod` "ouroboros" (`OuroborosDrafter` + `verifiers.nodes.PointMassTree`); its stats.logs
        hold the pool counters (`_PhraseDrafter.logs`).

    Raises:
        TypeError / ValueError (naming the argument): a pool that is not a `PhrasePool`, L / K < 1,
        W < 0.
    """
    L, K, W = _phrase_args(draft_length, num_candidates, window)
    check_pool(pool)
    return TorchMethod("ouroboros", lambda: OuroborosDrafter(check_pool(pool), L, K, W), PointMassTree(),
                       {"draft_length": L, "num_candidates": K, "window": W})


def ouroboros_phrase_method(pool: PhrasePool | None = None, draft_length: int = 4, num_candidates: int = 3,
                            guess_set: int = 20, window: int = 4, *, output_ngrams: bool = True,
                            flat_window: bool = False, phrase_length: int = 6) -> TorchMethod:
    """Ouroboros (Zhao et al. 2024, arXiv 2402.13720, Algorithm 1 and Section 3) phrase by
    phrase, as a method of the engine (one iteration: `PhraseOuroborosDrafter`); one prompt per
    decode call (B = 1), as `ouroboros_method`. The defaults of phrase_length (6: lookahead level
    7), guess_set (20), draft_length (gamma 4) and num_candidates (top-k 3) are the authors' (the
    public code thunlp/Ouroboros); its window is 20 columns, here 4 (CPU forwards cost grows with
    rows). `engine.decode(eos_token_id=...)` stops at EOS, as theirs does.

    Args:
        pool: a `PhrasePool` of `phrase_length` (warm across calls) or None (a fresh
            `PhrasePool(phrase_length, max(20, guess_set))` per decode call).
        draft_length: L >= 1, the paper's gamma: the draft chain holds at least L tokens and at
            most L + phrase_length (whole phrases).
        num_candidates: K >= 1 newest pool phrases hung after the chain (the paper's top-k).
        guess_set: G >= 1 newest pool phrases the draft model checks in each draft forward (the
            paper's guess set size, 20 there).
        window: W >= 0 columns of lookahead decoding's 2D window in every draft forward, n - 1
            levels deep (n = pool.phrase_length; (W - 1) + W (n - 1) rows); 0: none.
        output_ngrams: also add the verified output's n-grams to the pool (not in the paper).
        flat_window: a one-level window of W slots instead (`ouroboros_method`'s: W rows, each
            phrase formed over n forwards).
        phrase_length: n >= 1 tokens per pool phrase (the lookahead level minus one); a given
            pool must hold phrases of this length.

    Returns:
        `TorchMethod` "ouroboros_phrase" (`PhraseOuroborosDrafter` + `verifiers.nodes.PointMassTree`);
        stats.logs: the pool counters ("target_phrases": phrases the target's verification added).

    Raises:
        TypeError / ValueError: as `ouroboros_method`, and G < 1, n < 1, a pool whose
        phrase_length is not n, or a non-bool output_ngrams / flat_window.
    """
    L, K, W = _phrase_args(draft_length, num_candidates, window)
    G = check_positive(guess_set, "guess_set")
    n = check_positive(phrase_length, "phrase_length")
    if check_pool(pool if pool is not None else PhrasePool(n)).phrase_length != n:
        raise ValueError(f"phrase_length: {n} differs from the pool's phrase_length {pool.phrase_length}")
    for flag, name in ((output_ngrams, "output_ngrams"), (flat_window, "flat_window")):
        if not isinstance(flag, bool):
            raise TypeError(f"{name}: expected a bool, got {type(flag).__name__}")
    return TorchMethod("ouroboros_phrase",
                       lambda: PhraseOuroborosDrafter(PhrasePool(n, max(20, G)) if pool is None else pool, L, K, W, G,
                                                      output_ngrams, flat_window),
                       PointMassTree(),
                       {"draft_length": L, "num_candidates": K, "guess_set": G, "window": W, "phrase_length": n})


def _phrase_args(draft_length, num_candidates, window):
    """(L, K, W) checked: L, K >= 1 and W >= 0."""
    L = check_positive(draft_length, "draft_length")
    K = check_positive(num_candidates, "num_candidates")
    return L, K, check_int(window, "window", 0)


def lookahead_method(pool: PhrasePool | None = None, num_candidates: int = 3, window: int = 4) -> TorchMethod:
    """Lookahead-style decoding without a draft model (after Fu et al. 2024, arXiv 2402.02057), as
    a method of the engine: `engine.decode(target, None, prompt, lookahead_method(), N, T,
    uniforms, "sequence")` decodes one prompt (B = 1; a batch raises ValueError naming `prompts`).

    Every iteration is ONE target tree forward of [last token, the K newest pool phrases keyed by
    it (verification branches, a trie), a Jacobi window of W guesses (lookahead branch, never
    accepted)]; point-mass verification of the branches; the window's argmax outputs become its
    next guesses and, over `pool.phrase_length` forwards, pool phrases; the verified output's
    n-grams are added too. Simplified (see `LookaheadDrafter`): one window
    level per forward.

    Args:
        pool: a `PhrasePool` (kept warm across calls) or None (a fresh one per decode call).
        num_candidates: K >= 1 verification branches. window: W >= 0 lookahead slots.

    Returns:
        `TorchMethod` "lookahead" (`LookaheadDrafter` + `verifiers.nodes.PointMassTree`); stats.logs:
        the pool counters (draft_forwards = 0).

    Raises:
        TypeError / ValueError (naming the argument): a pool that is not a `PhrasePool`, K < 1, W < 0.
    """
    _, K, W = _phrase_args(1, num_candidates, window)
    check_pool(pool)
    return TorchMethod("lookahead", lambda: LookaheadDrafter(check_pool(pool), K, W), PointMassTree(),
                       {"num_candidates": K, "window": W})
