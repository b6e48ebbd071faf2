"""Top-down multi-draft selection with one-step rules: the engine verifiers of `khisti`,
`optimal_is`, `global_resolution`, `spechub` and `hu_greedy` (torch twins of
`verispec.reference.verifiers.importance.khisti_verify`, `optimal_is_verify`,
`verispec.reference.verifiers.global_resolution.global_resolution_verify`,
`verispec.reference.verifiers.spechub.spechub_verify` and
`verispec.reference.verifiers.hu_greedy.hu_greedy_verify`).

Each descends the draft tree from the root. At a node with drafted children it applies its one-step
rule to the k drafted next tokens of the paths through the node (in path order), which emits one
token y: a drafted child is entered, any other y is the correction and the descent stops; at a leaf
the bonus token is drawn from p (one uniform).

- `khisti`: Khisti et al.'s importance-sampling (IS) selection, a pairwise tournament for k > 2,
  then single-draft speculative sampling (arXiv 2410.18234; `importance.khisti_step`).
- `optimal_is`: the alpha*-optimal IS selection law among the distinct drafted tokens, then
  single-draft speculative sampling (arXiv 2502.18779 / 2410.18234; `importance.optimal_is_step`).
- `global_resolution`: the same two steps with the alpha*-optimal selection of
  `global_resolution.Resolution` (after Thomas & Pal, arXiv 2511.15898): no LP, any V; its winner
  law and q_I are the reference's, computed per node on the CPU in float64.
- `spechub`: SpecHub's hub-pair transport at the root, single-draft speculative sampling on each
  path below it (Sun et al. 2024, arXiv 2411.05289; `spechub.spechub_step`).
- `hu_greedy`: speculative sampling of the one drawn draft against its law q_last, whose residual
  reaches the greedy drafts (Hu et al. 2025, arXiv 2502.18779; `hu_greedy_step`).

The IS selection tables come from the reference's linear programs (`pair_selection`,
`optimal_selection`), solved per node in float64 with scipy HiGHS as the GBV authors' code does;
they are over the full vocabulary, so refused above `MAX_LP_VOCAB`. With `truncation` = s the LP
covers s tokens only (`TruncatedSelection`, `TruncatedSetSelection` of the reference): any V.

Uniforms: a row reads its step's uniforms in the reference's order, node after node, then the
bonus draw; the verifier peeks the most a row can read and advances each row by what it consumed, so
fed the same stream (`NumpyUniforms`, B = 1) it emits the tokens of the reference rule.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch

from ...reference import registry
from ...reference.verifiers import global_resolution
from ...reference.verifiers import importance as reference
from ..uniforms import bernoulli, categorical
from .importance import khisti_step, optimal_is_step, single_draft
from .nodes import Verdict
from .spechub import spechub_step

__all__ = ["MAX_LP_VOCAB", "TopDownSelection", "SELECTION_RULES", "hu_greedy_step"]

#: The one-step rules `TopDownSelection` applies: the registry's selection family.
SELECTION_RULES = tuple(registry.names(family=registry.SELECTION))
#: The rules whose one-step law comes from a selection LP (those declaring `truncation`).
LP_RULES = tuple(name for name in SELECTION_RULES if "truncation" in registry.spec(name).defaults("torch"))
#: Largest vocabulary the IS rules' selection LPs are solved for: `khisti`'s LP has V(V - 1)
#: variables and a dense [2V, V^2] constraint matrix; `optimal_is`'s enumerates the V^k draws of
#: k drafts. Above it they raise ValueError instead of running for hours.
MAX_LP_VOCAB = 64


class TopDownSelection:
    """The engine verifier applying one-step rule `name` (`SELECTION_RULES`) down the tree of K paths.

    `__call__(p, tree, source, temperature, rows=None) -> Verdict` with p float64 [B, N, V] and the
    tree's q [B, N, V] and paths [B, K, L] (node ids, -1 past a path's end).

    `truncation` (khisti, optimal_is): s, the LP tokens of `TruncatedSelection` /
    `TruncatedSetSelection`; None: the full-vocabulary LP.

    Raises:
        ValueError: unknown name; truncation for spechub or hu_greedy; a tree without paths or q;
            V > MAX_LP_VOCAB for the full-vocabulary IS LPs.
    """

    needs_q = True

    def __init__(self, name: str, truncation: int | None = None):
        if name not in SELECTION_RULES:
            raise ValueError(f"name: not a top-down multi-draft selection rule: {name!r}; known: {', '.join(SELECTION_RULES)}")
        if truncation is not None and name not in LP_RULES:
            raise ValueError(f"truncation: only 'khisti' and 'optimal_is' have a truncated LP, not {name!r}")
        self.name, self.truncation = name, truncation

    def __call__(self, p, tree, source, temperature, rows=None) -> Verdict:
        if tree.paths is None or tree.q is None:
            raise ValueError(f"draft tree: rule {self.name!r} needs the drafter's paths [B, K, L] and q [B, N, V]")
        B, N, V = p.shape
        if self.name in LP_RULES and self.truncation is None and V > MAX_LP_VOCAB:
            raise ValueError(f"vocabulary: {self.name!r} solves its selection LP over the full vocabulary, "
                             f"refused for V = {V} > MAX_LP_VOCAB = {MAX_LP_VOCAB} (use truncation=s, "
                             f"e.g. 5; bench label {self.name}:K=2,s=5)")
        paths = tree.paths  # [B, K, L], node ids
        K, L = paths.shape[1:]
        device = p.device
        u = source.peek(B, registry.spec(self.name).uniforms(L, K), device)  # [B, n], the entry's budget
        state = _SelectionState(B, L, device)
        through = paths[:, :, 0] >= 0 if L else torch.zeros(B, K, dtype=torch.bool, device=device)  # [B, K]
        for d in range(L + 1):
            child = paths[:, :, d] if d < L else torch.full_like(paths[:, :, 0], -1)  # [B, K]
            through = through & (child >= 0) & state.alive.unsqueeze(1)
            drafts = torch.where(through, tree.tokens.gather(1, child.clamp(min=0)), -1)  # [B, K]
            leaf = state.alive & ~through.any(1)
            if bool(leaf.any()):  # bonus token from p at the current node
                r = leaf.nonzero().squeeze(1)
                state.stop(r, categorical(p[r, state.node[r]], state.uniforms(u, r, 1)[:, 0]), 1)
            stepping = state.alive.nonzero().squeeze(1)
            if stepping.numel() == 0:
                break
            p_node = p[stepping, state.node[stepping]]  # [b, V]
            q_node = tree.q[stepping, state.node[stepping]]  # [b, V]
            y, used = self._step(p_node, q_node, drafts[stepping], state.uniforms(u, stepping, u.shape[1]))
            hit = (drafts[stepping] == y.unsqueeze(1)) & through[stepping]  # [b, K]
            accepted = hit.any(1)
            k_hit = hit.long().argmax(1)  # a path through the accepted child
            entered, chosen = stepping[accepted], child[stepping[accepted], k_hit[accepted]]  # rows, nodes
            state.enter(entered, d, chosen, used[accepted])
            state.stop(stepping[~accepted], y[~accepted], used[~accepted])
            through = torch.zeros_like(through)  # the paths through the entered child go on
            through[entered] = child[entered] == chosen.unsqueeze(1)
        source.advance(state.consumed)
        return state.verdict()

    def _step(self, p, q, drafts, u):
        """One step per row: p, q [b, V] float64, drafts [b, K] (-1: no path through the node),
        u [b, n] -> (y [b], uniforms used [b])."""
        if self.name == "spechub":
            return _spechub(p, q, drafts, u)
        if self.name == "hu_greedy":  # q is the drawn draft's law q_last (`GreedyDraftDrafter`)
            return hu_greedy_step(p, q, drafts, u[:, :2])
        return _importance(self.name, p, q, drafts, u, self.truncation)


class _SelectionState:
    """Per-row state of a top-down multi-draft selection: current node, accepted nodes, uniforms consumed."""

    def __init__(self, B: int, L: int, device):
        self.node = torch.zeros(B, dtype=torch.long, device=device)  # [B]
        self.alive = torch.ones(B, dtype=torch.bool, device=device)  # [B]
        self.path = torch.full((B, max(L, 1)), -1, dtype=torch.long, device=device)  # [B, L]
        self.tau = torch.zeros(B, dtype=torch.long, device=device)  # [B]
        self.token = torch.zeros(B, dtype=torch.long, device=device)  # [B]
        self.consumed = torch.zeros(B, dtype=torch.long, device=device)  # [B]

    def uniforms(self, u, rows, width):
        """Each row's next `width` unread uniforms -> [len(rows), width] (clamped at the end)."""
        at = (self.consumed[rows].unsqueeze(1) + torch.arange(width, device=u.device)).clamp(max=u.shape[1] - 1)
        return u[rows].gather(1, at)

    def enter(self, rows, depth, child, used):
        self.node[rows], self.path[rows, depth] = child, child
        self.tau[rows] += 1
        self.consumed[rows] += used

    def stop(self, rows, token, used):
        self.token[rows], self.alive[rows] = token, False
        self.consumed[rows] += used

    def verdict(self) -> Verdict:
        return Verdict(self.path, self.tau, self.token)


