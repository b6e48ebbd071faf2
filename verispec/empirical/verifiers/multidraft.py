"""Top-down one-step multi-draft rules: NSS and RRS (SpecInfer, Miao et al. 2024, arXiv 2305.09781),
RRS without replacement (Jeon et al. 2024, arXiv 2402.14160), SpecTr (Sun et al. 2023,
arXiv 2310.15141) and sample-and-follow (OPT-Tree, Wang et al. 2024, arXiv 2406.17276); torch twins
of `verispec.reference.verifiers.multidraft` / `tree`."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import torch

from ...reference.deprecation import renamed_keywords
from ..uniforms import bernoulli, categorical
from .common import RuleOutput, check_tree, Cursor, emit, first_true, accept_probability, residual


def _nss_step(p, q, tokens, drafting, cursor, rows_mask):
    """Naive sampling: Y ~ p (one uniform)."""
    return categorical(p, cursor.take(rows_mask))


def _rrs_like_step(p, q, tokens, drafting, cursor, rows_mask, without_replacement):
    """SpecInfer recursive rejection sampling (arXiv 2305.09781, Algorithm 2); without replacement
    (arXiv 2402.14160), rejected drafts also leave q."""
    B, K = tokens.shape
    rows = torch.arange(B, device=p.device)
    current, proposal = p, q
    decided = torch.zeros(B, dtype=torch.bool, device=p.device)
    y = torch.zeros(B, dtype=torch.long, device=p.device)
    for k in range(K):
        active = rows_mask & drafting[:, k] & ~decided  # [B]
        x = tokens[:, k]  # [B]
        a = accept_probability(current[rows, x], proposal[rows, x])  # [B]
        accepted = active & bernoulli(a, cursor.take(active))
        y = torch.where(accepted, x, y)
        decided = decided | accepted
        rejected = (active & ~accepted).unsqueeze(1)  # [B, 1]
        current = torch.where(rejected, residual(current, proposal), current)
        if without_replacement:
            zeroed = proposal.scatter(1, x.unsqueeze(1), 0.0)  # [B, V]
            mass = zeroed.sum(-1, keepdim=True)
            zeroed = torch.where(mass > 0, zeroed / torch.where(mass > 0, mass, 1), zeroed)
            proposal = torch.where(rejected, zeroed, proposal)
    rest = rows_mask & ~decided
    return torch.where(rest, categorical(current, cursor.take(rest)), y)


_rrs_step = partial(_rrs_like_step, without_replacement=False)
_rrsw_step = partial(_rrs_like_step, without_replacement=True)


@renamed_keywords(num_drafts="num_paths")
def spectr_rho(p: torch.Tensor, q: torch.Tensor, num_paths) -> torch.Tensor:
    """rho [B] (dtype of p) in [1, K] with 1 - (1 - beta(rho))^K = rho beta(rho), beta(rho) = sum
    min(q, p/rho), for p, q [B, V] and num_paths: K of each row (int or [B] tensor, >= 1).

    Vectorised bisection with the reference's iterates (200 steps at most, each row stopping when
    hi - lo <= 1e-15) returning the upper end, where f <= 0 (SpecTr K-SEQ, arXiv 2310.15141).
    """
    B = p.shape[0]
    K = torch.as_tensor(num_paths, dtype=p.dtype, device=p.device).expand(B).clamp(min=1)  # [B]

    def f(rho, p, q, K):  # rho [b] -> [b]
        beta = torch.minimum(q, p / rho.unsqueeze(-1)).sum(-1)
        return 1 - (1 - beta) ** K - rho * beta

    trivial = (K == 1) | (f(torch.ones_like(K), p, q, K) <= 0)  # [B]: rho = 1
    rho = torch.ones_like(K)
    todo = (~trivial).nonzero().squeeze(1)  # bisect only the rows that need it, once per
    if todo.numel():                        # distinct (p, q, K), as the reference memoises
        rows = torch.cat([p[todo], q[todo], K[todo].unsqueeze(1)], dim=1)  # [b, 2V + 1]
        distinct, inverse = torch.unique(rows, dim=0, return_inverse=True)
        V = p.shape[1]
        p, q, K = distinct[:, :V], distinct[:, V:2 * V], distinct[:, 2 * V]
        lo, hi = torch.ones_like(K), K.clone()
        frozen = torch.zeros_like(K, dtype=torch.bool)
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            down = f(mid, p, q, K) <= 0
            hi = torch.where(~frozen & down, mid, hi)
            lo = torch.where(~frozen & ~down, mid, lo)
            frozen = frozen | (hi - lo <= 1e-15)
            if bool(frozen.all()):
                break
        rho = rho.index_copy(0, todo, hi[inverse])
    return rho


def _spectr_step(p, q, tokens, drafting, cursor, rows_mask):
    """K-SEQ: accept x_k w.p. min(1, p(x_k) / (rho q(x_k))) in order, else the residual."""
    B, K = tokens.shape
    rows = torch.arange(B, device=p.device)
    num = drafting.sum(-1).to(p.dtype)  # [B], drafts at this node
    rho = spectr_rho(p, q, num)  # [B]
    decided = torch.zeros(B, dtype=torch.bool, device=p.device)
    y = torch.zeros(B, dtype=torch.long, device=p.device)
    for k in range(K):
        active = rows_mask & drafting[:, k] & ~decided
        x = tokens[:, k]
        q_x = q[rows, x]
        a = (p[rows, x] / (rho * torch.where(q_x == 0, 1, q_x))).clamp(max=1.0)
        accepted = active & bernoulli(a, cursor.take(active))
        y = torch.where(accepted, x, y)
        decided = decided | accepted
    accepted_mass = torch.minimum(q, p / rho.unsqueeze(-1))  # [B, V], min(p/rho, q)
    beta = accepted_mass.sum(-1)  # [B]
    safe_beta = torch.where(beta > 0, beta, 1).unsqueeze(-1)
    scaled = accepted_mass * (1 - (1 - beta) ** num).unsqueeze(-1) / safe_beta  # [B, V]
    dist = torch.where((beta > 0).unsqueeze(-1), residual(p, scaled), p)
    rest = rows_mask & ~decided
    return torch.where(rest, categorical(dist, cursor.take(rest)), y)


@dataclass(frozen=True)
class _OneStep:
    """A top-down rule: its `step` at one node, (p_d, q_d, tokens, drafting, cursor, rows_mask) -> y
    [B], and `needed(L, K)`: the uniforms one row can read."""
    step: Callable
    needed: Callable


def _top_down(rule: _OneStep, p, q, paths, uniforms, lengths, validate) -> RuleOutput:
    """Apply a one-step rule at each node from the root down (reference `top_down`)."""
    lengths = check_tree(p, q, paths, uniforms, lengths, rule.needed, validate)
    B, K, L = paths.shape
    rows = torch.arange(B, device=p.device)
    paths = paths.long()
    cursor = Cursor(uniforms)
    alive = torch.ones(B, K, dtype=torch.bool, device=p.device)  # paths through the current node
    done = torch.zeros(B, dtype=torch.bool, device=p.device)
    tau, last, path_index = (torch.zeros(B, dtype=torch.long, device=p.device) for _ in range(3))  # [B] each
    for d in range(L + 1):
        active = ~done
        node = first_true(alive)  # [B]
        p_d = p[rows, node, d]  # [B, V]
        drafting = alive & (lengths > d) & active.unsqueeze(1)  # [B, K], paths with a child here
        has_children = drafting.any(-1)
        stop = active & ~has_children  # a leaf: y is the bonus token
        y = categorical(p_d, cursor.take(stop)) if bool(stop.any()) else last
        inner = active & has_children
        if d < L and bool(inner.any()):  # rows read their own uniforms: leaves and inner nodes commute
            tokens = paths[:, :, d]  # [B, K]
            y_inner = rule.step(p_d, q[rows, first_true(drafting), d], tokens, drafting, cursor, inner)  # [B]
            matched = drafting & (tokens == y_inner.unsqueeze(1))  # [B, K]
            enter = inner & matched.any(-1)
            stop = stop | (inner & ~enter)  # y is the correction token
            y = torch.where(inner, y_inner, y)
            alive = torch.where(enter.unsqueeze(1), matched, alive)
        last = torch.where(stop, y, last)
        tau = torch.where(stop, torch.full_like(tau, d), tau)
        path_index = torch.where(stop, node, path_index)
        done = done | stop
    prefix = paths[rows, path_index]  # [B, L]
    return RuleOutput(emit(prefix, tau, last), tau, path_index, cursor.pos)


def top_down_needed(L, K):
    """Uniforms one row of a top-down multi-draft rule (nss, rrs, rrsw, spectr) can read: L levels of
    K + 1 draws, then the bonus token."""
    return L * (K + 1) + 1


def _one_per_node(L, K):
    return L + 1


_NSS = _OneStep(_nss_step, _one_per_node)
_RRS = _OneStep(_rrs_step, top_down_needed)
_RRSW = _OneStep(_rrsw_step, top_down_needed)
_SPECTR = _OneStep(_spectr_step, top_down_needed)


def nss_rule(p, q, paths, uniforms, lengths=None, validate: bool = True) -> RuleOutput:
    """Naive multi-draft sampling (SpecInfer, Miao et al. 2024, arXiv 2305.09781): at each node
    Y ~ p; enter the drafted child equal to Y, else Y is the correction token; bonus at a leaf.
    Uniforms read: one per node visited (at most L + 1).

    Args: as `rrs_rule`, with uniforms [B, >= L+1] (q unused, validated). Returns / Raises: as
    `gbv_rule`.
    """
    return _top_down(_NSS, p, q, paths, uniforms, lengths, validate)


def sample_and_follow_rule(p, q, paths, uniforms, lengths=None, validate: bool = True) -> RuleOutput:
    """Sample-and-follow tree verification (OPT-Tree, Wang et al. 2024, arXiv 2406.17276): draw
    Y ~ p at each node and follow the drafted child equal to Y. On a tree given as paths this
    draws exactly as `nss_rule` (the reference's `sample_and_follow`)."""
    return _top_down(_NSS, p, q, paths, uniforms, lengths, validate)


def rrs_rule(p, q, paths, uniforms, lengths=None, validate: bool = True) -> RuleOutput:
    """Recursive rejection sampling (SpecInfer, Miao et al. 2024, arXiv 2305.09781, Algorithm 2)
    top-down over the tree of K i.i.d. paths.

    At a node with drafts x_1..x_k (one per path through it, path order, duplicates kept): p' = p;
    accept x_j w.p. min(1, p'(x_j) / q(x_j)) (one uniform each), else p' <- norm(max(p' - q, 0));
    if none is accepted Y ~ p' (one uniform). Uniforms: at most L (K + 1) + 1.

    Args:
        p: [B, K, L+1, V]. q: [B, K, L, V]. paths: int [B, K, L]. uniforms: [B, >= L(K+1)+1].
        lengths: optional int [B, K] in [0, L]. validate: check inputs.

    Returns `RuleOutput`; raises TypeError / ValueError as `gbv_rule`.
    """
    return _top_down(_RRS, p, q, paths, uniforms, lengths, validate)


def rrsw_rule(p, q, paths, uniforms, lengths=None, validate: bool = True) -> RuleOutput:
    """RRS without replacement (Jeon et al. 2024, arXiv 2402.14160; Sequoia): as `rrs_rule`, but
    after rejecting x_j also set q(x_j) = 0 and renormalise q. Drafts: K paths whose first tokens
    are distinct draws without replacement. Args / Returns / Raises: as `rrs_rule`."""
    return _top_down(_RRSW, p, q, paths, uniforms, lengths, validate)


def spectr_rule(p, q, paths, uniforms, lengths=None, validate: bool = True) -> RuleOutput:
    """SpecTr K-SEQ (Sun et al. 2023, arXiv 2310.15141, Algorithm 3) top-down over the tree of K
    i.i.d. paths; at a node with k drafts, rho solves 1 - (1 - beta)^k = rho beta (`spectr_rho`),
    x_j is accepted w.p. min(1, p(x_j) / (rho q(x_j))) in order, else
    Y ~ norm(max(p - min(p/rho, q) (1 - (1 - beta)^k) / beta, 0)).
    Args / Returns / Raises: as `rrs_rule`."""
    return _top_down(_SPECTR, p, q, paths, uniforms, lengths, validate)


