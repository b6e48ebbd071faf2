"""Torch twins of the reference verification rules, as pure functions on probability tensors.

Every rule here is a deterministic function of (target tables, draft proposal tables, drafted
tokens, uniforms): it returns the emitted tokens and how many uniforms each row consumed. The
math mirrors `verispec.reference.verifiers` line for line, including the order in which uniforms
are read, so that on the same tables, the same draft and the same uniform stream a torch rule and
its reference emit the same tokens (tested in tests/empirical/test_rules_vs_reference.py).
Plumbing (models, KV caches, drafting) lives in `verispec.empirical.decode`.

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

from typing import Callable, NamedTuple

import torch

from .uniforms import bernoulli, categorical

__all__ = [
    "RuleOutput", "residual", "positive_mass", "accept_probability", "stop_probability",
    "skewed_proposal", "spectr_rho", "token_rule", "block_rule", "gbv_rule", "nss_rule", "rrs_rule",
    "rrsw_rule", "spectr_rule", "traversal_rule", "sample_and_follow_rule", "RULES", "CHAIN_RULES",
    "uniforms_needed", "verify",
]


class RuleOutput(NamedTuple):
    """What one verification emits, per row.

    Attributes:
        tokens: int64 [B, L+1]: X_1..X_tau then the correction/bonus token; -1 after it.
        num_accepted: int64 [B]: tau, the number of accepted draft tokens.
        path_index: int64 [B]: a draft path whose first tau tokens were accepted (0 for chains).
        consumed: int64 [B]: how many uniforms of the row were read.
    """

    tokens: torch.Tensor
    num_accepted: torch.Tensor
    path_index: torch.Tensor
    consumed: torch.Tensor


# ----------------------------------------------------------------------------------------------
# Shared math (elementwise / along the last axis); mirrors verispec.reference.probability
# ----------------------------------------------------------------------------------------------

def residual(p: torch.Tensor, q: torch.Tensor, weight=1.0) -> torch.Tensor:
    """norm(max(weight * p - q, 0)) along the last axis; `p` where that mass is 0.

    Args:
        p, q: [..., V]. weight: scalar or [...] tensor.

    Returns:
        [..., V], the correction law of speculative sampling (weight 1, arXiv 2211.17192) and of
        block verification (weight w_tau, arXiv 2403.10444).
    """
    if isinstance(weight, torch.Tensor):
        weight = weight.unsqueeze(-1)  # [..., 1]
    excess = (weight * p - q).clamp(min=0)  # [..., V]
    total = excess.sum(-1, keepdim=True)  # [..., 1]
    return torch.where(total > 0, excess / torch.where(total > 0, total, 1), p)


def positive_mass(p: torch.Tensor, q: torch.Tensor, weight=1.0) -> torch.Tensor:
    """sum_x max(weight * p(x) - q(x), 0) -> [...] for p, q [..., V]."""
    if isinstance(weight, torch.Tensor):
        weight = weight.unsqueeze(-1)
    return (weight * p - q).clamp(min=0).sum(-1)


def accept_probability(p_x: torch.Tensor, q_x: torch.Tensor, weight=1.0) -> torch.Tensor:
    """min(1, weight * p(x) / q(x)) elementwise; where q(x) == 0: 1 if p(x) > 0 else 0."""
    safe = torch.where(q_x == 0, torch.ones_like(q_x), q_x)
    ratio = (weight * p_x / safe).clamp(max=1.0)
    return torch.where(q_x == 0, (p_x > 0).to(p_x.dtype), ratio)


def stop_probability(p_next: torch.Tensor, q_next: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """h = Z / (Z + 1 - w), Z = positive_mass(p_next, q_next, w); exactly 1 where w == 1 or 0/0.

    Args:
        p_next, q_next: [..., V] the distributions at the *next* position. w: [...].
    """
    z = positive_mass(p_next, q_next, w)  # [...]
    denominator = z + (1 - w)
    h = z / torch.where(denominator == 0, torch.ones_like(denominator), denominator)
    return torch.where((w == 1) | (denominator == 0), torch.ones_like(h), h)


def _gather_last(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """t[..., index[...]]: t [..., V], index [...] -> [...]."""
    return t.gather(-1, index.unsqueeze(-1)).squeeze(-1)


class _Cursor:
    """Per-row read position into uniforms [B, n]; `take(active)` reads one uniform per row and
    advances only the active rows (so each row consumes exactly the draws its reference makes)."""

    def __init__(self, uniforms: torch.Tensor):
        self.u = uniforms  # [B, n]
        self.pos = torch.zeros(uniforms.shape[0], dtype=torch.long, device=uniforms.device)  # [B]

    def take(self, active: torch.Tensor) -> torch.Tensor:
        index = self.pos.clamp(max=self.u.shape[1] - 1)  # [B]
        value = self.u.gather(1, index.unsqueeze(1)).squeeze(1)  # [B]
        self.pos = self.pos + active.long()
        return value


# ----------------------------------------------------------------------------------------------
# Input checks (public boundary)
# ----------------------------------------------------------------------------------------------

_SUM_TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4}


def _check_tensor(t, name, ndim, dtype_kind):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(t.shape)}")
    if dtype_kind == "float" and not t.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor, got {t.dtype}")
    if dtype_kind == "int" and (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool):
        raise TypeError(f"{name}: expected an integer tensor of token ids, got {t.dtype}")


def _check_probs(t: torch.Tensor, name: str, used: torch.Tensor | None = None) -> None:
    """Finite, non-negative rows summing to 1 (tolerance by dtype) where `used` [...] is True."""
    if t.numel() == 0:
        raise ValueError(f"{name}: empty tensor")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name}: contains NaN or inf")
    if bool((t < 0).any()):
        raise ValueError(f"{name}: negative probability")
    tol = _SUM_TOLERANCE.get(t.dtype, 1e-2)
    bad = (t.sum(-1, dtype=torch.float64) - 1).abs() > tol  # [...]
    if used is not None:
        bad = bad & used
    if bool(bad.any()):
        raise ValueError(f"{name}: probability rows must sum to 1 (tolerance {tol:g} for {t.dtype})")


def _check_uniforms(uniforms, B, needed, device):
    _check_tensor(uniforms, "uniforms", 2, "float")
    if uniforms.shape[0] != B:
        raise ValueError(f"uniforms: expected {B} rows (the batch), got {uniforms.shape[0]}")
    if uniforms.shape[1] < needed:
        raise ValueError(f"uniforms: need at least {needed} per row, got {uniforms.shape[1]}")
    if uniforms.device != device:
        raise ValueError(f"uniforms: on {uniforms.device}, tables on {device}")
    if bool(((uniforms < 0) | (uniforms >= 1) | torch.isnan(uniforms)).any()):
        raise ValueError("uniforms: values must lie in [0, 1)")


def _check_chain(p, q, draft, uniforms, validate):
    _check_tensor(p, "p", 3, "float")
    _check_tensor(q, "q", 3, "float")
    _check_tensor(draft, "draft", 2, "int")
    B, L = draft.shape
    if L < 1:
        raise ValueError("draft: draft_length must be >= 1")
    V = p.shape[-1]
    if tuple(p.shape) != (B, L + 1, V):
        raise ValueError(f"p: expected shape [B={B}, L+1={L + 1}, V], got {tuple(p.shape)}")
    if tuple(q.shape) != (B, L, V):
        raise ValueError(f"q: expected shape [B={B}, L={L}, V={V}] (vocab mismatch?), got {tuple(q.shape)}")
    if q.dtype != p.dtype or q.device != p.device or draft.device != p.device:
        raise ValueError("q: p, q and draft must share dtype and device")
    _check_uniforms(uniforms, B, L + 1, p.device)
    if validate:
        _check_probs(p, "p")
        _check_probs(q, "q")
        if bool(((draft < 0) | (draft >= V)).any()):
            raise ValueError(f"draft: token ids must lie in [0, {V})")


def _check_tree(p, q, paths, uniforms, lengths, needed_fn, validate):
    _check_tensor(p, "p", 4, "float")
    _check_tensor(q, "q", 4, "float")
    _check_tensor(paths, "paths", 3, "int")
    B, K, L = paths.shape
    if K < 1:
        raise ValueError("paths: num_paths must be >= 1")
    if L < 1:
        raise ValueError("paths: draft_length must be >= 1")
    V = p.shape[-1]
    if tuple(p.shape) != (B, K, L + 1, V):
        raise ValueError(f"p: expected shape [B={B}, K={K}, L+1={L + 1}, V], got {tuple(p.shape)}")
    if tuple(q.shape) != (B, K, L, V):
        raise ValueError(f"q: expected shape [B={B}, K={K}, L={L}, V={V}] (vocab mismatch?), got {tuple(q.shape)}")
    if q.dtype != p.dtype or q.device != p.device or paths.device != p.device:
        raise ValueError("q: p, q and paths must share dtype and device")
    if lengths is None:
        lengths = torch.full((B, K), L, dtype=torch.long, device=p.device)
    else:
        _check_tensor(lengths, "lengths", 2, "int")
        if tuple(lengths.shape) != (B, K):
            raise ValueError(f"lengths: expected shape [B={B}, K={K}], got {tuple(lengths.shape)}")
        if bool(((lengths < 0) | (lengths > L)).any()):
            raise ValueError(f"lengths: must lie in [0, {L}]")
        lengths = lengths.to(device=p.device, dtype=torch.long)
    _check_uniforms(uniforms, B, needed_fn(L, K), p.device)
    if validate:
        depth = torch.arange(L + 1, device=p.device)
        _check_probs(p, "p", depth <= lengths.unsqueeze(-1))  # rows read: d <= lengths
        _check_probs(q, "q", depth[:L] < lengths.unsqueeze(-1))
        used = depth[:L] < lengths.unsqueeze(-1)
        if bool((((paths < 0) | (paths >= V)) & used).any()):
            raise ValueError(f"paths: token ids must lie in [0, {V})")
    return lengths


def _emit(prefix: torch.Tensor, tau: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """[B, L+1] rows: prefix[:tau], y, then -1. prefix [B, L], tau [B], y [B]."""
    B, L = prefix.shape
    position = torch.arange(L + 1, device=prefix.device)  # [L+1]
    padded = torch.cat([prefix, prefix.new_full((B, 1), -1)], dim=1)  # [B, L+1]
    out = torch.where(position < tau.unsqueeze(1), padded, torch.full_like(padded, -1))
    return torch.where(position == tau.unsqueeze(1), y.unsqueeze(1), out)


# ----------------------------------------------------------------------------------------------
# Chain rules
# ----------------------------------------------------------------------------------------------

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
    _check_chain(p, q, draft, uniforms, validate)
    B, L = draft.shape
    rows = torch.arange(B, device=p.device)
    draft = draft.long()
    p_x = _gather_last(p[:, :L], draft)  # [B, L]
    q_x = _gather_last(q, draft)  # [B, L]
    ok = bernoulli(accept_probability(p_x, q_x), uniforms[:, :L])  # [B, L]
    tau = ok.long().cumprod(-1).sum(-1)  # [B], accepted before the first rejection
    p_tau = p[rows, tau]  # [B, V]
    q_tau = q[rows, tau.clamp(max=L - 1)]  # [B, V]
    dist = torch.where((tau < L).unsqueeze(1), residual(p_tau, q_tau), p_tau)  # [B, V]
    at = (tau + 1).clamp(max=L)  # [B], index of the categorical's uniform
    y = categorical(dist, uniforms[rows, at])  # [B]
    return RuleOutput(_emit(draft, tau, y), tau, torch.zeros_like(tau), at + 1)


def block_rule(p: torch.Tensor, q: torch.Tensor, draft: torch.Tensor, uniforms: torch.Tensor,
               validate: bool = True) -> RuleOutput:
    """Block verification on a batch of chains (Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami,
    Suresh 2024, arXiv 2403.10444, Algorithm 2).

    w_0 = 1, w_i = min(1, w_{i-1} p_i(X_i) / q_i(X_i)); h_L = w_L and, for i < L,
    h_i = Z_i / (Z_i + 1 - w_i) with Z_i = sum_x max(w_i p(x|X^i) - q(x|X^i), 0). Uniforms are read
    as in the reference: bernoulli(h_L), bernoulli(h_{L-1}), ... until the first success (tau = that
    i, else 0), then one categorical from p_L (tau = L) or norm(max(w_tau p_tau - q_tau, 0)).

    Args:
        p: [B, L+1, V]. q: [B, L, V]. draft: int [B, L]. uniforms: [B, >= L+1]. validate: as
        `token_rule`.

    Returns:
        `RuleOutput` (path_index is 0).

    Raises:
        TypeError / ValueError: as `token_rule`.
    """
    _check_chain(p, q, draft, uniforms, validate)
    B, L = draft.shape
    rows = torch.arange(B, device=p.device)
    draft = draft.long()
    p_x = _gather_last(p[:, :L], draft)  # [B, L]
    q_x = _gather_last(q, draft)  # [B, L]
    w = [torch.ones(B, dtype=p.dtype, device=p.device)]
    for i in range(L):
        w.append(accept_probability(p_x[:, i], q_x[:, i], w[i]))
    weights = torch.stack(w, dim=1)  # [B, L+1], w_0..w_L
    h = torch.empty_like(weights)  # [B, L+1], h_1..h_L in columns 1..L
    h[:, L] = weights[:, L]
    if L > 1:
        h[:, 1:L] = stop_probability(p[:, 1:L], q[:, 1:L], weights[:, 1:L])
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
    return RuleOutput(_emit(draft, tau, y), tau, torch.zeros_like(tau), at + 1)


# ----------------------------------------------------------------------------------------------
# GBV
# ----------------------------------------------------------------------------------------------

def _rank(p: torch.Tensor, q: torch.Tensor):
    """Tokens ranked by r(t) = p(t)/q(t) ascending (inf where q = 0), ties by token id.

    Returns (order [B, V] token ids in rank order, position [B, V] rank of each token,
    below [B, V] q-mass of the tokens ranked strictly below each token)."""
    r = torch.where(q == 0, torch.full_like(q, float("inf")), p / torch.where(q == 0, 1, q))  # [B, V]
    order = torch.sort(r, dim=-1, stable=True).indices  # [B, V]
    V = q.shape[-1]
    position = torch.empty_like(order).scatter_(-1, order, torch.arange(V, device=q.device).expand_as(order))
    q_sorted = q.gather(-1, order)  # [B, V]
    exclusive = torch.cat([torch.zeros_like(q_sorted[:, :1]), q_sorted.cumsum(-1)[:, :-1]], dim=-1)  # [B, V]
    below = torch.empty_like(q).scatter_(-1, order, exclusive)  # [B, V]
    return order, position, below


def skewed_proposal(p: torch.Tensor, q: torch.Tensor, A: torch.Tensor, x: torch.Tensor,
                    num_paths: int, below: torch.Tensor | None = None) -> torch.Tensor:
    """q_skew(. | u) of the best of K i.i.d. paths at node u (Thomas & Pal 2026, arXiv 2602.16961).

    q_skew(t) ∝ (A + y(t) + z(t))^K - (A + y(t))^K with y(t) = x * (q-mass ranked below t),
    z(t) = x q(t), evaluated stably as q(t) sum_{i<K} a^i b^(K-1-i), a = (A + y + z)/(A + x),
    b = (A + y)/(A + x).

    Args:
        p, q: [B, V] target and draft at u. A: [B] mass of full paths ranked below every path
        through u. x: [B] joint draft probability of u. num_paths: K >= 1.
        below: [B, V] optional precomputed q-mass below each token (from the ranking).

    Returns:
        [B, V] normalised skewed proposal.
    """
    if below is None:
        below = _rank(p, q)[2]
    A, x = A.unsqueeze(-1), x.unsqueeze(-1)  # [B, 1]
    scale = A + x
    a = (A + x * (below + q)) / scale  # [B, V]
    b = (A + x * below) / scale  # [B, V]
    total = torch.zeros_like(q)
    for i in range(num_paths):
        total = total + a ** i * b ** (num_paths - 1 - i)
    weights = q * total  # [B, V]
    return weights / weights.sum(-1, keepdim=True)


def gbv_rule(p: torch.Tensor, q: torch.Tensor, paths: torch.Tensor, uniforms: torch.Tensor,
             validate: bool = True) -> RuleOutput:
    """Greedy multi-path block verification, GBV (Thomas & Pal 2026, arXiv 2602.16961).

    Descend from the root to the drafted child of highest rank r(t) = p(t)/q(t) (ties by id),
    which selects X*, the lexicographic maximum of the K i.i.d. drafted paths; collect the skewed
    proposal of the best-of-K path at each node; run `block_rule` on X* with q replaced by q_skew.
    K = 1 is exactly block verification. Uniforms read: as `block_rule` (at most L + 1).

    Args:
        p: [B, K, L+1, V]. q: [B, K, L, V]. paths: int [B, K, L] (all of length L; K i.i.d.
        paths from q). uniforms: [B, >= L+1]. validate: check inputs.

    Returns:
        `RuleOutput`; path_index is the lowest index of a path equal to X*.

    Raises:
        TypeError / ValueError: as `token_rule`, for the tree layout.
    """
    _check_tree(p, q, paths, uniforms, None, lambda L, K: L + 1, validate)
    B, K, L = paths.shape
    rows = torch.arange(B, device=p.device)
    paths = paths.long()
    A = torch.zeros(B, dtype=p.dtype, device=p.device)
    x = torch.ones(B, dtype=p.dtype, device=p.device)
    alive = torch.ones(B, K, dtype=torch.bool, device=p.device)  # paths through the current node
    skews = []
    for d in range(L):
        node = alive.long().argmax(-1)  # [B], lowest path through the node
        p_d, q_d = p[rows, node, d], q[rows, node, d]  # [B, V]
        _, position, below = _rank(p_d, q_d)
        skews.append(skewed_proposal(p_d, q_d, A, x, K, below))
        tokens = paths[:, :, d]  # [B, K]
        rank = torch.where(alive, position.gather(-1, tokens), torch.full_like(tokens, -1))  # [B, K]
        best = tokens.gather(1, rank.argmax(-1, keepdim=True)).squeeze(1)  # [B]
        A = A + x * below[rows, best]
        x = x * q_d[rows, best]
        alive = alive & (tokens == best.unsqueeze(1))
    k_star = alive.long().argmax(-1)  # [B]
    out = block_rule(p[rows, k_star], torch.stack(skews, dim=1), paths[rows, k_star], uniforms, validate=False)
    return out._replace(path_index=k_star)


# ----------------------------------------------------------------------------------------------
# Top-down one-step multi-draft rules (nss, rrs, rrsw, spectr, sample-and-follow)
# ----------------------------------------------------------------------------------------------

def _nss_step(p, q, tokens, drafting, cursor, rows_mask):
    """Naive sampling: Y ~ p (one uniform)."""
    return categorical(p, cursor.take(rows_mask))


def _rrs_like_step(p, q, tokens, drafting, cursor, rows_mask, without_replacement):
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


def _rrs_step(p, q, tokens, drafting, cursor, rows_mask):
    """SpecInfer recursive rejection sampling (arXiv 2305.09781, Algorithm 2)."""
    return _rrs_like_step(p, q, tokens, drafting, cursor, rows_mask, False)


def _rrsw_step(p, q, tokens, drafting, cursor, rows_mask):
    """RRS without replacement (arXiv 2402.14160): rejected drafts leave q."""
    return _rrs_like_step(p, q, tokens, drafting, cursor, rows_mask, True)


def spectr_rho(p: torch.Tensor, q: torch.Tensor, num_drafts) -> torch.Tensor:
    """rho in [1, K] with 1 - (1 - beta(rho))^K = rho beta(rho), beta(rho) = sum min(q, p/rho).

    Vectorised bisection with the reference's iterates (200 steps at most, each row stopping when
    hi - lo <= 1e-15) returning the upper end, where f <= 0 (SpecTr K-SEQ, arXiv 2310.15141).

    Args:
        p, q: [B, V]. num_drafts: int or [B] tensor, K of each row (>= 1).

    Returns:
        [B] rho, dtype of p.
    """
    B = p.shape[0]
    K = torch.as_tensor(num_drafts, dtype=p.dtype, device=p.device).expand(B).clamp(min=1)  # [B]

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


def _first_true(mask: torch.Tensor) -> torch.Tensor:
    """Index of the first True along the last axis (0 if none): [B, K] -> [B]."""
    return mask.long().argmax(-1)


def _top_down(step: Callable, p, q, paths, uniforms, lengths, validate, needed_fn) -> RuleOutput:
    """Apply a one-step rule at each node from the root down (reference `top_down`)."""
    lengths = _check_tree(p, q, paths, uniforms, lengths, needed_fn, validate)
    B, K, L = paths.shape
    rows = torch.arange(B, device=p.device)
    paths = paths.long()
    cursor = _Cursor(uniforms)
    alive = torch.ones(B, K, dtype=torch.bool, device=p.device)  # paths through the current node
    done = torch.zeros(B, dtype=torch.bool, device=p.device)
    tau = torch.zeros(B, dtype=torch.long, device=p.device)
    last = torch.zeros(B, dtype=torch.long, device=p.device)
    path_index = torch.zeros(B, dtype=torch.long, device=p.device)
    for d in range(L + 1):
        active = ~done
        node = _first_true(alive)  # [B]
        p_d = p[rows, node, d]  # [B, V]
        drafting = alive & (lengths > d) & active.unsqueeze(1)  # [B, K], paths with a child here
        has_children = drafting.any(-1)
        leaf = active & ~has_children
        if bool(leaf.any()):  # bonus token
            y = categorical(p_d, cursor.take(leaf))
            last = torch.where(leaf, y, last)
            tau = torch.where(leaf, torch.full_like(tau, d), tau)
            path_index = torch.where(leaf, node, path_index)
            done = done | leaf
        inner = active & has_children
        if d == L or not bool(inner.any()):
            continue
        q_d = q[rows, _first_true(drafting), d]  # [B, V]
        tokens = paths[:, :, d]  # [B, K]
        y = step(p_d, q_d, tokens, drafting, cursor, inner)  # [B]
        matched = drafting & (tokens == y.unsqueeze(1))  # [B, K]
        enter = inner & matched.any(-1)
        stop = inner & ~enter  # y is the correction token
        last = torch.where(stop, y, last)
        tau = torch.where(stop, torch.full_like(tau, d), tau)
        path_index = torch.where(stop, node, path_index)
        done = done | stop
        alive = torch.where(enter.unsqueeze(1), matched, alive)
    prefix = paths[rows, path_index]  # [B, L]
    return RuleOutput(_emit(prefix, tau, last), tau, path_index, cursor.pos)


def _top_down_needed(L, K):
    return L * (K + 1) + 1


def _one_per_node(L, K):
    return L + 1


def nss_rule(p, q, paths, uniforms, lengths=None, validate: bool = True) -> RuleOutput:
    """Naive multi-draft sampling (SpecInfer, Miao et al. 2024, arXiv 2305.09781): at each node
    Y ~ p; enter the drafted child equal to Y, else Y is the correction token; bonus at a leaf.
    Uniforms read: one per node visited (at most L + 1).

    Args:
        p: [B, K, L+1, V]. q: [B, K, L, V] (unused, validated). paths: int [B, K, L].
        uniforms: [B, >= L+1]. lengths: optional int [B, K]. validate: check inputs.

    Returns / Raises: see `gbv_rule`.
    """
    return _top_down(_nss_step, p, q, paths, uniforms, lengths, validate, _one_per_node)


def sample_and_follow_rule(p, q, paths, uniforms, lengths=None, validate: bool = True) -> RuleOutput:
    """Sample-and-follow tree verification (OPT-Tree, Wang et al. 2024, arXiv 2406.17276): draw
    Y ~ p at each node and follow the drafted child equal to Y. On a tree given as paths this
    draws exactly as `nss_rule` (the reference's `sample_and_follow`)."""
    return _top_down(_nss_step, p, q, paths, uniforms, lengths, validate, _one_per_node)


def rrs_rule(p, q, paths, uniforms, lengths=None, validate: bool = True) -> RuleOutput:
    """Recursive rejection sampling (SpecInfer, Miao et al. 2024, arXiv 2305.09781, Algorithm 2)
    top-down over the tree of K i.i.d. paths.

    At a node with drafts x_1..x_k (one per path through it, path order, duplicates kept): p' = p;
    accept x_j w.p. min(1, p'(x_j) / q(x_j)) (one uniform each), else p' <- norm(max(p' - q, 0));
    if none is accepted Y ~ p' (one uniform). Uniforms: at most L (K + 1) + 1.

    Args:
        p: [B, K, L+1, V]. q: [B, K, L, V]. paths: int [B, K, L]. uniforms: [B, >= L(K+1)+1].
        lengths: optional int [B, K] in [0, L]. validate: check inputs.

    Returns:
        `RuleOutput`.

    Raises:
        TypeError / ValueError: as `gbv_rule`.
    """
    return _top_down(_rrs_step, p, q, paths, uniforms, lengths, validate, _top_down_needed)


def rrsw_rule(p, q, paths, uniforms, lengths=None, validate: bool = True) -> RuleOutput:
    """RRS without replacement (Jeon et al. 2024, arXiv 2402.14160; Sequoia): as `rrs_rule`, but
    after rejecting x_j also set q(x_j) = 0 and renormalise q. Drafts: K paths whose first tokens
    are distinct draws without replacement. Args / Returns / Raises: as `rrs_rule`."""
    return _top_down(_rrsw_step, p, q, paths, uniforms, lengths, validate, _top_down_needed)


def spectr_rule(p, q, paths, uniforms, lengths=None, validate: bool = True) -> RuleOutput:
    """SpecTr K-SEQ (Sun et al. 2023, arXiv 2310.15141, Algorithm 3) top-down over the tree of K
    i.i.d. paths; at a node with k drafts, rho solves 1 - (1 - beta)^k = rho beta (`spectr_rho`),
    x_j is accepted w.p. min(1, p(x_j) / (rho q(x_j))) in order, else
    Y ~ norm(max(p - min(p/rho, q) (1 - (1 - beta)^k) / beta, 0)).
    Args / Returns / Raises: as `rrs_rule`."""
    return _top_down(_spectr_step, p, q, paths, uniforms, lengths, validate, _top_down_needed)


# ----------------------------------------------------------------------------------------------
# Traversal verification
# ----------------------------------------------------------------------------------------------

def _representatives(paths: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """rep [B, K, L+1]: the lowest path index k' with lengths[k'] >= d sharing path k's first d
    tokens (the node id of position (k, d)); only meaningful where d <= lengths[k]."""
    B, K, L = paths.shape
    same_token = paths.unsqueeze(2) == paths.unsqueeze(1)  # [B, K, K', L]
    same_prefix = torch.cat([torch.ones_like(same_token[..., :1]), same_token.long().cumprod(-1).bool()], -1)
    depth = torch.arange(L + 1, device=paths.device)
    long_enough = (lengths.unsqueeze(-1) >= depth).unsqueeze(1)  # [B, 1, K', L+1]
    candidate = torch.arange(K, device=paths.device).view(1, 1, K, 1)
    # min over k' of k' where it shares the prefix (K otherwise; position (k, d) itself always
    # qualifies when d <= lengths[k]).
    return torch.where(same_prefix & long_enough, candidate, K).amin(2).clamp(max=K - 1)  # [B, K, L+1]


def _euler_events(rep: torch.Tensor, lengths: torch.Tensor):
    """The reference's DFS (children in order of first appearance) as a per-row event list.

    Returns (k [B, E], d [B, E], is_exit [B, E], valid [B, E]) sorted so that every row lists
    'enter u' before u's subtree and 'exit u' after it; invalid (non-node) events come last.
    """
    B, K, L1 = rep.shape
    L = L1 - 1
    device = rep.device
    depth = torch.arange(L1, device=device)
    kk = torch.arange(K, device=device).view(1, K, 1)
    is_node = (rep == kk) & (depth <= lengths.unsqueeze(-1))  # [B, K, L+1]
    # Digits of position (k, d) along its root path: rep[k, j] + 1 for j = 1..d; then 0 (enter)
    # or K + 1 (exit) below; one last digit orders enter before exit of a leaf at depth L.
    anc = rep[:, :, 1:] + 1  # [B, K, L]
    below = depth[1:].view(1, 1, L) > depth.view(1, L1, 1)  # [1, L+1 (d), L (j)]: j > d
    digits_enter = torch.where(below, torch.zeros_like(anc).unsqueeze(2), anc.unsqueeze(2))  # [B, K, L+1, L]
    digits_exit = torch.where(below, torch.full_like(anc, K + 1).unsqueeze(2), anc.unsqueeze(2))
    tie = torch.zeros(B, K, L1, 1, dtype=torch.long, device=device)
    enter = torch.cat([digits_enter, tie], -1)  # [B, K, L+1, L+1]
    exit_ = torch.cat([digits_exit, tie + 1], -1)
    digits = torch.stack([enter, exit_], dim=3)  # [B, K, L+1, 2, L+1]
    valid = is_node.unsqueeze(-1).expand(B, K, L1, 2)  # [B, K, L+1, 2]
    digits = torch.where(valid.unsqueeze(-1), digits, torch.full_like(digits, K + 2))
    E = K * L1 * 2
    digits = digits.reshape(B, E, L1)
    base = K + 3
    if L1 * (base - 1).bit_length() <= 62:  # one int64 key per event
        weights = base ** torch.arange(L1 - 1, -1, -1, device=device)  # [L+1]
        order = torch.sort((digits * weights).sum(-1), dim=1, stable=True).indices  # [B, E]
    else:  # least significant digit first: a stable radix sort
        order = torch.arange(E, device=device).expand(B, E)
        for j in range(L1 - 1, -1, -1):
            key = digits[:, :, j].gather(1, order)
            order = order.gather(1, torch.sort(key, dim=1, stable=True).indices)
    k_of = torch.arange(K, device=device).view(K, 1, 1).expand(K, L1, 2).reshape(E)
    d_of = depth.view(1, L1, 1).expand(K, L1, 2).reshape(E)
    x_of = torch.tensor([0, 1], device=device).view(1, 1, 2).expand(K, L1, 2).reshape(E)
    return k_of[order], d_of[order], x_of[order].bool(), valid.reshape(B, E).gather(1, order)


def traversal_rule(p, q, paths, uniforms, lengths=None, validate: bool = True) -> RuleOutput:
    """Traversal verification (Weng et al. 2025, arXiv 2505.12398), bottom-up over the draft tree.

    Mirrors the reference recursion: a DFS with children in order of first appearance among the
    paths; entering child c of v sets w(c) = min(1, w(v) p_v(c) / q_v(c)) from v's current state;
    leaving a node reads one uniform and accepts it w.p. w (then one more uniform draws the next
    token from its current p); a rejected child c updates its parent: p_v <- norm(max(w p_v - q_v,
    0)), w(v) <- S / (S + 1 - w(v)), q_v <- q_v with c zeroed and renormalised. The root keeps
    w = 1 and is always accepted. On a chain this is block verification. Uniforms read: at most
    (number of nodes) + 1 <= K L + 2.

    Args:
        p: [B, K, L+1, V]. q: [B, K, L, V]. paths: int [B, K, L]. uniforms: [B, >= K L + 2].
        lengths: optional int [B, K] in [0, L]. validate: check inputs.

    Returns / Raises: as `rrs_rule`.
    """
    lengths = _check_tree(p, q, paths, uniforms, lengths, lambda L, K: K * L + 2, validate)
    B, K, L = paths.shape
    V = p.shape[-1]
    L1 = L + 1
    rows = torch.arange(B, device=p.device)
    paths = paths.long()
    rep = _representatives(paths, lengths)  # [B, K, L+1]
    ev_k, ev_d, ev_exit, ev_valid = _euler_events(rep, lengths)  # [B, E] each
    num_events = int(ev_valid.sum(-1).max())
    P = p.reshape(B, K * L1, V).clone()  # current p of node (k, d) at row k * L1 + d
    Q = q.reshape(B, K * L, V).clone()  # current q of node (k, d), d < L, at row k * L + d
    W = torch.ones(B, K * L1, dtype=p.dtype, device=p.device)
    # Per-event indices, all [B, E]: the node's own row, its parent's rows, the token into it.
    dm1 = (ev_d - 1).clamp(min=0)
    parent = rep.reshape(B, K * L1).gather(1, ev_k * L1 + dm1)
    paths_pad = torch.cat([paths, paths.new_zeros(B, K, 1)], -1).reshape(B, K * L1)  # [B, K(L+1)]
    ev_token = paths_pad.gather(1, ev_k * L1 + dm1)
    ev_me, ev_pp, ev_pq = ev_k * L1 + ev_d, parent * L1 + dm1, parent * L + dm1.clamp(max=L - 1)

    def rows_of(table, index):  # table [B, R, V], index [B] -> [B, V]
        return table.gather(1, index.view(B, 1, 1).expand(B, 1, V)).squeeze(1)

    def put(table, index, value):  # table[b, index[b]] = value[b]
        table.scatter_(1, index.view(B, 1, 1).expand(B, 1, V), value.unsqueeze(1))

    cursor = _Cursor(uniforms)
    done = torch.zeros(B, dtype=torch.bool, device=p.device)
    tau = torch.zeros(B, dtype=torch.long, device=p.device)
    last = torch.zeros(B, dtype=torch.long, device=p.device)
    path_index = torch.zeros(B, dtype=torch.long, device=p.device)
    for e in range(num_events):
        k, d, is_exit, token = ev_k[:, e], ev_d[:, e], ev_exit[:, e], ev_token[:, e]  # [B]
        me, pp, pq = ev_me[:, e:e + 1], ev_pp[:, e], ev_pq[:, e]
        active = ev_valid[:, e] & ~done
        w_me = W.gather(1, me).squeeze(1)  # [B]
        enter = active & ~is_exit & (d >= 1)
        leave = active & is_exit
        if bool(enter.any()):  # entering (k, d): its weight from the parent's current state
            p_parent, q_parent, w_parent = rows_of(P, pp), rows_of(Q, pq), W.gather(1, pp.unsqueeze(1)).squeeze(1)
            w_new = accept_probability(_gather_last(p_parent, token), _gather_last(q_parent, token), w_parent)
            W.scatter_(1, me, torch.where(enter, w_new, w_me).unsqueeze(1))
        if not bool(leave.any()):
            continue
        # Leaving (k, d): accept its root path w.p. w, then draw the next token from its current p.
        accepted = leave & bernoulli(w_me, cursor.take(leave))
        if bool(accepted.any()):
            y = categorical(rows_of(P, me.squeeze(1)), cursor.take(accepted))
            last = torch.where(accepted, y, last)
            tau = torch.where(accepted, d, tau)
            path_index = torch.where(accepted, k, path_index)
            done = done | accepted
        rejected = leave & ~accepted & (d >= 1)
        if bool(rejected.any()):  # the subtree of (k, d) was rejected: update its parent
            p_parent, q_parent, w_parent = rows_of(P, pp), rows_of(Q, pq), W.gather(1, pp.unsqueeze(1)).squeeze(1)
            r = rejected.unsqueeze(1)
            new_p = residual(p_parent, q_parent, w_parent)
            new_w = stop_probability(p_parent, q_parent, w_parent)
            new_q = q_parent.scatter(1, token.unsqueeze(1), 0.0)
            mass = new_q.sum(-1, keepdim=True)
            new_q = torch.where(mass > 0, new_q / torch.where(mass > 0, mass, 1), new_q)
            put(P, pp, torch.where(r, new_p, p_parent))
            put(Q, pq, torch.where(r, new_q, q_parent))
            W.scatter_(1, pp.unsqueeze(1), torch.where(rejected, new_w, w_parent).unsqueeze(1))
    prefix = paths[rows, path_index]  # [B, L]
    return RuleOutput(_emit(prefix, tau, last), tau, path_index, cursor.pos)


# ----------------------------------------------------------------------------------------------
# Registry
# ----------------------------------------------------------------------------------------------

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
