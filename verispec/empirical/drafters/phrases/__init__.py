"""Phrase-pool drafting: Ouroboros (with a draft model; a simplified form and the phrase-by-phrase
form of the paper) and a lookahead-style baseline (without).

Each is a method of the engine, built by a factory here and run by
`verispec.empirical.engine.decode(target, draft, prompt, method, N, T, uniforms, "sequence")`
(draft None for lookahead). All decode one prompt (B = 1) and read their drafts from a
`PhrasePool`: phrases of a fixed length keyed by the token they follow, newest first,
least-recently-used entries evicted. The pool is an ordinary object the caller may pass to many
methods, so it stays warm across prompts. The pool counters of a call are in `stats.logs`.

`ouroboros_method` — a simplified Ouroboros (Zhao et al. 2024, arXiv 2402.13720; phrases cut
at L, the K newest phrases checked by the draft, the target's continuations inserted as new
phrases), one iteration:

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

`ouroboros_phrase_method` (`PhraseOuroborosDrafter`) — Ouroboros phrase by phrase, as the
paper's Algorithm 1 and the public code (thunlp/Ouroboros, read, not copied) do it, one iteration:

1. Draft phrase by phrase: each draft forward holds the tokens the draft has not seen, the G
   newest pool phrases keyed by the last token (whole phrases, a trie; the paper's guess set) and
   lookahead decoding's 2D window (W columns, n - 1 levels; `_JacobiWindow2D`), whose W new
   n-grams per forward go to the pool. The draft's argmax walks the trie: the longest phrase prefix it agrees with
   plus its argmax after it are drafted, so a forward yields 1 + (matched) tokens, all of them the
   draft's greedy continuation. Forwards repeat until the chain holds >= L tokens (gamma); the
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
- the draft checks the G newest phrases (the code: all of the key's guess set, up to 20);
- the phrases of (i) may continue into the pool tails after the chain (the code stops at the
  chain's end); (iii)'s output n-grams are not in the paper (output_ngrams=False drops them);
- pool phrases have one length n (PhrasePool.phrase_length, default 4; the code's 6), and the
  draft's phrases are checked by the draft's argmax on the trie (the code: one chain per phrase);
- verification: the paper's is greedy (longest prefix equal to the target's argmax); here
  point-mass recursive rejection, identical at T = 0 and lossless at any T > 0;
- no EOS stop; defaults L 4, K 3, G 8, W 4 (the code: gamma 4, top-k 3, guess set 20, window 20)
  because CPU forwards cost grows with rows: up to G n + W n - 1 rows ride in every draft forward
  (W = 0 or flat_window=True for fewer).

`lookahead_method` — a simplified lookahead decoding (Fu et al. 2024, arXiv 2402.02057),
target only: each target forward holds [last token, the pool phrases keyed by it (verification
branches), a Jacobi window of W guesses (lookahead branch)]; the window's outputs become the next
guesses and their trajectories over `phrase_length` steps become pool phrases; the verified
output's n-grams are added too. Not implemented from the paper: the 2D window of N - 1 levels
decoded in one forward (here one level; the trajectories are collected over consecutive
forwards, the window shifting by one slot per forward whatever was accepted), and its custom
kernels / multi-device lookahead parallelism.

Verification (both; `verispec.empirical.rules.pointmass.point_mass_tree_verify`, re-exported
here). Every candidate token is a deterministic function
of the history (the draft's argmax, pool contents filled from argmaxes and emitted text), so its
draft law is a point mass q = one-hot(x). At each node of the candidate trie, children are tried
in order: x is accepted with probability p'(x) (p' = p at first) and on rejection
p' <- norm(max(p' - one-hot(x), 0)) (x removed, renormalised); if no child is accepted the
correction is drawn from p'; at a leaf the bonus is drawn from p. This is token verification with
one-hot q (the reference `point_mass` method, checked lossless by exact enumeration) applied to
each child in turn, i.e. recursive rejection sampling with a point-mass proposal per child: the
emitted token at every node is an exact draw from p, so the output law is the target's at any
temperature. At T = 0 p is one-hot on the argmax and this is longest-prefix matching with the
argmax as bonus: the output equals target-only greedy decoding token for token. The original
Ouroboros is greedy only; the T > 0 rule is this package's extension.

Differences from the original Ouroboros code (thunlp/Ouroboros, read, not copied):
- its draft runs full lookahead decoding (2D window: 20 slots x 6 levels, guess set 20) and checks
  pool phrases in the same forward; here the draft forward holds one Jacobi level (`window`
  slots) and the K newest phrases as a trie.
- its target corrections are n-grams of the target's argmax along a rejected draft suffix and
  refined guesses written over the newest pool entries; here (b) is the n-grams of the committed
  output and (c) inserts the target's continuation of every scored phrase as the newest entry.
- on full acceptance it keeps the longest matching guess; the T = 0 walk here does the same.
- it stops at EOS and is greedy only; here no EOS stop, and T > 0 is supported (lossless).
- defaults: its gamma 4, window 20, lookahead level 7 (phrases of 6), guess set 20, top-k 3; here
  draft_length 4, window 4, phrase_length 4, max_phrases_per_key 20, num_candidates 3 (small
  trees: CPU forwards cost grows with rows).

Every call generates exactly `max_new_tokens` tokens (no EOS stop).

Modules: pool (`PhrasePool`), tree (one forward's token trie, the draft's one-sequence KV),
windows (the Jacobi windows), drafters (the drafters and the factories of their methods).
"""

from ...verifiers.pointmass import point_mass_tree_verify  # re-exported: the verification
from .drafters import (LookaheadDrafter, OuroborosDrafter, PhraseOuroborosDrafter, lookahead_method,
                       ouroboros_method, ouroboros_phrase_method)
from .pool import PhrasePool

__all__ = ["PhrasePool", "point_mass_tree_verify", "ouroboros_method", "ouroboros_phrase_method",
           "lookahead_method", "OuroborosDrafter", "PhraseOuroborosDrafter", "LookaheadDrafter"]
