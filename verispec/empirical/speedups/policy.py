"""Drafting that pays on the host: the draft length (chains, paths) or node budget (trees) chosen per
iteration to maximise expected tokens per second under a measured `CostModel`.

The rules are `verispec.reference.policy`'s (its module docstring gives them, with their sources:
Leviathan et al. 2023, arXiv 2211.17192, eq. 1 for E[tokens]; SpecDec++ arXiv 2405.19715 and
AdaEDL arXiv 2410.18351 for the stop; OPT-Tree arXiv 2406.17276 and EAGLE-2 arXiv 2406.16858 for
the tree budget). Here they run batched on the engine's drafters, one policy object per drafter
(`with_policy` sets ``drafter.policy``; the drafters call it at the points below):

- `ChainPolicy` (adaptive and hybrid chains): after each drawn token, continue iff some j more
  tokens raise E[tokens] / seconds (`keeps_drafting`). The acceptance estimate of a token of
  draft probability c is a per-row calibration g(c): `bins` equal bins of [0, 1], each the
  share of verified tokens of that bin that were accepted, shrunk with `calibration_weight`
  pseudo-tokens towards the row's pooled acceptance rate, itself shrunk towards the bin's centre
  (`ChainPolicy.calibration`): it starts as g(c) ~ c and learns how far q(x) under- or
  over-states acceptance at this temperature (at T = 1 a token drawn with q(x) = 0.3 from a
  draft close to the target is usually accepted). Learned from finished iterations only, so it
  is fixed before an iteration's draws: every iteration is `reference.policy.cost_chain` with
  some `Calibration`, and the chain's length stays a stopping time of its own tokens.
- `PlanPolicy` (fixed-length path methods: token, block, gbv, ..., the multi-draft selection
  rules): the iteration's L (per row, <= the method's L) by `planned_length` from a per-row
  running acceptance rate (prior 1/2 with `calibration_weight` pseudo-tokens), before any draw.
- `TreePolicy` (opt_tree, kary, eagle, chain_tree): the tree cut to the `best_budget` top-W
  nodes, W scaled by rho = (w + sum tau) / (w + sum E[A] predicted) over finished iterations.

Runner-up leaves (``leaves="on"``, adaptive chains, T = 0 only): at a greedy target the first
rejected chain token is often one where the draft's second choice is the target's argmax.
`ChainPolicy.grow` hangs the draft's runner-up token at each depth j below chain node j - 1 as a
leaf, with no draft forward (the draft's logits at that depth are already computed), and keeps
the m leaves of largest weight W_j = P(the chain survives to depth j - 1) rho_j (rho_j: the
draft's probability of the runner-up) that maximise (E + sum W) / (C + the extra target rows'
seconds): OPT-Tree's objective (arXiv 2406.17276) priced by the costs. The tree is verified by
greedy sample-and-follow (`GreedyFollowAtZero`): lossless on any tree, and at T = 0 it emits the
target's argmax path, as every lossless chain rule does on the chain alone; an accepted leaf adds
one token (the bonus after it). At T > 0 nothing changes.

A `PolicyMemory` (``memory=``) carries these statistics from one decode call to the next: the
bench keeps one per method and temperature across its prompts, as one serving process would,
so a prompt starts from what the earlier prompts taught (scaled down to `CARRY_TOKENS`). Without
it each call starts from the prior. None of them touches a verifier, but for the leaves' greedy
follow at T = 0. Tensor shapes are in the comments; B = active rows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ...reference.costs import CostModel
from ...reference.policy import POLICIES
from ...reference.registry import CALIBRATION, LEAVES, POLICY
from ..drafters.adaptive import AdaptiveChainDrafter
from ..drafters.base import DraftTree, PathsDrafter
from ..drafters.tree import TreeDrafter
from ..verifiers.nodes import SampleAndFollow

__all__ = ["PolicyConfig", "PolicyMemory", "ChainPolicy", "PlanPolicy", "TreePolicy", "GreedyFollowAtZero",
           "with_policy", "CALIBRATION_BINS", "CARRY_TOKENS"]

#: Bins of the chain policy's acceptance calibration g(c) over the draft probability c in [0, 1].
CALIBRATION_BINS = 8
#: At most this many verified tokens' worth of carried statistics seed a decode call (older
#: evidence is scaled down to it), so what a `PolicyMemory` carries informs the calibration but
#: does not freeze it.
CARRY_TOKENS = 64


class PolicyMemory:
    """Verified-token statistics carried from one decode call to the next (module docstring):
    per policy kind, the sums over rows and calls of its counts (float64 tensors on the CPU)."""

    def __init__(self):
        self.counts: dict[str, torch.Tensor] = {}

    def seed(self, counts: dict, examined: str) -> dict:
        """Per-row starting counts {name: [B, ...]} for a call: the carried sums broadcast to every
        row, all scaled by min(1, CARRY_TOKENS / carried `examined` total); `counts` (zeros of the
        right shapes) where nothing is carried yet, for every name or for that name alone."""
        if examined not in self.counts:
            return counts
        scale = min(1.0, CARRY_TOKENS / max(float(self.counts[examined].sum()), 1e-300))
        return {name: (self.counts[name].to(value.device) * scale).expand_as(value).clone()
                if name in self.counts else value for name, value in counts.items()}

    def add(self, increments: dict) -> None:
        """Add a verified iteration's per-row counts {name: [B, ...]} (summed over rows)."""
        for name, value in increments.items():
            total = value.sum(0).double().cpu()
            self.counts[name] = self.counts[name] + total if name in self.counts else total


