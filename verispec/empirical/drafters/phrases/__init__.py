"""Phrase-pool drafting: Ouroboros (with a draft model; a simplified form and the phrase-by-phrase
form of the paper, Zhao et al. 2024, arXiv 2402.13720) and a lookahead-style baseline (without;
after Fu et al. 2024, arXiv 2402.02057).

Each is a method of the engine, built by a factory here (`ouroboros_method`,
`ouroboros_phrase_method`, `lookahead_method`) and run by
`verispec.empirical.engine.decode(target, draft, prompt, method, N, T, uniforms, "sequence")`
(draft None for lookahead). All decode one prompt (B = 1), generate `max_new_tokens` tokens
(fewer with `decode(eos_token_id=...)`: a stop at EOS) and read their drafts from a `PhrasePool`: phrases of a fixed length keyed by
the token they follow, newest first, least-recently-used entries evicted. The pool is an ordinary
object the caller may pass to many methods, so it stays warm across prompts; the pool counters of
a call are in `stats.logs`. One iteration of each: `OuroborosDrafter`, `PhraseOuroborosDrafter`,
`LookaheadDrafter`.

Verification (all; `point_mass_tree_verify`, re-exported here from
`verispec.empirical.verifiers.pointmass`): every candidate token is a deterministic function of the
history, so its draft law is a point mass; children of the candidate trie are tried in turn by
recursive rejection with one-hot proposals, so the output law is the target's at any temperature.
At T = 0 this is longest-prefix matching with the argmax as bonus: the output equals target-only
greedy decoding token for token. The original Ouroboros is greedy only; T > 0 is this package's
extension.

Modules: pool (`PhrasePool`), token_tree (one forward's token trie, the draft's one-sequence KV),
windows (the Jacobi windows), phrase_drafters (the drafters and the factories of their methods).
"""

from ...verifiers.pointmass import point_mass_tree_verify  # re-exported: the verification
from .phrase_drafters import (LookaheadDrafter, OuroborosDrafter, PhraseOuroborosDrafter, lookahead_method,
                       ouroboros_method, ouroboros_phrase_method)
from .pool import PhrasePool

__all__ = ["PhrasePool", "point_mass_tree_verify", "ouroboros_method", "ouroboros_phrase_method",
           "lookahead_method", "OuroborosDrafter", "PhraseOuroborosDrafter", "LookaheadDrafter"]
