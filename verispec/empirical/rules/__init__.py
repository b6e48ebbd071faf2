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


from __future__ import annotations

from typing import Callable

import torch

from .block import block_rule
# _representatives is re-exported for drafters.py (the K paths' distinct nodes); _Cursor for older imports.
from .common import (RuleOutput, _check_tensor, _Cursor, _representatives, accept_probability,  # noqa: F401
                     positive_mass, residual, stop_probability)
from .gbv import gbv_rule, skewed_proposal
from .multidraft import _top_down_needed, nss_rule, rrs_rule, rrsw_rule, sample_and_follow_rule, spectr_rho, spectr_rule
from .token import token_rule
from .traversal import traversal_rule

__all__ = [
    "RuleOutput", "residual", "positive_mass", "accept_probability", "stop_probability",
    "skewed_proposal", "spectr_rho", "token_rule", "block_rule", "gbv_rule", "nss_rule", "rrs_rule",
    "rrsw_rule", "spectr_rule", "traversal_rule", "sample_and_follow_rule", "RULES", "CHAIN_RULES",
    "uniforms_needed", "verify",
]


#: Chain rules, on [B, L+1, V] / [B, L, V] / [B, L].
CHAIN_RULES: dict[str, Callable[..., RuleOutput]] = {"token": token_rule, "block": block_rule}

#: Every rule by method name (names of `verispec.reference.methods`; "sample_and_follow" is the
#: verifier of the reference's opt_tree method).
RULES: dict[str, Callable[..., RuleOutput]] = {
    "token": token_rule, "block": block_rule, "gbv": gbv_rule, "nss": nss_rule, "rrs": rrs_rule,
    "rrsw": rrsw_rule, "spectr": spectr_rule, "traversal": traversal_rule,
    "sample_and_follow": sample_and_follow_rule,
}


def uniforms_needed(name: str, draft_length: int, num_paths: int = 1) -> int:
    """The most uniforms one row of rule `name` can read for draft length L and K paths.

    Raises:
        ValueError: unknown name, or L / K < 1.
    """
    if name not in RULES:
        raise ValueError(f"name: unknown rule {name!r}; known: {', '.join(RULES)}")
    L, K = int(draft_length), int(num_paths)
    if L < 1:
        raise ValueError(f"draft_length: must be >= 1, got {draft_length}")
    if K < 1:
        raise ValueError(f"num_paths: must be >= 1, got {num_paths}")
    if name in ("token", "block", "gbv", "nss", "sample_and_follow"):
        return L + 1
    if name == "traversal":
        return K * L + 2
    return _top_down_needed(L, K)


def verify(name: str, p: torch.Tensor, q: torch.Tensor, paths: torch.Tensor, uniforms: torch.Tensor,
           lengths: torch.Tensor | None = None, validate: bool = True) -> RuleOutput:
    """Run rule `name` on the tree layout (p [B, K, L+1, V], q [B, K, L, V], paths [B, K, L]).

    Chain rules (token, block) read path 0 only; gbv ignores `lengths` (must be None).

    Raises:
        ValueError: unknown name, `lengths` given to a rule that does not take it, or bad input.
    """
    if name not in RULES:
        raise ValueError(f"name: unknown rule {name!r}; known: {', '.join(RULES)}")
    if name in CHAIN_RULES or name == "gbv":
        if lengths is not None and bool((lengths != paths.shape[-1]).any()):
            raise ValueError(f"lengths: rule {name!r} needs full-length paths")
        if name == "gbv":
            return gbv_rule(p, q, paths, uniforms, validate)
        _check_tensor(p, "p", 4, "float")
        _check_tensor(q, "q", 4, "float")
        _check_tensor(paths, "paths", 3, "int")
        return CHAIN_RULES[name](p[:, 0], q[:, 0], paths[:, 0], uniforms, validate)
    return RULES[name](p, q, paths, uniforms, lengths, validate)