def _spechub(p, q, drafts, u):
    """SpecHub's step: the pair (path 0's token, path 1's token) at a node with two drafts, a
    single draft (second = -1) elsewhere."""
    present = drafts >= 0  # [b, K]
    first = drafts.gather(1, present.long().argmax(1, keepdim=True)).squeeze(1)  # [b]
    two = present.sum(1) == 2
    second = torch.where(two, drafts[:, -1] if drafts.shape[1] == 2 else first, -1)  # [b]
    if bool((present.sum(1) > 2).any()):
        raise ValueError("draft tree: spechub verifies at most two drafts per node")
    return spechub_step(p, q, first, second, u[:, :3])


def hu_greedy_step(p, q_last, drafts, u):
    """Greedy draft sampling's step per row (torch twin of `verispec.reference.verifiers.hu_greedy.
    hu_greedy_step`): speculative sampling of the drawn draft (the last present one) against its law.

    Args:
        p, q_last: target and the drawn draft's law [b, V]. drafts: [b, K] in path order, -1 where
            no path passes. u: uniforms [b, 2] (acceptance, correction).

    Returns:
        (y [b] int64, used [b] int64: 1 when the drawn draft is accepted, else 2).
    """
    last = drafts.shape[1] - 1 - (drafts >= 0).flip(1).long().argmax(1)  # [b], the last present path
    y, take = single_draft(p, q_last, drafts.gather(1, last.unsqueeze(1)).squeeze(1), u[:, 0], u[:, 1])
    return y, torch.where(take, 1, 2)


