"""`TorchMethod`: a drafter paired with a verifier, the torch mirror of
`verispec.reference.methods.Method`, and the target-only baseline as one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .drafters import Drafter, RootOnly
from .verifiers.nodes import SampleAndFollow

__all__ = ["TorchMethod", "target_only_method"]


@dataclass(frozen=True)
class TorchMethod:
    """A drafter paired with a verifier (the torch mirror of `verispec.reference.methods.Method`).

    Args:
        name: a label. drafter: a callable returning a fresh `Drafter` (drafters keep per-call
            state: the draft cache, pools). verifier: `verifier(p, tree, source, temperature,
            rows) -> rules.Verdict` with attribute `needs_q` (reads the tree's q).
        params: the parameters it was built with (for reports).
        observe: optional `observe(logits [B, N, V], tree, rows)` called after every target
            forward (diagnostics, e.g. target-only's top-2 logit margins).
    """

    name: str
    drafter: Callable[[], Drafter]
    verifier: Callable
    params: dict = field(default_factory=dict)
    observe: Callable | None = None


def target_only_method() -> TorchMethod:
    """Plain autoregressive decoding as a method (the baseline every method must match): no draft
    (`drafters.RootOnly`: the tree is the root alone), so an iteration is one target forward and
    one draw from p by sample-and-follow (greedy at T = 0, one uniform per token and row at
    T > 0). `decode(target, None, prompts, target_only_method(), N, T)` returns tokens [B, N] and
    stats.logs["top2_margins"] / ["runner_up_tokens"] [B, N] (near-tie diagnostics)."""
    return TorchMethod("target_only", RootOnly, SampleAndFollow())
