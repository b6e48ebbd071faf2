"""Shared pieces of the torch rules: the output type, residual/acceptance math (mirrors
`verispec.reference.probability`), the uniform cursor and the input checks."""

from __future__ import annotations

from typing import NamedTuple

import torch

from ...reference.deprecation import deprecated


class RuleOutput(NamedTuple):
    """What one verification emits, per row.

    Attributes:
        tokens: int64 [B, L+1]: X_1..X_tau then the correction/bonus token; -1 after it.
        tau: int64 [B]: the accepted length, the number of accepted draft tokens (`num_accepted`:
            its deprecated name).
        path_index: int64 [B]: a draft path whose first tau tokens were accepted (0 for chains).
        consumed: int64 [B]: how many uniforms of the row were read.
    """

    tokens: torch.Tensor
    tau: torch.Tensor
    path_index: torch.Tensor
    consumed: torch.Tensor

    @property
    def num_accepted(self) -> torch.Tensor:
        """Deprecated alias of `tau`."""
        deprecated("RuleOutput.num_accepted", "RuleOutput.tau")
        return self.tau


# --- Shared math (elementwise / along the last axis); mirrors verispec.reference.probability ---

def residual(p: torch.Tensor, q: torch.Tensor, weight=1.0) -> torch.Tensor:
    """norm(max(weight * p - q, 0)) [..., V] along the last axis of p, q [..., V] (weight: scalar or
    [...]), `p` where that mass is 0: the correction law of speculative sampling (weight 1, arXiv
    2211.17192) and of block verification (weight w_tau, arXiv 2403.10444)."""
    excess = _excess(p, q, weight)  # [..., V]
    total = excess.sum(-1, keepdim=True)  # [..., 1]
    positive = total > 0  # [..., 1]; where not, the law falls back to p (reads no value back)
    return torch.where(positive, excess.div_(torch.where(positive, total, 1)), p)


def positive_mass(p: torch.Tensor, q: torch.Tensor, weight=1.0) -> torch.Tensor:
    """sum_x max(weight * p(x) - q(x), 0) -> [...] for p, q [..., V]."""
    return _excess(p, q, weight).sum(-1)


def _excess(p: torch.Tensor, q: torch.Tensor, weight) -> torch.Tensor:
    """max(weight * p - q, 0) [..., V] (weight: scalar or [...]) as one fresh tensor, clamped in
    place: these are vocabulary-wide passes on the verifier's hot path (1 * p == p exactly)."""
    if isinstance(weight, torch.Tensor):
        diff = weight.unsqueeze(-1) * p - q
    else:
        diff = p - q if type(weight) in (int, float) and weight == 1 else weight * p - q
    return diff.clamp_(min=0)


def accept_probability(p_x: torch.Tensor, q_x: torch.Tensor, weight=1.0) -> torch.Tensor:
    """min(1, weight * p(x) / q(x)) elementwise; where q(x) == 0: 1 if p(x) > 0 else 0."""
    safe = torch.where(q_x == 0, torch.ones_like(q_x), q_x)
    ratio = (weight * p_x / safe).clamp(max=1.0)
    return torch.where(q_x == 0, (p_x > 0).to(p_x.dtype), ratio)