def _importance(name, p, q, drafts, u, truncation=None):
    """An IS step per row, rows grouped by their number of drafts (and of distinct drafts); the
    selection tables come from the reference's LPs on the row's (p, q) in float64."""
    b, device = p.shape[0], p.device
    y = torch.zeros(b, dtype=torch.long, device=device)
    used = torch.zeros(b, dtype=torch.long, device=device)
    p_np, q_np = p.double().cpu().numpy(), q.double().cpu().numpy()
    rows_drafts = [[t for t in row if t >= 0] for row in drafts.tolist()]  # path order
    groups: dict[tuple, list[int]] = {}
    for r, ts in enumerate(rows_drafts):
        groups.setdefault((len(ts), len(set(ts))), []).append(r)
    for (k, _), members in groups.items():
        index = torch.tensor(members, device=device)
        if truncation is not None and name == "khisti":
            tables = [_truncated_tables(p_np[r], q_np[r], rows_drafts[r], truncation) for r in members]
        else:
            tables = [_tables(name, p_np[r], q_np[r], rows_drafts[r], truncation) for r in members]
        columns = [torch.from_numpy(np.stack(column)).to(device) for column in zip(*tables)]
        if truncation is not None and name == "khisti":
            keeps, q_sel, drafted = columns  # [g, k - 1, k], [g, V], [g, k]
            y[index], used[index] = _tournament_step(p[index], keeps, q_sel, drafted, u[index, :k + 1])
        elif name == "khisti":
            keeps, q_sel, drafted = columns  # [g, k - 1, V, V], [g, V], [g, k]
            y[index], used[index] = khisti_step(p[index], keeps, q_sel, drafted, u[index, :k + 1])
        else:
            select, candidates, q_sel = columns  # [g, S], [g, S], [g, V]
            y[index], used[index] = optimal_is_step(p[index], q_sel, candidates, select, u[index, :3])
    return y, used


