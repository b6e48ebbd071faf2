"""Token-level speculative sampling (Leviathan, Kalman, Matias 2023, arXiv 2211.17192; Chen et al.
2023, arXiv 2302.01318), the torch twin of `verispec.reference.verifiers.token`."""

from __future__ import annotations

import torch

from ..uniforms import bernoulli, categorical
from .common import RuleOutput, accept_probability, chain_probabilities, emit, residual


def token_rule(p: torch.Tensor, q: torch.Tensor, draft: torch.Tensor, uniforms: torch.Tensor,
               validate: bool = True) -> RuleOutput:
    """Token-level speculative sampling on a batch of chains (Leviathan et al. 2023,
    arXiv 2211.17192, Algorithm 1; Chen et al. 2023, arXiv 2302.01318).

    For i = 1..L accept X_i with probability min(1, p_i(X_i) / q_i(X_i)) (one uniform each, until
    the first rejection); then one categorical: norm(max(p_tau - q_tau, 0)) after a rejection,
    p_{L+1} (bonus) if all were accepted. Uniforms read: tau + 2 if tau < L, else L + 1.

    Args:
        p: [B, L+1, V] target distributions along the draft. q: [B, L, V] proposals.
        draft: int [B, L] drafted tokens. uniforms: [B, >= L+1] in [0, 1).
        validate: check shapes, ranges and that rows are distributions.

    Returns:
        `RuleOutput` (path_index is 0).

    Raises:
        TypeError: non-tensors or wrong dtypes. ValueError: bad shapes (named), probabilities not
        summing to 1, out-of-range ids or uniforms, too few uniforms.
    """
    rows, draft, p_x, q_x = chain_probabilities(p, q, draft, uniforms, validate)  # [B], [B, L] x 3
    B, L = draft.shape
    ok = bernoulli(accept_probability(p_x, q_x), uniforms[:, :L])  # [B, L]
    tau = ok.long().cumprod(-1).sum(-1)  # [B], accepted before the first rejection
    p_tau = p[rows, tau]  # [B, V]
    q_tau = q[rows, tau.clamp(max=L - 1)]  # [B, V]
    dist = torch.where((tau < L).unsqueeze(1), residual(p_tau, q_tau), p_tau)  # [B, V]
    at = (tau + 1).clamp(max=L)  # [B], index of the categorical's uniform
    y = categorical(dist, uniforms[rows, at])  # [B]
    return RuleOutput(emit(draft, tau, y), tau, torch.zeros_like(tau), at + 1)


