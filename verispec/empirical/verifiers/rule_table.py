"""The table of the torch rules, read from the method registry (`verispec.reference.registry`):
every path-layout rule by method name (`RULES`), how many uniforms a row can read
(`uniforms_needed`) and one entry point on the tree layout (`verify`).

A registry entry of the chain or multi-path family names its torch rule (``torch_rule``) and its
uniforms budget (``uniforms``); this module only reads them, so a new rule of either family is
one registry entry plus its rule file.
"""

from __future__ import annotations

import inspect
from types import MappingProxyType
from typing import Callable, Mapping

import torch

from ...reference import registry
from .common import RuleOutput, check_tensor
from .multidraft import sample_and_follow_rule

__all__ = ["RULES", "CHAIN_RULES", "SAMPLE_AND_FOLLOW", "takes", "uniforms_needed", "verify"]

#: The rule of the tree methods (opt_tree and the static trees) on the path layout; not a method name.
SAMPLE_AND_FOLLOW = "sample_and_follow"


def _rules(families: tuple) -> Mapping[str, Callable[..., RuleOutput]]:
    """{method name: its path-layout torch rule} of the registry entries of `families` that declare one."""
    return MappingProxyType({name: registry.resolve_factory(entry.torch_rule)
                             for name, entry in registry.REGISTRY.items()
                             if entry.family in families and entry.torch_rule is not None})


#: Chain rules, on [B, L+1, V] / [B, L, V] / [B, L] (the registry's chain family).
CHAIN_RULES: Mapping[str, Callable[..., RuleOutput]] = _rules((registry.CHAIN,))

#: Every path-layout rule by method name (the registry's chain and multi-path families), and
#: "sample_and_follow", the verifier of the reference's tree methods (opt_tree, kary, ...).
RULES: Mapping[str, Callable[..., RuleOutput]] = MappingProxyType(
    {**_rules((registry.CHAIN, registry.MULTI_PATH)), SAMPLE_AND_FOLLOW: sample_and_follow_rule})


def _budget(name: str) -> Callable[[int, int], int]:
    """The uniforms budget ``(L, K) -> int`` of rule `name`: its registry entry's."""
    if name == SAMPLE_AND_FOLLOW:  # the tree family's rule: one uniform per node on the walk
        return registry.one_per_node
    return registry.spec(name).uniforms


def takes(name: str, keyword: str) -> bool:
    """True when rule `name` takes `keyword`: per-path ``lengths`` (a rule without it needs
    full-length paths), or ``greedy`` (block's shortcut at T = 0)."""
    return keyword in inspect.signature(RULES[name]).parameters


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
    return _budget(name)(L, K)


def verify(name: str, p: torch.Tensor, q: torch.Tensor, paths: torch.Tensor, uniforms: torch.Tensor,
           lengths: torch.Tensor | None = None, validate: bool = True) -> RuleOutput:
    """Run rule `name` on the tree layout (p [B, K, L+1, V], q [B, K, L, V], paths [B, K, L]).

    Chain rules (token, block) read path 0 only; a rule without a ``lengths`` parameter (gbv)
    needs full-length paths (`lengths` None or all L).

    Raises:
        ValueError: unknown name, `lengths` given to a rule that does not take it, or bad input.
    """
    if name not in RULES:
        raise ValueError(f"name: unknown rule {name!r}; known: {', '.join(RULES)}")
    chain = name in CHAIN_RULES
    if chain or not takes(name, "lengths"):
        if lengths is not None and bool((lengths != paths.shape[-1]).any()):
            raise ValueError(f"lengths: rule {name!r} needs full-length paths")
        if not chain:
            return RULES[name](p, q, paths, uniforms, validate)
        check_tensor(p, "p", 4, "float")
        check_tensor(q, "q", 4, "float")
        check_tensor(paths, "paths", 3, "int")
        return CHAIN_RULES[name](p[:, 0], q[:, 0], paths[:, 0], uniforms, validate)
    return RULES[name](p, q, paths, uniforms, lengths, validate)
