"""The table of the torch rules: every rule by method name (`RULES`), how many uniforms a row
can read (`uniforms_needed`) and one entry point on the tree layout (`verify`)."""

from __future__ import annotations

from typing import Callable

import torch

from .block import block_rule
from .common import RuleOutput, check_tensor
from .gbv import gbv_rule
from .multidraft import nss_rule, rrs_rule, rrsw_rule, sample_and_follow_rule, spectr_rule, top_down_needed
from .token import token_rule
from .traversal import traversal_rule

__all__ = ["RULES", "CHAIN_RULES", "uniforms_needed", "verify"]


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
    return top_down_needed(L, K)


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
        check_tensor(p, "p", 4, "float")
        check_tensor(q, "q", 4, "float")
        check_tensor(paths, "paths", 3, "int")
        return CHAIN_RULES[name](p[:, 0], q[:, 0], paths[:, 0], uniforms, validate)
    return RULES[name](p, q, paths, uniforms, lengths, validate)
