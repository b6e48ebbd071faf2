"""The engine's verifiers: the torch rules applied to a draft tree in node layout.

Data flow (`verispec.empirical.engine`): drafter -> tree (tokens / parents / real [B, N], q
[B, N, V] or point masses, paths [B, K, L]) -> ONE target forward -> p [B, N, V] -> a verifier
here -> `Verdict` (accepted node ids, tau, correction/bonus token) -> KV keep.

- `PathRule(name)`: the path-layout rule of a chain or multi-path method (token, block, gbv, nss,
  rrs, rrsw, spectr, traversal: `rule_table.RULES`, read from the registry) on the tree's K ordered
  paths (`_path_tables`); chain rules accept drafts of different lengths per row (`_chain_by_length`).
- `SampleAndFollow()`: OPT-Tree's rule on any tree (`verifiers.sample_and_follow`).
- `PointMassTree()`: recursive rejection with one-hot proposals on a trie (`verifiers.pointmass`).

Uniforms: each verifier peeks the most its rule can read and advances by what each row consumed,
so a stream source (`NumpyUniforms`) is read in the reference's order.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import torch

from ...reference.deprecation import deprecated
from ..model import tree_ancestors
from ..uniforms import categorical
from .pointmass import child_table, point_mass_tree_uniforms, point_mass_walk
from .rule_table import CHAIN_RULES, RULES, SAMPLE_AND_FOLLOW, takes, uniforms_needed, verify
from .sample_and_follow import sample_and_follow_nodes

__all__ = ["Verdict", "PathRule", "SampleAndFollow", "PointMassTree"]


class Verdict(NamedTuple):
    """What a verifier returns per row: nodes int64 [B, D], the accepted node ids in root-to-leaf
    order, -1 after tau; tau int64 [B], the accepted length; token int64 [B], the correction/bonus
    token. `num_accepted`: the deprecated name of `tau`."""

    nodes: torch.Tensor
    tau: torch.Tensor
    token: torch.Tensor

    @property
    def num_accepted(self) -> torch.Tensor:
        """Deprecated alias of `tau`."""
        deprecated("Verdict.num_accepted", "Verdict.tau")
        return self.tau


def _verdict(path: torch.Tensor, tau: torch.Tensor, y: torch.Tensor) -> Verdict:
    """Mask path [B, D] (node ids) after each row's tau."""
    on = torch.arange(path.shape[1], device=path.device) < tau.unsqueeze(1)
    return Verdict(torch.where(on, path, -1), tau, y)


class PathRule:
    """A torch rule of `verispec.empirical.verifiers.RULES` on the tree's K ordered paths: a chain
    rule (the registry's chain family) reads path 0 only; on a chain tree (`DraftTree.chain`) it
    reads the tree as slices: no copy, no value read back."""

    needs_q = True
    trusted = capturable = True

    def __init__(self, name: str):
        if name not in RULES or name == SAMPLE_AND_FOLLOW:
            raise ValueError(f"name: not a path rule: {name!r}")
        self.name = name
        self.chain = name in CHAIN_RULES  # reads path 0 only
        self.full_paths_only = not takes(name, "lengths")  # e.g. gbv: every path has L tokens
        self.greedy_aware = takes(name, "greedy")  # block: a shortcut at T = 0

    def __call__(self, p, tree, source, temperature, rows=None) -> Verdict:
        if tree.paths is None:
            raise ValueError(f"draft tree: rule {self.name!r} needs the drafter's paths [B, K, L]")
        paths = tree.paths  # [B, K, L], node ids
        B, K, L = paths.shape
        rule = partial(RULES[self.name], greedy=True) if temperature == 0 and self.greedy_aware else RULES[self.name]
        if tree.chain and self.chain and tree.q is not None:  # node j = depth j: slices
            out = rule(p[:, :L + 1], tree.q[:, :L], tree.tokens[:, 1:L + 1], source.peek(B, L + 1, p.device),
                       validate=False)
            source.advance(out.consumed)
            return _verdict(paths[:, 0], out.tau, out.tokens.gather(1, out.tau.unsqueeze(1))[:, 0])
        lengths = (paths >= 0).sum(-1)  # [B, K]
        if self.chain:  # chain rules read path 0, never past its length
            deepest = int(lengths[:, 0].max()) if B else 0  # the uniforms peeked still follow L
            p_tab, q_tab, drafted = _path_tables(p, tree, paths[:, :1, :deepest], loose=True)
            tau, emitted, consumed = _chain_by_length(rule, p_tab[:, 0], q_tab[:, 0], drafted[:, 0],
                                                      lengths[:, 0], source.peek(B, L + 1, p.device))
            k_star = torch.zeros_like(tau)
        else:
            p_tab, q_tab, drafted = _path_tables(p, tree, paths, loose=False)
            full = tree.full or self.full_paths_only or bool((lengths == L).all())  # no sync when known
            u = source.peek(B, uniforms_needed(self.name, L, K), p.device)
            out = verify(self.name, p_tab, q_tab, drafted, u, None if full else lengths, validate=False)
            tau, emitted, consumed, k_star = out.tau, out.tokens, out.consumed, out.path_index
        source.advance(consumed)
        rows_ = torch.arange(B, device=p.device)
        return _verdict(paths[rows_, k_star], tau, emitted[rows_, tau])


