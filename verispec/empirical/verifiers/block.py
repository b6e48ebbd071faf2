"""Block verification (Sun et al. 2024, arXiv 2403.10444), the torch twin of
`verispec.reference.verifiers.block`."""

from __future__ import annotations

import torch

from ..uniforms import bernoulli, categorical
from .common import RuleOutput, accept_probability, chain_probabilities, emit, residual, stop_probability


def block_rule(p: torch.Tensor, q: torch.Tensor, draft: torch.Tensor, uniforms: torch.Tensor,
               validate: bool = True, greedy: bool = False) -> RuleOutput:
    """Block verification on a batch of chains (Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami,
    Suresh 2024, arXiv 2403.10444, Algorithm 2).

    w_0 = 1, w_i = min(1, w_{i-1} p_i(X_i) / q_i(X_i)); h_L = w_L and, for i < L,
    h_i = Z_i / (Z_i + 1 - w_i) with Z_i = sum_x max(w_i p(x|X^i) - q(x|X^i), 0). Uniforms are read
    as in the reference: bernoulli(h_L), bernoulli(h_{L-1}), ... until the first success (tau = that
    i, else 0), then one categorical from p_L (tau = L) or norm(max(w_tau p_tau - q_tau, 0)).

    Args, Returns (`RuleOutput`, path_index 0) and Raises: as `token_rule` (p [B, L+1, V], q [B, L,
    V], draft int [B, L], uniforms [B, >= L+1]); greedy: p is one-hot (T = 0), so each w_i is 0 or
    1 and h_i = w_i (w_i = 0: Z_i = 0): the vocabulary-wide pass for Z is skipped, same output (with
    `validate`, ValueError naming p if p is not one-hot).
    """
    rows, draft, p_x, q_x = chain_probabilities(p, q, draft, uniforms, validate)  # [B], [B, L] x 3
    if validate and greedy and not bool(((p == 0) | (p == 1)).all()):
        raise ValueError("p: greedy=True needs one-hot target distributions (T = 0)")
    B, L = draft.shape
    w = [torch.ones(B, dtype=p.dtype, device=p.device)]
    for i in range(L):
        w.append(accept_probability(p_x[:, i], q_x[:, i], w[i]))
    weights = torch.stack(w, dim=1)  # [B, L+1], w_0..w_L
    h = torch.empty_like(weights)  # [B, L+1], h_1..h_L in columns 1..L
    h[:, L] = weights[:, L]
    if L > 1:
        h[:, 1:L] = weights[:, 1:L] if greedy else stop_probability(p[:, 1:L], q[:, 1:L], weights[:, 1:L])
    h_desc = h[:, 1:].flip(-1)  # [B, L]: h_L, h_{L-1}, ..., h_1
    success = bernoulli(h_desc, uniforms[:, :L])  # [B, L]
    any_success = success.any(-1)  # [B]
    first = success.long().argmax(-1)  # [B], first success among h_L, h_{L-1}, ...
    tau = torch.where(any_success, L - first, torch.zeros_like(first))  # [B]
    at = torch.where(any_success, first + 1, torch.full_like(first, L))  # [B]
    p_tau = p[rows, tau]  # [B, V]
    q_tau = q[rows, tau.clamp(max=L - 1)]  # [B, V]
    dist = torch.where((tau == L).unsqueeze(1), p_tau, residual(p_tau, q_tau, weights[rows, tau]))
    y = categorical(dist, uniforms[rows, at])  # [B]
    return RuleOutput(emit(draft, tau, y), tau, torch.zeros_like(tau), at + 1)