@dataclass(frozen=True)
class PolicyConfig:
    """What the policy needs besides the drafter: the measured `costs`, the calibration prior's
    weight (pseudo-tokens, >= 0), the calibration's bins and an optional `PolicyMemory`.

    Raises:
        TypeError / ValueError: costs not a CostModel; a negative weight; bins < 1; a memory that
        is not a PolicyMemory.
    """

    costs: CostModel
    calibration_weight: float = CALIBRATION.default
    bins: int = CALIBRATION_BINS
    memory: PolicyMemory | None = None

    def __post_init__(self):
        if not isinstance(self.costs, CostModel):
            raise TypeError(f"costs: policy 'auto' needs a verispec.reference.costs.CostModel, got "
                            f"{type(self.costs).__name__}")
        w = self.calibration_weight
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not w >= 0:
            raise ValueError(f"calibration_weight: expected a number >= 0, got {w!r}")
        if isinstance(self.bins, bool) or not isinstance(self.bins, int) or self.bins < 1:
            raise ValueError(f"bins: expected an int >= 1, got {self.bins!r}")
        if self.memory is not None and not isinstance(self.memory, PolicyMemory):
            raise TypeError(f"memory: expected a PolicyMemory, got {type(self.memory).__name__}")

    def seed(self, counts: dict, examined: str) -> dict:
        """`counts` seeded from the memory (`PolicyMemory.seed`), or as given without one."""
        return counts if self.memory is None else self.memory.seed(counts, examined)

    def remember(self, increments: dict) -> None:
        if self.memory is not None:
            self.memory.add(increments)