def _path_tables(p, tree, paths, loose: bool):
    """The path layout of the rules: p [B, K, L+1, V], q [B, K, L, V] (one-hot of the drafted
    tokens for point masses), drafted [B, K, L] from the node layout (p [B, N, V], paths
    [B, K, L] node ids, -1 past a path's end: there the root's rows, or, when `loose`, rows the
    caller never reads). Views, not copies, when every path reads its nodes in slot order."""
    B, K, L = paths.shape
    V = p.shape[-1]
    nodes = torch.cat([paths.new_zeros(B, K, 1), paths], dim=-1)  # [B, K, L+1]
    p_tab = _node_rows(p, nodes.reshape(B, -1), loose, K == 1).view(B, K, L + 1, V)
    drafted = tree.tokens.gather(1, paths.clamp(min=0).reshape(B, -1)).view(B, K, L)
    if tree.q is None:  # point masses: q = one-hot of each drafted token
        q_tab = torch.zeros(B, K, L, V, dtype=p.dtype, device=p.device).scatter_(-1, drafted.unsqueeze(-1), 1.0)
    else:
        q_tab = _node_rows(tree.q, nodes[:, :, :L].reshape(B, -1), loose, K == 1).view(B, K, L, V)
    return p_tab, q_tab, drafted


def _node_rows(t, nodes, loose: bool, may_slice: bool = True):
    """Rows of t [B, N, V] at nodes [B, n] (-1: the root, or any row when `loose`) -> [B, n, V]:
    the slice t[:, :n] when the nodes read are 0..n-1 in every row (one path in slot order: no
    copy of n vocabulary-wide rows; checked, reading a value back, only when `may_slice`), else a
    gather."""
    n = nodes.shape[1]
    slots = torch.arange(n, device=nodes.device)
    read = (nodes >= 0) if loose else torch.ones_like(nodes, dtype=torch.bool)
    if may_slice and n <= t.shape[1] and bool(((nodes == slots) | ~read).all()):
        return t[:, :n]
    return t.gather(1, nodes.clamp(min=0).unsqueeze(-1).expand(-1, -1, t.shape[-1]))


def _chain_by_length(rule, p, q, draft, lengths, u):
    """A chain rule (block: with greedy=True at T = 0) per row with its own draft length: rows grouped
    by length (length 0 draws straight from p, one uniform). p [B, l+1, V], q [B, l, V], draft [B, l],
    lengths [B], u [B, >= l+1] -> (tau [B], emitted [B, l+1] (-1 padded), consumed [B])."""
    B, width = p.shape[:2]
    tau = torch.zeros(B, dtype=torch.long, device=p.device)
    emitted = torch.full((B, width), -1, dtype=torch.long, device=p.device)
    consumed = torch.ones(B, dtype=torch.long, device=p.device)
    groups = lengths.unique().tolist()
    for n in groups:
        # One group (always at B = 1): every row, as slices (no copy of the tables' rows).
        rows = slice(None) if len(groups) == 1 else (lengths == n).nonzero().squeeze(1)
        if n == 0:
            emitted[rows, 0] = categorical(p[rows, 0], u[rows, 0])
            continue
        out = rule(p[rows, :n + 1], q[rows, :n], draft[rows, :n], u[rows, :n + 1], validate=False)
        tau[rows], emitted[rows, :n + 1], consumed[rows] = out.tau, out.tokens, out.consumed
    return tau, emitted, consumed


class SampleAndFollow:
    """OPT-Tree's sample-and-follow on any tree (never reads q; greedy at T = 0, no uniforms).
    A tree whose depth bound the host knows (`DraftTree.depth`) is walked that many steps, with
    no value read back; otherwise its depth is read and the walk stops once every row stopped."""

    name = "sample_and_follow"
    needs_q = False
    trusted = capturable = True

    def __call__(self, p, tree, source, temperature, rows=None) -> Verdict:
        known = tree.depth is not None
        if known:
            max_steps = min(tree.depth, tree.tokens.shape[1] - 1)
        else:
            depth = tree_ancestors(torch.where(tree.real, tree.parents, -1), check=False).sum(-1) - 1  # [B, N]
            max_steps = int(torch.where(tree.real, depth, 0).max())
        B = p.shape[0]
        greedy = temperature == 0
        u = None if greedy else source.peek(B, max_steps + 1, p.device)
        path, tau, y = sample_and_follow_nodes(p, tree.tokens, tree.parents, tree.real, u, greedy, max_steps,
                                               early_exit=not known)
        if not greedy:
            source.advance(tau + 1)  # one uniform per visited node, as the reference
        return _verdict(path, tau, y)


class PointMassTree:
    """Recursive rejection with one-hot proposals on a trie of deterministic drafts."""

    name = "point_mass_tree"
    needs_q = False
    trusted = True

    def __call__(self, p, tree, source, temperature, rows=None) -> Verdict:
        verifiable = tree.real if tree.verifiable is None else tree.verifiable & tree.real
        parents = torch.where(tree.real, tree.parents, -1)
        u = source.peek(p.shape[0], point_mass_tree_uniforms(parents, verifiable), p.device)
        path, tau, y, consumed = point_mass_walk(p.double(), tree.tokens, child_table(parents, verifiable), u)
        source.advance(consumed)
        return _verdict(path, tau, y)