def stop_probability(p_next: torch.Tensor, q_next: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """h [...] = Z / (Z + 1 - w), Z = positive_mass(p_next, q_next, w); exactly 1 where w == 1 or 0/0.
    p_next, q_next: [..., V] the distributions at the *next* position; w: [...]."""
    z = positive_mass(p_next, q_next, w)  # [...]
    denominator = z + (1 - w)
    h = z / torch.where(denominator == 0, torch.ones_like(denominator), denominator)
    return torch.where((w == 1) | (denominator == 0), torch.ones_like(h), h)


# --- Helpers shared by the rule modules ---

def gather_last(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """t[..., index[...]]: t [..., V], index [...] -> [...] (every rule reads p(x), q(x) this way)."""
    return t.gather(-1, index.unsqueeze(-1)).squeeze(-1)


class Cursor:
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


# --- Input checks (public boundary) ---

_SUM_TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4}


def check_tensor(t, name, ndim, dtype_kind):
    """TypeError / ValueError naming `name` unless t is a tensor of `ndim` dims and dtype kind
    "float" or "int" (shared by every rule's boundary check and `verify`)."""
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


def _check_uniforms(uniforms, B, needed, device, validate: bool = True):
    """Shapes and device; with `validate`, the values too (reading them back: a host sync)."""
    check_tensor(uniforms, "uniforms", 2, "float")
    if uniforms.shape[0] != B:
        raise ValueError(f"uniforms: expected {B} rows (the batch), got {uniforms.shape[0]}")
    if uniforms.shape[1] < needed:
        raise ValueError(f"uniforms: need at least {needed} per row, got {uniforms.shape[1]}")
    if uniforms.device != device:
        raise ValueError(f"uniforms: on {uniforms.device}, tables on {device}")
    if validate and bool(((uniforms < 0) | (uniforms >= 1) | torch.isnan(uniforms)).any()):
        raise ValueError("uniforms: values must lie in [0, 1)")


def check_chain(p, q, draft, uniforms, validate):
    """The chain rules' (token, block) input check: shapes, dtypes, devices, uniforms and, if
    `validate`, probability rows and token ids; raises ValueError / TypeError naming the argument."""
    check_tensor(p, "p", 3, "float")
    check_tensor(q, "q", 3, "float")
    check_tensor(draft, "draft", 2, "int")
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
    _check_uniforms(uniforms, B, L + 1, p.device, validate)
    if validate:
        _check_probs(p, "p")
        _check_probs(q, "q")
        if bool(((draft < 0) | (draft >= V)).any()):
            raise ValueError(f"draft: token ids must lie in [0, {V})")


def check_tree(p, q, paths, uniforms, lengths, needed_fn, validate):
    """The tree rules' input check (as `check_chain`, K paths, `needed_fn(L, K)` uniforms per row);
    returns lengths [B, K] int64 (all L when None)."""
    check_tensor(p, "p", 4, "float")
    check_tensor(q, "q", 4, "float")
    check_tensor(paths, "paths", 3, "int")
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
        check_tensor(lengths, "lengths", 2, "int")
        if tuple(lengths.shape) != (B, K):
            raise ValueError(f"lengths: expected shape [B={B}, K={K}], got {tuple(lengths.shape)}")
        if bool(((lengths < 0) | (lengths > L)).any()):
            raise ValueError(f"lengths: must lie in [0, {L}]")
        lengths = lengths.to(device=p.device, dtype=torch.long)
    _check_uniforms(uniforms, B, needed_fn(L, K), p.device, validate)
    if validate:
        depth = torch.arange(L + 1, device=p.device)
        used = depth[:L] < lengths.unsqueeze(-1)  # [B, K, L]: q rows and tokens read
        _check_probs(p, "p", depth <= lengths.unsqueeze(-1))  # p rows read: d <= lengths
        _check_probs(q, "q", used)
        if bool((((paths < 0) | (paths >= V)) & used).any()):
            raise ValueError(f"paths: token ids must lie in [0, {V})")
    return lengths


def emit(prefix: torch.Tensor, tau: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """[B, L+1] rows: prefix[:tau], y, then -1. prefix [B, L], tau [B], y [B] (every rule's
    `RuleOutput.tokens`)."""
    B, L = prefix.shape
    position = torch.arange(L + 1, device=prefix.device)  # [L+1]
    padded = torch.cat([prefix, prefix.new_full((B, 1), -1)], dim=1)  # [B, L+1]
    out = torch.where(position < tau.unsqueeze(1), padded, torch.full_like(padded, -1))
    return torch.where(position == tau.unsqueeze(1), y.unsqueeze(1), out)


def first_true(mask: torch.Tensor) -> torch.Tensor:
    """Index of the first True along the last axis (0 if none): [B, K] -> [B] (the accepted
    candidate of a multi-draft selection)."""
    return mask.long().argmax(-1)


def representatives(paths: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """rep [B, K, L+1]: the lowest path index k' with lengths[k'] >= d sharing path k's first d
    tokens (the node id of position (k, d)); only meaningful where d <= lengths[k]. Shared by the
    rules and the drafters, which must read one row per tree node."""
    B, K, L = paths.shape
    if K == 1:  # one path owns every node it has
        return paths.new_zeros(B, 1, L + 1, dtype=torch.long)
    same_token = paths.unsqueeze(2) == paths.unsqueeze(1)  # [B, K, K', L]
    same_prefix = torch.cat([torch.ones_like(same_token[..., :1]), same_token.long().cumprod(-1).bool()], -1)
    depth = torch.arange(L + 1, device=paths.device)
    long_enough = (lengths.unsqueeze(-1) >= depth).unsqueeze(1)  # [B, 1, K', L+1]
    candidate = torch.arange(K, device=paths.device).view(1, 1, K, 1)
    # min over k' of k' where it shares the prefix (K otherwise; position (k, d) itself always
    # qualifies when d <= lengths[k]).
    return torch.where(same_prefix & long_enough, candidate, K).amin(2).clamp(max=K - 1)  # [B, K, L+1]


def chain_probabilities(p, q, draft, uniforms, validate: bool):
    """A chain rule's inputs, checked (`check_chain`): (rows int64 [B], draft int64 [B, L],
    p_x [B, L], q_x [B, L]), the target's and the draft's probability of each drafted token."""
    check_chain(p, q, draft, uniforms, validate)
    B, L = draft.shape
    draft = draft.long()
    return torch.arange(B, device=p.device), draft, gather_last(p[:, :L], draft), gather_last(q, draft)
