"""Torch twins of the reference verification rules, as pure functions on probability tensors.

One module per family, as `verispec.reference.verifiers`: token.py, block.py, gbv.py,
multidraft.py (nss, rrs, rrsw, spectr, sample-and-follow), traversal.py; common.py holds the
shared math and checks; this module the registry (`RULES`, `uniforms_needed`, `verify`).

Every rule here is a deterministic function of (target tables, draft proposal tables, drafted
tokens, uniforms): it returns the emitted tokens and how many uniforms each row consumed. The
math mirrors `verispec.reference.verifiers` line for line, including the order in which uniforms
are read, so that on the same tables, the same draft and the same uniform stream a torch rule and
its reference emit the same tokens (tested in tests/empirical/test_rules_vs_reference.py).
Plumbing (models, KV caches, drafting) lives in `verispec.empirical.engine`, `kv` and `drafters`.

Layouts (float tensors: float64 recommended; B = batch of independent instances):

- chain rules (token, block): ``p [B, L+1, V]`` with ``p[:, i] = p(. | X^i)``, ``q [B, L, V]`` with
  ``q[:, i] = q(. | X^i)``, ``draft [B, L]`` int64.
- tree rules (gbv, nss, rrs, rrsw, spectr, traversal, sample-and-follow): K draft paths per
  instance, ``paths [B, K, L]`` int64; ``p [B, K, L+1, V]`` with ``p[b, k, d] = p(. | path k's
  first d tokens)`` and ``q [B, K, L, V]`` likewise (the law the path's next token was drawn
  from). Rows of paths that share a prefix must hold the same distribution (they are one tree
  node); the rules read the row of the lowest path index through a node. Optional
  ``lengths [B, K]`` in [0, L]: path k uses its first lengths[b, k] tokens only (0 = absent).
- ``uniforms [B, n]``, float in [0, 1), read left to right per row; `uniforms_needed` gives n.

Every rule returns a `RuleOutput`: ``tokens [B, L+1]`` (accepted draft prefix then the correction
or bonus token, padded with -1), ``num_accepted [B]`` (tau), ``path_index [B]`` (a path whose
first tau tokens are the accepted ones) and ``consumed [B]`` (uniforms read).

Uniform conventions (those of `verispec.reference.randomness.Sampler`): bernoulli(p) = u < p;
categorical(probs) = inverse CDF at u; see `verispec.empirical.uniforms`.

Sources: token — Leviathan, Kalman, Matias 2023 (arXiv 2211.17192), Chen et al. 2023
(arXiv 2302.01318); block — Sun et al. 2024 (arXiv 2403.10444); gbv — Thomas & Pal 2026
(arXiv 2602.16961); nss, rrs — SpecInfer, Miao et al. 2024 (arXiv 2305.09781); rrsw — Jeon et
al. 2024 (arXiv 2402.14160); spectr — Sun et al. 2023 (arXiv 2310.15141); traversal — Weng et al.
2025 (arXiv 2505.12398); sample-and-follow — OPT-Tree, Wang et al. 2024 (arXiv 2406.17276).
"""


from .block import block_rule
from .common import RuleOutput, accept_probability, positive_mass, residual, stop_probability
from .gbv import gbv_rule, skewed_proposal
from .multidraft import nss_rule, rrs_rule, rrsw_rule, sample_and_follow_rule, spectr_rho, spectr_rule
from .registry import CHAIN_RULES, RULES, uniforms_needed, verify
from .token import token_rule
from .traversal import traversal_rule

__all__ = [
    "RuleOutput", "residual", "positive_mass", "accept_probability", "stop_probability",
    "skewed_proposal", "spectr_rho", "token_rule", "block_rule", "gbv_rule", "nss_rule", "rrs_rule",
    "rrsw_rule", "spectr_rule", "traversal_rule", "sample_and_follow_rule", "RULES", "CHAIN_RULES",
    "uniforms_needed", "verify",
]
