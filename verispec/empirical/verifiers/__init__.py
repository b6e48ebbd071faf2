"""Torch twins of the reference verification rules, as pure functions on probability tensors.

One module per family, as `verispec.reference.verifiers`: token, block, gbv, multidraft (nss,
rrs, rrsw, spectr, sample-and-follow), traversal; common (shared math, checks, `RuleOutput`),
rule_table (`RULES`, `uniforms_needed`, `verify`); the engine's verifiers on draft trees: nodes
(`PathRule`, `SampleAndFollow`, `PointMassTree`), sample_and_follow, pointmass, multistep
(`TopDownSelection`: khisti, optimal_is, spechub, hu_greedy; one-step rules in importance, spechub).

Every rule is a deterministic function of (target tables, draft proposal tables, drafted tokens,
uniforms); its math mirrors `verispec.reference.verifiers` line for line, including the order in
which uniforms are read, so a torch rule and its reference emit the same tokens.

Layouts (float64 recommended; B = batch): chain rules (token, block): ``p [B, L+1, V]``, ``q [B,
L, V]``, ``draft [B, L]`` int64. Tree rules: K draft paths ``paths [B, K, L]`` int64, ``p [B, K,
L+1, V]`` with ``p[b, k, d] = p(. | path k's first d tokens)``, ``q [B, K, L, V]`` likewise; rows
of paths sharing a prefix must match (one tree node; the lowest path index is read); optional
``lengths [B, K]`` in [0, L]. ``uniforms [B, n]`` in [0, 1), n = `uniforms_needed`. Every rule
returns a `RuleOutput` (tokens [B, L+1], tau [B], path_index [B], consumed [B]).
Uniforms as `verispec.reference.randomness.Sampler`: bernoulli(p) = u < p, categorical = inverse CDF.
Sources (paper, arXiv id, algorithm): each rule's docstring.
"""


from .block import block_rule
from .common import RuleOutput, accept_probability, positive_mass, residual, stop_probability
from .gbv import gbv_rule, skewed_proposal
from .multidraft import nss_rule, rrs_rule, rrsw_rule, sample_and_follow_rule, spectr_rho, spectr_rule
from .rule_table import CHAIN_RULES, RULES, uniforms_needed, verify
from .token import token_rule
from .traversal import traversal_rule

__all__ = [
    "RuleOutput", "residual", "positive_mass", "accept_probability", "stop_probability",
    "skewed_proposal", "spectr_rho", "token_rule", "block_rule", "gbv_rule", "nss_rule", "rrs_rule",
    "rrsw_rule", "spectr_rule", "traversal_rule", "sample_and_follow_rule", "RULES", "CHAIN_RULES",
    "uniforms_needed", "verify",
]