class _CostTables:
    """A `CostModel`'s forward prices as device tensors: seconds(model, r, n) for r = 1..R rows at
    per-row cache lengths n, by one multiply-add (`ForwardCost.table`)."""

    def __init__(self, costs: CostModel, max_rows: int, device):
        def as_tensors(cost):
            base, slope = cost.table(max_rows)  # [R] each
            return (torch.tensor(base, dtype=torch.float64, device=device),
                    torch.tensor(slope, dtype=torch.float64, device=device))

        self.draft, self.target, self.overhead = as_tensors(costs.draft), as_tensors(costs.target), costs.overhead_s

    @staticmethod
    def seconds(table, rows: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        """Seconds of forwards of `rows` (int64, any shape [B, ...], 1-based) at cache lengths n [B]."""
        base, slope = table
        index = (rows - 1).clamp(0, base.numel() - 1)
        shape = (-1,) + (1,) * (rows.dim() - 1)
        return base[index] + slope[index] * n.view(shape).double()


def _shrunk_ratio(measured: torch.Tensor, predicted: torch.Tensor, w: float) -> torch.Tensor:
    """(w + measured) / (w + predicted) per row [B] (float64), 1 where w + predicted is 0: how far
    measured tokens run ahead of predicted ones, shrunk towards 1 by w pseudo-tokens (TreePolicy's
    rho, the runner-up leaves' scale)."""
    ratio = (w + measured) / (w + predicted).clamp(min=1e-300)
    return torch.where(w + predicted > 0, ratio, torch.ones_like(ratio))


class ChainPolicy:
    """`keeps_drafting` per drawn token, batched, with a per-row online calibration (module doc)."""

    def __init__(self, config: PolicyConfig, max_length: int, leaves: bool = False):
        self.config, self.M, self.leaves = config, max_length, leaves
        self.leaf_base = None  # the first leaf's node id in the last grown tree (None: no leaves)
        self._kept, self._ended = [], []  # leaves kept, paths that ended in a leaf: [B] per iteration

    def start(self, batch: int, device) -> None:
        bins = self.config.bins
        self.tables = _CostTables(self.config.costs, (2 if self.leaves else 1) * self.M + 1, device)
        self.centres = (torch.arange(bins, device=device, dtype=torch.float64) + 0.5) / bins  # [bins]
        zeros = torch.zeros(batch, bins, dtype=torch.float64, device=device)  # [B, bins]
        leaf = {"leaf_predicted": zeros[:, 0], "leaf_accepted": zeros[:, 0]} if self.leaves else {}
        counts = self.config.seed({"chain_seen": zeros, "chain_accepted": zeros, **leaf}, "chain_seen")
        self.seen, self.accepted = counts["chain_seen"], counts["chain_accepted"]  # verified tokens per bin
        self.leaf_predicted = counts.get("leaf_predicted", zeros[:, 0])  # sum of kept leaves' W [B]
        self.leaf_accepted = counts.get("leaf_accepted", zeros[:, 0])  # leaves accepted [B]
        self.confidence = torch.zeros(batch, self.M, dtype=torch.float64, device=device)  # c per depth [B, M]

    def select(self, rows: torch.Tensor) -> None:
        self.seen, self.accepted, self.confidence = self.seen[rows], self.accepted[rows], self.confidence[rows]
        self.leaf_predicted, self.leaf_accepted = self.leaf_predicted[rows], self.leaf_accepted[rows]

    def calibration(self) -> torch.Tensor:
        """g per row and bin [B, bins], shrunk in two levels with weight w: each bin towards the
        row's pooled rate, the pooled rate towards the bin's centre,
        g_b = (accepted_b + w m_b) / (seen_b + w), m_b = (accepted + w centre_b) / (seen + w)
        (sums over bins for the pooled rate), so a few verified tokens move every bin, not only
        their own; the centre where nothing is known (w = 0 and no token seen)."""
        w = self.config.calibration_weight
        seen, accepted = self.seen.sum(1, keepdim=True), self.accepted.sum(1, keepdim=True)  # [B, 1]
        pooled = torch.where(seen + w > 0, (accepted + w * self.centres) / (seen + w).clamp(min=1e-300),
                             self.centres)  # [B, bins]
        total = self.seen + w
        return torch.where(total > 0, (self.accepted + w * pooled) / total.clamp(min=1e-300), pooled)

    def begin(self, cache_length: torch.Tensor) -> None:
        """A new iteration at cache lengths [B]: price every chain length d = 0..M ([B, M + 1])."""
        B, M = cache_length.shape[0], self.M
        d = torch.arange(M + 1, device=cache_length.device).expand(B, M + 1)  # [B, M + 1]
        one = self.tables.seconds(self.tables.draft, torch.ones_like(cache_length), cache_length)  # [B]
        self.prices = d * one.unsqueeze(1) + self.tables.seconds(self.tables.target, d + 1, cache_length) \
            + self.tables.overhead  # [B, M + 1]
        self.g = self.calibration()  # [B, bins], fixed for the iteration
        self.survive = torch.ones(B, dtype=torch.float64, device=cache_length.device)  # prod a_i [B]
        self.tokens = torch.ones_like(self.survive)  # E_d [B]
        self.confidence = torch.zeros(B, M, dtype=torch.float64, device=cache_length.device)  # c per depth
        self.n, self.leaf_weight = cache_length, torch.zeros_like(self.survive)  # kept leaves' W [B]
        self.runner = torch.zeros(B, M, dtype=torch.long, device=cache_length.device)  # runner-up per depth
        self.runner_p = torch.zeros(B, M, dtype=torch.float64, device=cache_length.device)  # its rho

    def stops(self, confidence: torch.Tensor, depth: torch.Tensor, going: torch.Tensor, caps: torch.Tensor,
              logits: torch.Tensor | None = None, token: torch.Tensor | None = None) -> torch.Tensor:
        """After the token [B] of draft probability confidence [B] drawn at depth [B] (tokens before
        it) by the going rows [B]: True where drafting more does not pay within caps [B]. With
        leaves, the draft's logits [B, V] at that depth give the runner-up (`grow`)."""
        bins = self.g.shape[1]
        c = confidence.double()
        if self.leaves and logits is not None:
            self._runner_up(logits, token, c, depth, going)
        a = self.g.gather(1, (c * bins).long().clamp(0, bins - 1).unsqueeze(1))[:, 0]  # [B]
        self.survive = torch.where(going, self.survive * a, self.survive)
        self.tokens = torch.where(going, self.tokens + self.survive, self.tokens)
        M = self.M
        at = depth.clamp(max=M - 1).unsqueeze(1)  # [B, 1]
        self.confidence.scatter_(1, at, torch.where(going, c, self.confidence.gather(1, at)[:, 0]).unsqueeze(1))
        d = (depth + 1).clamp(max=M)  # tokens drafted with this one [B]
        j = torch.arange(1, M + 1, device=c.device)  # [M]
        gain = self.survive.unsqueeze(1) * (a.unsqueeze(1) ** j).cumsum(1)  # [B, M]
        later = (d.unsqueeze(1) + j).clamp(max=M)  # [B, M]
        now = self.prices.gather(1, d.unsqueeze(1))  # [B, 1]
        better = (self.tokens.unsqueeze(1) + gain) * now > self.tokens.unsqueeze(1) * self.prices.gather(1, later)
        better &= (d.unsqueeze(1) + j) <= torch.minimum(caps, torch.full_like(caps, M)).unsqueeze(1)
        return ~better.any(1)

    def _runner_up(self, logits, token, c, depth, going) -> None:
        """Record each going row's runner-up token (the larger of the top two logits [B, V] that is
        not the drawn token [B]) at its depth, with rho = c exp(l_runner - l_token): its draft
        probability at the temperature c was read at."""
        top = logits.topk(2, dim=-1)  # values, indices [B, 2]
        first = top.indices[:, 0] == token  # [B]
        runner = torch.where(first, top.indices[:, 1], top.indices[:, 0])  # [B]
        gap = torch.where(first, top.values[:, 1], top.values[:, 0]) - logits.gather(1, token.unsqueeze(1))[:, 0]
        at = depth.clamp(max=self.M - 1).unsqueeze(1)  # [B, 1]
        for table, value in ((self.runner, runner), (self.runner_p, c * torch.exp(gap.double()))):
            table.scatter_(1, at, torch.where(going, value, table.gather(1, at)[:, 0]).unsqueeze(1))

    def grow(self, tree: DraftTree, drafter) -> DraftTree:
        """The chain tree (node j = depth j, N = 1 + l nodes) with the runner-up leaves that pay
        (module docstring) at a greedy target with leaves on; else the tree as it is. The k kept
        leaves of a row follow its chain as nodes N..N + k - 1, in depth order (padding after them:
        k is the fullest row's); a leaf of depth j hangs below chain node j - 1. q is dropped
        (greedy sample-and-follow reads none) and `drafter.fed` marks the leaves unfed."""
        self.leaf_base = None
        B, N = tree.tokens.shape
        if not self.leaves or drafter.temperature != 0 or N < 2:
            return tree
        l, bins, w = N - 1, self.g.shape[1], self.config.calibration_weight
        valid = tree.real[:, 1:]  # [B, l]: chain node j exists
        a = self.g.gather(1, (self.confidence[:, :l] * bins).long().clamp(0, bins - 1))  # [B, l]
        survive = torch.cat([torch.ones_like(a[:, :1]), a.cumprod(1)[:, :-1]], 1)  # [B, l]: to depth j - 1
        weight = torch.where(valid, survive * self.runner_p[:, :l], 0.0)  # W [B, l]
        scale = _shrunk_ratio(self.leaf_accepted, self.leaf_predicted, w)  # [B], as TreePolicy's rho
        order = torch.where(valid, weight, -1.0).sort(dim=1, descending=True, stable=True)
        m = torch.arange(1, l + 1, device=valid.device).expand(B, l)  # [B, l]: leaves kept
        chain_rows = 1 + valid.sum(1, keepdim=True)  # [B, 1]: the root and the chain
        base = self.prices.gather(1, chain_rows - 1)  # [B, 1]: C(l)
        target = self.tables.target
        extra = self.tables.seconds(target, chain_rows + m, self.n) - self.tables.seconds(target, chain_rows, self.n)
        tokens = self.tokens.unsqueeze(1)  # [B, 1]: E_l
        ratio = (tokens + scale.unsqueeze(1) * order.values.clamp(min=0).cumsum(1)) / (base + extra)  # [B, l]
        ratio = torch.where(m < chain_rows, ratio, -1.0)
        best = torch.where(ratio.amax(1) > (tokens / base)[:, 0], ratio.argmax(1) + 1, 0)  # [B]; 0: none pays
        keep = torch.zeros_like(valid).scatter_(1, order.indices, m <= best.unsqueeze(1)) & valid  # [B, l]
        self.leaf_weight, self.leaf_base = (weight * keep).sum(1), N
        self._kept.append(keep.sum(1).cpu())
        k = int(keep.sum(1).max())  # read back: the tree's width
        slot = torch.where(keep, keep.long().cumsum(1) - 1, k)  # [B, l]: column k collects the unkept

        def packed(values, fill):  # [B, l] by depth -> [B, k], each row's kept leaves first
            return torch.full((B, k + 1), fill, dtype=values.dtype, device=values.device).scatter_(1, slot, values)[:, :k]

        drafter.fed = torch.cat([drafter.fed[:, :N], drafter.fed.new_full((B, k), -1)], 1)
        return replace(tree, tokens=torch.cat([tree.tokens, packed(self.runner[:, :l], 0)], 1), q=None, chain=False,
                       parents=torch.cat([tree.parents, packed(m - 1, 0)], 1), depth=l,
                       real=torch.cat([tree.real, packed(keep, False)], 1))

    def observe(self, drafted: torch.Tensor, tau: torch.Tensor, active: torch.Tensor,
                nodes: torch.Tensor | None = None) -> None:
        """Learn from a verified iteration: drafted [B] tokens, tau [B] accepted, active [B] rows
        whose chain the draft model drafted (token i was examined iff i <= tau, accepted iff i < tau);
        nodes [B, D], the accepted node ids: a path that ends in a leaf (`grow`) accepted one chain
        token fewer than tau."""
        if self.leaf_base is not None and nodes is not None:
            last = nodes.gather(1, (tau - 1).clamp(min=0).unsqueeze(1))[:, 0]  # [B]
            ended = (tau > 0) & (last >= self.leaf_base)  # [B]
            self._ended.append(ended.cpu())
            tau = tau - ended.long()
            self.leaf_predicted, self.leaf_accepted = self.leaf_predicted + self.leaf_weight, self.leaf_accepted + ended
            self.config.remember({"leaf_predicted": self.leaf_weight, "leaf_accepted": ended.double()})
        i = torch.arange(self.M, device=tau.device)  # [M]
        examined = (i < drafted.unsqueeze(1)) & (i <= tau.unsqueeze(1)) & active.unsqueeze(1)  # [B, M]
        bins = self.seen.shape[1]
        where = (self.confidence * bins).long().clamp(0, bins - 1)  # [B, M]
        seen = torch.zeros_like(self.seen).scatter_add_(1, where, examined.double())  # [B, bins]
        accepted = torch.zeros_like(self.seen).scatter_add_(1, where, (examined & (i < tau.unsqueeze(1))).double())
        self.seen, self.accepted = self.seen + seen, self.accepted + accepted
        self.config.remember({"chain_seen": seen, "chain_accepted": accepted})

    def logs(self) -> dict:
        """With leaves at T = 0, per (row, iteration): "leaves_kept" and "leaf_tokens" (1 where the
        accepted path ended in a leaf) int64."""
        if not self._kept:
            return {}
        return {"leaves_kept": torch.cat(self._kept), "leaf_tokens": torch.cat(self._ended).long()}


class PlanPolicy:
    """`planned_length` per row before the draws (module docstring)."""

    def __init__(self, config: PolicyConfig, draft_length: int, num_paths: int):
        self.config, self.L, self.K = config, draft_length, num_paths

    def start(self, batch: int, device) -> None:
        self.tables = _CostTables(self.config.costs, 1 + self.K * self.L, device)
        zeros = torch.zeros(batch, dtype=torch.float64, device=device)  # [B]
        counts = self.config.seed({"plan_seen": zeros, "plan_accepted": zeros}, "plan_seen")
        self.seen, self.accepted = counts["plan_seen"], counts["plan_accepted"]  # tokens examined, accepted

    def select(self, rows: torch.Tensor) -> None:
        self.seen, self.accepted = self.seen[rows], self.accepted[rows]

    def acceptance(self) -> torch.Tensor:
        """[B]: (accepted + w / 2) / (seen + w), 1/2 where nothing is known."""
        w = self.config.calibration_weight
        total = self.seen + w
        return torch.where(total > 0, (self.accepted + w / 2) / total.clamp(min=1e-300), torch.full_like(total, 0.5))

    def plan(self, cache_length: torch.Tensor) -> int:
        """The iteration's L: the longest of the rows' L in 1..L maximising E[tokens] / seconds
        (ties: the shorter), one L for the batch since the multi-path rules take paths of one
        length (B = 1: the row's own)."""
        B, K = cache_length.shape[0], self.K
        L = torch.arange(1, self.L + 1, device=cache_length.device).expand(B, self.L)  # [B, L]
        a = self.acceptance().unsqueeze(1)  # [B, 1]
        tokens = 1 + (1 - (1 - a ** L) ** K).cumsum(1)  # [B, L]
        draft = self.tables.seconds(self.tables.draft, torch.full_like(cache_length, K), cache_length)  # [B]
        seconds = L * draft.unsqueeze(1) + self.tables.seconds(self.tables.target, 1 + K * L, cache_length) \
            + self.tables.overhead  # [B, L]
        best = (tokens / seconds).argmax(1) + 1  # [B]; the first maximum: the shorter L
        self.length = int(best.max())
        return self.length

    def observe(self, tree, verdict) -> None:
        tau = verdict.tau  # [B]
        seen, accepted = (tau + 1).clamp(max=self.length).double(), tau.double()
        self.seen, self.accepted = self.seen + seen, self.accepted + accepted
        self.config.remember({"plan_seen": seen, "plan_accepted": accepted})


class TreePolicy:
    """`best_budget` per row on the drafted tree, W calibrated by rho (module docstring)."""

    def __init__(self, config: PolicyConfig, node_budget: int):
        self.config, self.n = config, node_budget

    def start(self, batch: int, device) -> None:
        self.tables = _CostTables(self.config.costs, 1 + self.n, device)
        zeros = torch.zeros(batch, dtype=torch.float64, device=device)  # [B]
        counts = self.config.seed({"tree_predicted": zeros, "tree_measured": zeros}, "tree_predicted")
        self.measured, self.predicted = counts["tree_measured"], counts["tree_predicted"]  # sum tau, sum E[A]

    def select(self, rows: torch.Tensor) -> None:
        self.measured, self.predicted = self.measured[rows], self.predicted[rows]

    def begin(self, cache_length: torch.Tensor) -> None:
        self.cache_length = cache_length

    def cut(self, weight: torch.Tensor, chosen: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
        """The chosen records bool [B, R] (weights W [B, R], layer depth [R]) cut to each row's
        best budget m: its m largest-W chosen records (ties: earlier records, so a subtree)."""
        n, n_len = self.n, self.cache_length
        w = self.config.calibration_weight
        rho = _shrunk_ratio(self.measured, self.predicted, w)  # [B]
        ranked = torch.where(chosen, weight, -1.0)  # [B, R]
        order = torch.sort(ranked, dim=1, descending=True, stable=True).indices[:, :n]  # [B, n']
        top = ranked.gather(1, order).clamp(min=0.0)  # [B, n']
        m = torch.arange(1, top.shape[1] + 1, device=weight.device).expand_as(top)  # [B, n']
        layers = torch.where(chosen, depth.unsqueeze(0), 0).amax(1)  # [B]: the tree's depth
        one = self.tables.seconds(self.tables.draft, torch.ones_like(n_len), n_len)  # [B]
        seconds = (layers * one).unsqueeze(1) + self.tables.seconds(self.tables.target, 1 + m, n_len) \
            + self.tables.overhead  # [B, n']
        ratio = (1 + rho.unsqueeze(1) * top.cumsum(1)) / seconds  # [B, n']
        ratio = torch.where(m <= chosen.sum(1, keepdim=True), ratio, -1.0)
        best = ratio.argmax(1, keepdim=True) + 1  # [B, 1]: the first maximum, the smaller m
        keep = torch.zeros_like(chosen).scatter_(1, order, m <= best)
        self.kept = torch.where(keep, weight, 0.0).sum(1)  # predicted E[A] of the kept tree [B]
        return keep & chosen

    def observe(self, tree, verdict) -> None:
        measured = verdict.tau.double()
        self.measured, self.predicted = self.measured + measured, self.predicted + self.kept
        self.config.remember({"tree_measured": measured, "tree_predicted": self.kept})


class GreedyFollowAtZero:
    """A method's verifier at T > 0; at T = 0, sample-and-follow (greedy), which reads the
    runner-up leaves `ChainPolicy.grow` hangs below the chain (module docstring)."""

    trusted, capturable = True, False

    def __init__(self, verifier):
        self.verifier, self.follow = verifier, SampleAndFollow()
        self.name, self.needs_q = getattr(verifier, "name", "verifier"), getattr(verifier, "needs_q", True)

    def __call__(self, p, tree, source, temperature, rows=None):
        rule = self.follow if temperature == 0 else self.verifier
        return rule(p, tree, source, temperature, rows)


def with_policy(method, policy: str = POLICY.default, costs: CostModel | None = None,
                calibration_weight: float = CALIBRATION.default, memory: PolicyMemory | None = None,
                leaves: str = LEAVES.default):
    """`method` (a `TorchMethod`) with its draft length / node budget chosen per iteration by the
    cost policy (``policy="auto"``, needs `costs`), or unchanged (``"fixed"``). The verifier is
    untouched, except at T = 0 with leaves (below). Chains cut by a stop (adaptive, hybrid) get `ChainPolicy`, trees `TreePolicy`,
    fixed-length paths `PlanPolicy`; `memory` (a `PolicyMemory`) carries their statistics across
    decode calls. ``leaves="on"`` (the adaptive chain under "auto"): runner-up leaves at T = 0,
    verified by `GreedyFollowAtZero` (module docstring).

    Raises:
        ValueError naming ``policy``: not one of "fixed" / "auto", or a drafter with no length or
            budget to choose (prompt lookup, phrase pools). ValueError naming ``leaves``: not
            "off" / "on", or "on" without "auto" or on a method other than the adaptive chain.
            TypeError / ValueError: bad costs or calibration_weight (`PolicyConfig`).
    """
    if policy not in POLICIES:
        raise ValueError(f"policy: expected one of {', '.join(POLICIES)}, got {policy!r}")
    if leaves not in LEAVES.choices:
        raise ValueError(f"leaves: expected one of {', '.join(LEAVES.choices)}, got {leaves!r}")
    if policy == "fixed":
        if leaves == "on":
            raise ValueError("leaves: 'on' needs policy 'auto' (the measured costs decide which leaves pay)")
        return method
    config = PolicyConfig(costs, calibration_weight, memory=memory)
    probe, make = method.drafter(), method.drafter
    if leaves == "on" and type(probe) is not AdaptiveChainDrafter:
        raise ValueError(f"leaves: 'on' is for the adaptive chain, not method {method.name!r}")
    if isinstance(probe, AdaptiveChainDrafter):
        def attach(d): return ChainPolicy(config, d.max_length, leaves == "on")
    elif isinstance(probe, TreeDrafter):
        def attach(d): return TreePolicy(config, d.n)
    elif isinstance(probe, PathsDrafter):
        def attach(d): return PlanPolicy(config, d.L, d.K)
    else:
        raise ValueError(f"policy: method {method.name!r} has no draft length or node budget to choose")

    def drafter():
        out = make()
        out.policy = attach(out)
        return out

    if leaves == "off":
        return replace(method, drafter=drafter, params={**method.params, "policy": "auto"})
    return replace(method, drafter=drafter, verifier=GreedyFollowAtZero(method.verifier),
                   params={**method.params, "policy": "auto", "leaves": "on"})
