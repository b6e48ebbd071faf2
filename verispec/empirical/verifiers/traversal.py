"""Traversal verification (Weng et al. 2025, arXiv 2505.12398), the torch twin of
`verispec.reference.verifiers.traversal`."""

from __future__ import annotations

import torch

from ..uniforms import bernoulli, categorical
from .common import (RuleOutput, check_tree, Cursor, emit, gather_last, representatives, accept_probability,
                     residual, stop_probability)


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


def _rows_of(table, index):
    """table [B, R, V], index [B] -> table[b, index[b]]: [B, V]."""
    B, _, V = table.shape
    return table.gather(1, index.view(B, 1, 1).expand(B, 1, V)).squeeze(1)


def _put(table, index, value) -> None:
    """table[b, index[b]] = value[b] (in place)."""
    B, _, V = table.shape
    table.scatter_(1, index.view(B, 1, 1).expand(B, 1, V), value.unsqueeze(1))


def _reject_child(P, Q, W, pp, pq, token, rejected) -> None:
    """A rejected child `token` of the node at rows pp (p, w) / pq (q) updates it, where
    `rejected` [B]: p <- norm(max(w p - q, 0)), w <- S / (S + 1 - w), q <- q without the child."""
    p_parent, q_parent, w_parent = _rows_of(P, pp), _rows_of(Q, pq), W.gather(1, pp.unsqueeze(1)).squeeze(1)
    r = rejected.unsqueeze(1)
    new_p = residual(p_parent, q_parent, w_parent)
    new_w = stop_probability(p_parent, q_parent, w_parent)
    new_q = q_parent.scatter(1, token.unsqueeze(1), 0.0)
    mass = new_q.sum(-1, keepdim=True)
    new_q = torch.where(mass > 0, new_q / torch.where(mass > 0, mass, 1), new_q)
    _put(P, pp, torch.where(r, new_p, p_parent))
    _put(Q, pq, torch.where(r, new_q, q_parent))
    W.scatter_(1, pp.unsqueeze(1), torch.where(rejected, new_w, w_parent).unsqueeze(1))


def _event_rows(rep, paths, ev_k, ev_d):
    """Per-event indices, all [B, E]: the token into the node, the node's own row of P (k L1 + d),
    its parent's rows of P and of Q (representatives: rep [B, K, L+1])."""
    B, K, L = paths.shape
    L1 = L + 1
    dm1 = (ev_d - 1).clamp(min=0)
    parent = rep.reshape(B, K * L1).gather(1, ev_k * L1 + dm1)
    paths_pad = torch.cat([paths, paths.new_zeros(B, K, 1)], -1).reshape(B, K * L1)  # [B, K(L+1)]
    token = paths_pad.gather(1, ev_k * L1 + dm1)
    return token, ev_k * L1 + ev_d, parent * L1 + dm1, parent * L + dm1.clamp(max=L - 1)


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
    lengths = check_tree(p, q, paths, uniforms, lengths, lambda L, K: K * L + 2, validate)
    B, K, L = paths.shape
    V = p.shape[-1]
    L1 = L + 1
    rows = torch.arange(B, device=p.device)
    paths = paths.long()
    rep = representatives(paths, lengths)  # [B, K, L+1]
    ev_k, ev_d, ev_exit, ev_valid = _euler_events(rep, lengths)  # [B, E] each
    num_events = int(ev_valid.sum(-1).max())
    P = p.reshape(B, K * L1, V).clone()  # current p of node (k, d) at row k * L1 + d
    Q = q.reshape(B, K * L, V).clone()  # current q of node (k, d), d < L, at row k * L + d
    W = torch.ones(B, K * L1, dtype=p.dtype, device=p.device)
    ev_token, ev_me, ev_pp, ev_pq = _event_rows(rep, paths, ev_k, ev_d)  # [B, E] each

    cursor = Cursor(uniforms)
    done = torch.zeros(B, dtype=torch.bool, device=p.device)
    tau, last, path_index = (torch.zeros(B, dtype=torch.long, device=p.device) for _ in range(3))  # [B] each
    for e in range(num_events):
        k, d, is_exit, token = ev_k[:, e], ev_d[:, e], ev_exit[:, e], ev_token[:, e]  # [B]
        me, pp, pq = ev_me[:, e:e + 1], ev_pp[:, e], ev_pq[:, e]
        active = ev_valid[:, e] & ~done
        w_me = W.gather(1, me).squeeze(1)  # [B]
        enter = active & ~is_exit & (d >= 1)
        leave = active & is_exit
        if bool(enter.any()):  # entering (k, d): its weight from the parent's current state
            p_parent, q_parent, w_parent = _rows_of(P, pp), _rows_of(Q, pq), W.gather(1, pp.unsqueeze(1)).squeeze(1)
            w_new = accept_probability(gather_last(p_parent, token), gather_last(q_parent, token), w_parent)
            W.scatter_(1, me, torch.where(enter, w_new, w_me).unsqueeze(1))
        if not bool(leave.any()):
            continue
        # Leaving (k, d): accept its root path w.p. w, then draw the next token from its current p.
        accepted = leave & bernoulli(w_me, cursor.take(leave))
        if bool(accepted.any()):
            y = categorical(_rows_of(P, me.squeeze(1)), cursor.take(accepted))
            last = torch.where(accepted, y, last)
            tau = torch.where(accepted, d, tau)
            path_index = torch.where(accepted, k, path_index)
            done = done | accepted
        rejected = leave & ~accepted & (d >= 1)
        if bool(rejected.any()):  # the subtree of (k, d) was rejected: update its parent
            _reject_child(P, Q, W, pp, pq, token, rejected)
    prefix = paths[rows, path_index]  # [B, L]
    return RuleOutput(emit(prefix, tau, last), tau, path_index, cursor.pos)