def _tables(name, p, q, drafts, truncation=None):
    """The reference's selection tables at one node (numpy float64 p, q [V]; drafts in path order):
    khisti -> (keeps [k - 1, V, V], q_I [V], drafts [k]); optimal_is, global_resolution -> (select [S],
    candidates [S], q_I [V]) for the sorted distinct drafts (s-truncated LP with `truncation`)."""
    V = len(p)
    if name == "khisti":
        law, keeps = q, []
        for _ in range(len(drafts) - 1):  # the tournament's rounds, as the reference `khisti_step`
            keep, law = reference.pair_selection(p, law, q)
            keeps.append(np.array(keep, dtype=np.float64))
        keeps = np.array(keeps, dtype=np.float64).reshape(len(drafts) - 1, V, V)
        return keeps, np.asarray(law, dtype=np.float64), np.array(drafts, dtype=np.int64)
    candidates = tuple(sorted(set(drafts)))
    if name == "global_resolution":  # the winner law of the drafts' copies (their counts) and its q_I
        found = global_resolution.resolution(p, q, len(drafts))
        select = found.winner_probabilities(dict(Counter(drafts)), q)
        return (np.asarray(select, dtype=np.float64), np.array(candidates, dtype=np.int64),
                np.asarray(found.law, dtype=np.float64))
    if truncation is not None:
        selection = reference.truncated_set_selection(p, q, len(drafts), truncation)
        select, q_sel = {candidates: selection.probabilities(candidates)}, selection.law
    else:
        select, q_sel = reference.optimal_selection(p, q, len(drafts))
    return (np.asarray(select[candidates], dtype=np.float64), np.array(candidates, dtype=np.int64),
            np.asarray(q_sel, dtype=np.float64))


def _truncated_tables(p, q, drafts, s):
    """khisti with the s-truncated LP at one node -> (keeps [k - 1, k]: round r's probability that
    the running winner, draft j <= r, keeps its place against draft r + 1; q_I [V]; drafts [k])."""
    k = len(drafts)
    keeps, law = np.zeros((k - 1, k)), q
    for r in range(k - 1):  # the tournament's rounds, as the reference `khisti_truncated_step`
        selection = reference.truncated_pair_selection(p, law, q, s)
        keeps[r, :r + 1] = [float(selection.keep(drafts[j], drafts[r + 1])) for j in range(r + 1)]
        law = selection.law
    return keeps, np.asarray(law, dtype=np.float64), np.array(drafts, dtype=np.int64)


def _tournament_step(p, keeps, q_sel, drafts, u):
    """Khisti et al.'s pairwise tournament on per-draft keep probabilities, then single-draft SD.

    Args:
        p: target [b, V]. keeps: [b, k - 1, k] (`_truncated_tables`). q_sel: the final winner's law
            [b, V]. drafts: [b, k] in path order. u: uniforms [b, k + 1].

    Returns:
        (y [b] int64, used [b] int64: k when accepted, else k + 1).
    """
    b, k = drafts.shape
    rows = torch.arange(b, device=p.device)
    win = torch.zeros(b, dtype=torch.long, device=p.device)  # [b], index of the running winner
    for r in range(k - 1):
        win = torch.where(bernoulli(keeps[rows, r, win], u[:, r]), win, r + 1)
    out, take = single_draft(p, q_sel, drafts[rows, win], u[:, k - 1], u[:, k])
    return out, torch.where(take, k, k + 1)
