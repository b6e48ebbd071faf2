"""Draft trees on real causal LMs: OPT-Tree (adaptive) and static baselines, verified in one target forward.

`tree_speculative(...)` runs the draft-verify loop with a draft *tree* per iteration:

- ``"opt_tree"``: OPT-Tree (Wang et al. 2024, arXiv 2406.17276, Algorithm 1), the same construction
  as the reference `verispec.reference.drafters.opt_tree_structure`: a node's weight W is the product
  of draft probabilities on its root path; layer 1 = the top-n children of the root, each next layer
  = the global top-n by W over the top-n children of every node of the previous layer; after each
  layer E[A] = sum of the n largest W seen so far, stop when its gain is <= threshold or at max_depth;
  the tree = the n largest-W nodes (a subtree: W shrinks along paths, ties go to the shallower node).
- static baselines at the same node budget n (`static_shape`): ``"chain"`` (the draft's top-1 path),
  ``"kary"`` (the top-k children of every node, breadth first, until n nodes) and ``"eagle"`` (a
  fixed EAGLE-style shape, at most 4 children per node and biased to the leftmost child: the n
  rank paths with the largest product of the fixed rank priors `EAGLE_RANK_PRIOR`).

Every tree is capped at `max_depth`. Drafting costs exactly ONE draft forward per layer: the first
one runs the tokens emitted last iteration that the draft cache lacks ("pending", 1 or 2) and gives
the root's q; each later one runs all nodes of the previous layer at once under a 4D float mask in
which a node sees the valid prefix, its own ancestors and itself (never a sibling: the mask is built
from each node's own ancestry, not accumulated across layers). The deepest layer is never forwarded
(its q is not needed). The original code's defects are avoided: its draft-side mask was never reset
and it spent one extra draft forward per step.

Exact pruning (default, `prune=True`): a layer forward feeds only the nodes whose children can
still matter. Once n nodes are recorded, a node x with W_x <= the n-th largest W so far is not run:
each descendant has W <= W_x and n earlier records rank ahead of it (ties go to earlier records),
so it can never be chosen nor raise E[A]; removing such candidates only ever lets in others that are
dominated the same way. The final tree and E[A] are the same as without pruning (tested), a layer
costs its useful rows instead of n (the first layer keeps all n), and drafting stops as soon as a
layer has nothing worth running. On hardware where a forward's cost grows with its rows (a CPU:
`benchmarks/bench_rows.py`) this is most of OPT-Tree's draft cost.

Verification: the whole tree (root = the last emitted token) in ONE target forward
(`CausalLM.tree`: additive float mask, position ids = prefix length + depth), then sample-and-follow
(the reference `verispec.reference.verifiers.tree.sample_and_follow`): at the current node draw
Y ~ p(. | node) (one uniform, inverse CDF; T = 0: the argmax, no uniform); if Y is a drafted child
enter it, else Y is the correction (the bonus at a leaf). Every emitted token is an exact draw from p,
so the rule is lossless for ANY tree; the rule never reads q. Hence, as in the reference `opt_tree`
method, the drafts are deterministic top-n trees at every temperature, and the draft temperature
(the q that shapes the tree and gives E[A]) is free (default: T, or 1 at T = 0, since a one-hot q
would collapse every tree to a chain). Sampling the drafts is only needed by rules that read q
(min(1, p/q) acceptance, e.g. `rrs`); sample-and-follow does not.

Caches: the target keeps the accepted path's positions (`_Cache.keep`, a gather of the kept
positions); the draft keeps the accepted nodes it has already run (those above the deepest layer),
the rest of the accepted tokens (at most one) and the new token are "pending" for the next
iteration. Rows of a batch are independent runs in lockstep (each row its own tree; B = 1 is the
common case and gives exactly one draft forward per layer of its tree).
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field

import torch

from ..reference.drafters import check_threshold
from .decode import (DecodeResult, DecodeStats, _Cache, _check_pair, _check_positive, _check_prompt,
                     _check_temperature, probabilities)
from .model import CausalLM
from .uniforms import as_uniform_source, categorical

__all__ = ["TREES", "EAGLE_RANK_PRIOR", "TreeDecodeStats", "DraftTree", "static_shape", "draft_tree",
           "tree_speculative"]

#: The tree kinds of `tree_speculative`.
TREES = ("opt_tree", "chain", "kary", "eagle")

#: Fixed prior of the rank-r child (r = 0..3) for the EAGLE-style static tree: a node's static score is
#: the product over its rank path; the tree is the n best-scoring rank paths (leftmost-biased, <= 4
#: children per node, like EAGLE's hand-made top-4/top-3/top-2 trees).
EAGLE_RANK_PRIOR = (0.6, 0.15, 0.07, 0.04)


# ----------------------------------------------------------------------------------------------
# Results
# ----------------------------------------------------------------------------------------------

@dataclass
class TreeDecodeStats(DecodeStats):
    """`DecodeStats` plus per-(row, iteration) tree logs, in the order of `accepted_lengths`.

    Attributes:
        tree, node_budget: the tree kind and budget n.
        predicted_acceptance: float64 [num_row_iterations]: the drafted tree's E[A] = sum of W over its
            nodes (the draft's own expected accepted length, OPT-Tree's objective).
        tree_sizes: int64 [num_row_iterations]: nodes drafted (<= n).
        layers: int64 [num_row_iterations]: tree layers built = draft forwards that row's tree needed.
        draft_rows: token rows fed to the draft while drafting (`DraftTree.draft_rows`, summed).
    """

    tree: str = "opt_tree"
    node_budget: int = 0
    predicted_acceptance: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.float64))
    tree_sizes: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    layers: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    draft_rows: int = 0

    @property
    def mean_predicted_acceptance(self) -> float:
        """Mean predicted E[A] per iteration (compare with `mean_accepted`, the measured E[tau])."""
        n = self.predicted_acceptance.numel()
        return float(self.predicted_acceptance.mean()) if n else 0.0


@dataclass
class DraftTree:
    """The drafted trees of a batch, as records appended layer by layer (each layer padded).

    Attributes:
        tokens: int64 [B, R]: a record's token. parent: int64 [B, R]: its parent's record index
            (-1: a child of the root). depth: int64 [R] (1 = child of the root).
        weight: float64 [B, R]: W, the product of draft probabilities on the root path.
        chosen: bool [B, R]: the record is a node of the final tree (padding and dropped nodes: False).
        slot: int64 [B, R]: its position in the draft cache, -1 if it was not run by the draft.
        layers: int64 [B]: layers built per row (= draft forwards of the row).
        draft_forwards: draft forwards spent drafting (the max of `layers` over rows).
        draft_rows: token rows fed to the draft by those forwards (2 pending columns, then per
            layer the nodes run, padded to the row that runs most); the draft's cost on a CPU.
    """

    tokens: torch.Tensor
    parent: torch.Tensor
    depth: torch.Tensor
    weight: torch.Tensor
    chosen: torch.Tensor
    slot: torch.Tensor
    layers: torch.Tensor
    draft_forwards: int
    draft_rows: int = 0

    @property
    def predicted_acceptance(self) -> torch.Tensor:
        """float64 [B]: E[A] = sum of W over the chosen nodes."""
        return torch.where(self.chosen, self.weight, 0.0).sum(-1)

    def nodes(self, row: int = 0) -> dict:
        """Row `row`'s tree as {node tuple: W} (node = token path from the root, root excluded)."""
        tokens, parent = self.tokens[row].tolist(), self.parent[row].tolist()
        chosen, weight = self.chosen[row].tolist(), self.weight[row].tolist()
        paths: dict[int, tuple] = {}
        for r in range(len(tokens)):  # records are in layer order: a parent comes first
            if chosen[r]:
                paths[r] = (paths[parent[r]] if parent[r] >= 0 else ()) + (tokens[r],)
        return {paths[r]: weight[r] for r in paths}


# ----------------------------------------------------------------------------------------------
# Static shapes
# ----------------------------------------------------------------------------------------------

def static_shape(tree: str, node_budget: int, max_depth: int, branching: int = 2) -> list[tuple[int, ...]]:
    """The rank paths of a static tree, breadth first (depth, then lexicographic).

    A rank path (r_1, .., r_d) is the node reached by taking the r_1-th most likely child of the root
    under the draft, then the r_2-th most likely child of that, ... (rank 0 = the draft's argmax).

    Args:
        tree: "chain" (min(n, max_depth) nodes), "kary" (every node has `branching` children, filled
            breadth first), or "eagle" (the n rank paths with the largest product of `EAGLE_RANK_PRIOR`).
        node_budget: n >= 1. max_depth: >= 1. branching: k >= 1 (kary only).

    Returns:
        list of at most n rank-path tuples, closed under taking parents.

    Raises:
        ValueError: unknown static tree. TypeError / ValueError: non-positive ints.
    """
    n = _check_positive(node_budget, "node_budget")
    depth = _check_positive(max_depth, "max_depth")
    k = _check_positive(branching, "branching")
    if tree == "chain":
        return [(0,) * d for d in range(1, min(n, depth) + 1)]
    if tree == "kary":
        out: list[tuple[int, ...]] = []
        frontier: list[tuple[int, ...]] = [()]
        while frontier and len(out) < n:
            nxt = [u + (r,) for u in frontier if len(u) < depth for r in range(k)]
            out += nxt[:n - len(out)]
            frontier = nxt
        return out
    if tree == "eagle":
        heap = [(-EAGLE_RANK_PRIOR[r], 1, (r,)) for r in range(len(EAGLE_RANK_PRIOR))]
        heapq.heapify(heap)
        out = []
        while heap and len(out) < n:  # best first: scores shrink along paths, so a subtree
            neg, d, u = heapq.heappop(heap)
            out.append(u)
            if d < depth:
                for r, prior in enumerate(EAGLE_RANK_PRIOR):
                    heapq.heappush(heap, (neg * prior, d + 1, u + (r,)))
        return sorted(out, key=lambda u: (len(u), u))
    raise ValueError(f"tree: unknown static tree {tree!r}; known: chain, kary, eagle")


def _shape_layers(paths: list[tuple[int, ...]], device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per depth d >= 1: (parent position in layer d-1 [m_d], rank [m_d]) of a BFS-ordered shape."""
    layers, index = [], {(): 0}
    for d in range(1, max((len(u) for u in paths), default=0) + 1):
        layer = [u for u in paths if len(u) == d]
        layers.append((torch.tensor([index[u[:-1]] for u in layer], dtype=torch.long, device=device),
                       torch.tensor([u[-1] for u in layer], dtype=torch.long, device=device)))
        index = {u: j for j, u in enumerate(layer)}
    return layers


# ----------------------------------------------------------------------------------------------
# Drafting: one draft forward per layer
# ----------------------------------------------------------------------------------------------

def _self_visibility(slot: torch.Tensor, S: int, c: int) -> torch.Tensor:
    """Which of a layer's c new cache slots each node sees: slot [B, m] (S + its packed index, -1 if
    not run) -> bool [B, m, c]: its own slot only. Siblings and cousins never see each other."""
    return slot.unsqueeze(-1) == S + torch.arange(c, device=slot.device)


def _child_visibility(allowed: torch.Tensor, parent: torch.Tensor) -> torch.Tensor:
    """A child sees exactly what its parent saw, plus the parent: allowed [B, m, S'] of the layer
    just run (its own position included), parent [B, m'] positions in that layer -> [B, m', S']."""
    return allowed.gather(1, parent.unsqueeze(-1).expand(-1, -1, allowed.shape[2]))


def _run_layer(dcache: _Cache, tokens, run, visible, position):
    """ONE draft forward over the nodes of a layer that are `run`: tokens / run [B, m], visible
    [B, m, S], position [B] (shared by the layer). Only those c = max_b(run.sum()) nodes are fed,
    packed to the left (a pruned or invalid node costs no row; rows with fewer pad with masked
    dummies). Returns (logits [B, m, V]: zero where not run, allowed [B, m, S + c], slot [B, m]: the
    node's draft-cache position, -1 where not run)."""
    model = dcache.model
    B, m = tokens.shape
    S, device = visible.shape[2], tokens.device
    c = int(run.sum(1).max())
    pick = torch.sort((~run).to(torch.int8), dim=1, stable=True).indices[:, :c]  # [B, c]: run nodes first
    real = run.gather(1, pick)  # [B, c]
    slot = torch.full((B, m), -1, dtype=torch.long, device=device)
    slot.scatter_(1, pick, torch.where(real, S + torch.arange(c, device=device), -1))
    allowed = torch.cat([visible, _self_visibility(slot, S, c)], dim=2)  # [B, m, S + c]
    packed = allowed.gather(1, pick.unsqueeze(-1).expand(-1, -1, S + c))  # [B, c, S + c]
    mask = torch.zeros(packed.shape, dtype=model.dtype, device=model.device)
    mask.masked_fill_(~packed, torch.finfo(model.dtype).min)  # additive float mask (EMPIRICAL.md)
    position_ids = position.unsqueeze(1).expand(B, c)  # [B, c]
    logits_c, _ = model.forward(torch.where(real, tokens.gather(1, pick), 0), dcache.cache,
                                position_ids=position_ids, attention_mask=mask.unsqueeze(1))  # [B, c, V]
    V = logits_c.shape[-1]
    logits = torch.zeros(B, m, V, dtype=logits_c.dtype, device=device)
    logits.scatter_(1, pick.unsqueeze(-1).expand(-1, -1, V), torch.where(real.unsqueeze(-1), logits_c, 0))
    # Tree slots are private to their descendants: never valid for later pending tokens.
    dcache.valid = torch.cat([dcache.valid, torch.zeros_like(real)], dim=1)
    return logits, allowed, slot


def _opt_children(q, weight, valid, n):
    """OPT-Tree's next layer: global top-n by W of the top-n children of every node.
    q [B, m, V], weight / valid [B, m] -> (tokens, parent position, W, valid), each [B, n']."""
    B, m, V = q.shape
    k = min(n, V)
    top_q, top_t = q.topk(k, dim=-1)  # [B, m, k], sorted descending
    w = weight.unsqueeze(-1) * top_q  # [B, m, k]
    ok = valid.unsqueeze(-1) & (top_q > 0)  # zero-probability children are never drafted
    w = torch.where(ok, w, -1.0).reshape(B, m * k)
    order = torch.sort(w, dim=1, descending=True, stable=True).indices[:, :min(n, m * k)]  # [B, n']
    new_w = w.gather(1, order)
    return top_t.reshape(B, m * k).gather(1, order), order // k, new_w.clamp(min=0.0), new_w > 0


def _static_children(q, weight, valid, parent_pos, rank):
    """A static layer: child j = the rank[j]-th most likely child of node parent_pos[j].
    q [B, m, V], weight / valid [B, m], parent_pos / rank [m'] -> (tokens, parent, W, valid) [B, m']."""
    B, m, V = q.shape
    top_q, top_t = q.topk(min(int(rank.max()) + 1, V), dim=-1)  # [B, m, k]
    in_vocab = rank < V  # a rank beyond the vocabulary is no node
    r = rank.clamp(max=V - 1)
    child_q = top_q[:, parent_pos, r]  # [B, m']
    ok = valid[:, parent_pos] & (child_q > 0) & in_vocab
    parent = parent_pos.unsqueeze(0).expand(B, -1)
    return top_t[:, parent_pos, r], parent, torch.where(ok, weight[:, parent_pos] * child_q, 0.0), ok


def _run_pending(dcache: _Cache, pending, pending_count, Td):
    """The first draft forward of an iteration: pending [B, 2] (the first pending_count [B] in {1, 2}
    are real) are the emitted tokens the draft cache lacks. Returns the root's q [B, 1, V]."""
    B, device = pending.shape[0], pending.device
    real = torch.arange(2, device=device) < pending_count.unsqueeze(1)  # [B, 2]
    logits = dcache.append(pending, torch.tensor([[-1, 0]], device=device).expand(B, 2), real)  # [B, 2, V]
    dcache.pos = dcache.pos + pending_count  # now the position id of the depth-1 nodes
    return probabilities(logits[torch.arange(B, device=device), pending_count - 1], Td).unsqueeze(1)


def _choose(cat: dict, tree: str, n: int) -> torch.Tensor:
    """The final tree, bool [B, R]: OPT-Tree keeps the n largest W over all layers (stable sort over
    layer-ordered records: ties go to the shallower node, so the set is a subtree); a static tree
    keeps every valid node of its shape."""
    if tree != "opt_tree":
        return cat["valid"]
    w_all = torch.where(cat["valid"], cat["weight"], -1.0)  # [B, R]
    order = torch.sort(w_all, dim=1, descending=True, stable=True).indices[:, :n]  # [B, n]
    return torch.zeros_like(cat["valid"]).scatter_(1, order, True) & cat["valid"]


def _draft(dcache: _Cache, pending, pending_count, tree, n, threshold, max_depth, Td, shape,
           prune: bool = True) -> DraftTree:
    """Draft one tree per row: layer by layer, ONE draft forward per layer (`_run_pending` for the
    root's q, then `_run_layer` for every layer but the deepest). shape: `_shape_layers` (static).
    prune (opt_tree): skip nodes whose descendants can never be chosen (same tree, fewer rows)."""
    B, device = pending.shape[0], pending.device
    q = _run_pending(dcache, pending, pending_count, Td)  # [B, 1, V]
    forwards, rows = 1, pending.shape[1]
    weight = torch.ones(B, 1, dtype=torch.float64, device=device)  # the root: W = 1
    valid = torch.ones(B, 1, dtype=torch.bool, device=device)
    allowed = dcache.valid.unsqueeze(1)  # [B, 1, S]: what the root's children see
    active = torch.ones(B, dtype=torch.bool, device=device)  # rows still growing
    layers = torch.zeros(B, dtype=torch.long, device=device)
    expected = torch.zeros(B, dtype=torch.float64, device=device)  # E[A] so far
    recs = {"tokens": [], "parent": [], "depth": [], "weight": [], "valid": [], "slot": []}
    total = prev_start = 0  # records so far; first record of the previous layer
    for depth in range(1, max_depth + 1):
        if tree == "opt_tree":
            tokens, parent, w, ok = _opt_children(q, weight, valid, n)  # each [B, m]
        else:
            tokens, parent, w, ok = _static_children(q, weight, valid, *shape[depth - 1])
        ok = ok & active.unsqueeze(1)
        m = tokens.shape[1]
        parent_rec = parent + prev_start if depth > 1 else torch.full_like(parent, -1)
        prev_start, total = total, total + m
        for key, value in (("tokens", tokens), ("parent", parent_rec), ("weight", w), ("valid", ok),
                           ("slot", torch.full_like(tokens, -1)),
                           ("depth", torch.full((m,), depth, dtype=torch.long, device=device))):
            recs[key].append(value)
        layers = layers + ok.any(1).long()
        run = ok  # [B, m]: this layer's nodes to forward
        if tree == "opt_tree":  # E[A] = sum of the n largest W so far; stop when it gains <= threshold
            all_w = torch.where(torch.cat(recs["valid"], 1), torch.cat(recs["weight"], 1), 0.0)  # [B, total]
            top = all_w.topk(min(n, total), dim=1).values  # [B, <= n], descending
            best = top.sum(1)  # [B]
            active = active & ok.any(1) & (best - expected > threshold)
            expected = best
            if prune and top.shape[1] == n:
                # Exact pruning: a descendant of a node with W <= the n-th largest W so far has
                # W <= it (W shrinks along paths) and n earlier records with W >= it ahead of it
                # (ties go to earlier records), so it never enters the final tree nor raises E[A].
                run = run & (w > top[:, n - 1:])
        else:
            active = active & ok.any(1) & (depth < len(shape))
        run = run & active.unsqueeze(1)
        if depth == max_depth or not bool(run.any()):
            break  # the deepest layer is never run: its q is not needed
        logits, allowed, slot = _run_layer(dcache, tokens, run, _child_visibility(allowed, parent),
                                           dcache.pos + depth - 1)  # position: prefix length + depth - 1
        forwards += 1
        rows += int(run.sum(1).max())
        recs["slot"][-1] = slot
        q, weight, valid = probabilities(logits, Td), w, run  # [B, m, V], [B, m], [B, m]
    cat = {key: torch.cat(value, dim=-1) for key, value in recs.items()}
    return DraftTree(cat["tokens"], cat["parent"], cat["depth"], cat["weight"], _choose(cat, tree, n),
                     cat["slot"], layers, forwards, rows)


# ----------------------------------------------------------------------------------------------
# Verification: one target forward, then sample-and-follow
# ----------------------------------------------------------------------------------------------

def _verification_block(dt: DraftTree, last: torch.Tensor):
    """The tree as one block for `CausalLM.tree`: block 0 = the root (`last` [B], emitted but not in
    the target cache), then the chosen records in record (= topological) order.

    Returns tokens, parents, real: [B, 1 + w] (parents index the block, -1 for the root) and
    order [B, w]: the record of each block position 1..w (padding: any record, real False)."""
    B, R = dt.chosen.shape
    device = last.device
    count = dt.chosen.sum(1)  # [B]
    width = int(count.max()) if R else 0
    order = torch.sort((~dt.chosen).long(), dim=1, stable=True).indices[:, :width]  # [B, w] chosen first
    is_node = torch.arange(width, device=device) < count.unsqueeze(1)  # [B, w]
    block_of = torch.full((B, R + 1), -1, dtype=torch.long, device=device)  # column R: a dummy
    block_of.scatter_(1, torch.where(is_node, order, R), torch.arange(1, width + 1, device=device).expand(B, -1))
    parent_rec = dt.parent.gather(1, order)  # [B, w]
    parent_block = torch.where(parent_rec >= 0, block_of.gather(1, parent_rec.clamp(min=0)), 0)
    ones = torch.ones(B, 1, dtype=torch.bool, device=device)
    tokens = torch.cat([last.unsqueeze(1), torch.where(is_node, dt.tokens.gather(1, order), 0)], dim=1)
    parents = torch.cat([-ones.long(), torch.where(is_node, parent_block, 0)], dim=1)
    return tokens, parents, torch.cat([ones, is_node], dim=1), order


def _sample_and_follow(p, tokens, parents, real, uniforms, greedy: bool, max_steps: int):
    """Sample-and-follow (reference `verifiers.tree.sample_and_follow`) on one block per row.

    p [B, N, V] target probabilities at every block position; uniforms [B, max_steps + 1] (one per
    visited node; unused when greedy). Returns (path [B, max_steps]: block index of the i-th
    accepted node, tau [B]: accepted nodes, y [B]: the correction / bonus token)."""
    B = p.shape[0]
    device = p.device
    rows = torch.arange(B, device=device)
    cur = torch.zeros(B, dtype=torch.long, device=device)
    alive = torch.ones(B, dtype=torch.bool, device=device)
    tau = torch.zeros(B, dtype=torch.long, device=device)
    y = torch.zeros(B, dtype=torch.long, device=device)
    path = torch.zeros(B, max_steps, dtype=torch.long, device=device)
    for step in range(max_steps + 1):
        here = p[rows, cur]  # [B, V]
        draw = here.argmax(-1) if greedy else categorical(here, uniforms[:, step])  # Y ~ p(. | node)
        y = torch.where(alive, draw, y)
        child = real & (parents == cur.unsqueeze(1)) & (tokens == draw.unsqueeze(1))  # [B, N]
        child[:, 0] = False  # the root is nobody's child
        enter = alive & child.any(1)  # siblings carry distinct tokens: at most one match
        if step < max_steps:
            path[:, step] = torch.where(enter, child.long().argmax(1), 0)
        tau = tau + enter.long()
        cur = torch.where(enter, child.long().argmax(1), cur)
        alive = enter
        if not bool(alive.any()):
            break
    return path, tau, y


# ----------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------

def _check_tree_args(tree, node_budget, threshold, max_depth, branching):
    """Validated (tree, n, threshold, max_depth, shape layers or None)."""
    if not isinstance(tree, str):
        raise TypeError(f"tree: expected a tree name string, got {type(tree).__name__}")
    if tree not in TREES:
        raise ValueError(f"tree: unknown tree {tree!r}; known: {', '.join(TREES)}")
    n = _check_positive(node_budget, "node_budget")
    delta = check_threshold(threshold)  # the reference's check: a number >= 0
    depth = _check_positive(max_depth, "max_depth")
    k = _check_positive(branching, "branching")
    shape = None if tree == "opt_tree" else static_shape(tree, n, depth, k)
    return tree, n, delta, depth, shape


def _draft_temperature(draft_temperature, T):
    if draft_temperature is None:
        return T if T > 0 else 1.0  # a one-hot q (T = 0) would make every tree a chain
    return _check_temperature(draft_temperature, "draft_temperature")


def draft_tree(draft: CausalLM, prefix_ids, tree: str = "opt_tree", node_budget: int = 50,
               threshold: float = 0.0, max_depth: int = 10, draft_temperature: float = 1.0,
               branching: int = 2, *, prune: bool = True) -> DraftTree:
    """Draft one tree after `prefix_ids` (the drafting step of `tree_speculative`, exposed for tests
    and analysis). Costs a prefill of all but the last prefix token plus one forward per layer.

    Args:
        draft: `CausalLM`. prefix_ids: int [B, n] or [n]. tree: one of `TREES`.
        node_budget: n >= 1. threshold: OPT-Tree's E[A]-gain threshold >= 0 (opt_tree only).
        max_depth: >= 1. draft_temperature: >= 0 (q = softmax(logits / T_d); 0: one-hot argmax).
        branching: k >= 1 children per node ("kary" only).
        prune: opt_tree only; False runs every top-n node of every layer, as the paper's code
            (the same tree, more draft rows; see the module docstring).

    Returns:
        `DraftTree` (use `.nodes(row)` for {node tuple: W} and `.predicted_acceptance`).

    Raises:
        TypeError / ValueError: as `tree_speculative`.

    Source: Wang et al. 2024, "OPT-Tree", arXiv 2406.17276, Algorithm 1 (opt_tree).
    """
    if not isinstance(draft, CausalLM):
        raise TypeError(f"draft: expected a CausalLM, got {type(draft).__name__}")
    tree, n, delta, depth, shape = _check_tree_args(tree, node_budget, threshold, max_depth, branching)
    Td = _check_temperature(draft_temperature, "draft_temperature")
    prefix = _check_prompt(prefix_ids, draft)
    dcache = _Cache(draft, prefix[:, :-1])
    pending = prefix[:, -1:].expand(-1, 2)
    count = torch.ones(prefix.shape[0], dtype=torch.long, device=prefix.device)
    layers = None if shape is None else _shape_layers(shape, prefix.device)
    return _draft(dcache, pending, count, tree, n, delta, depth, Td, layers, prune)


def tree_speculative(target: CausalLM, draft: CausalLM, prompt_ids, max_new_tokens: int, tree: str = "opt_tree",
                     node_budget: int = 50, threshold: float = 0.0, max_depth: int = 10,
                     temperature: float = 0.0, uniforms=None, *, draft_temperature: float | None = None,
                     branching: int = 2, prune: bool = True) -> DecodeResult:
    """Tree speculative decoding: a draft tree per iteration, verified in one target forward.

    Args:
        target, draft: `CausalLM`s over one vocabulary, on one device.
        prompt_ids: int [B, n] or [n] (B = 1 is the usual case; rows of a batch are independent runs).
        max_new_tokens: N >= 1 tokens per row (exactly N are returned).
        tree: "opt_tree" (adaptive, arXiv 2406.17276 Algorithm 1), or a static baseline "chain",
            "kary", "eagle" (`static_shape`) at the same node budget.
        node_budget: n >= 1 draft tokens per tree. threshold: delta >= 0, OPT-Tree stops adding layers
            when E[A] gains <= delta (static trees ignore it). max_depth: >= 1, caps every tree.
        temperature: target temperature T >= 0 (0: greedy, the output is target-only greedy decoding).
        uniforms: `UniformSource`, an int seed, or None (one uniform per visited tree node at T > 0;
            a stream source such as `NumpyUniforms` reads them in the reference's order, B = 1).
        draft_temperature: T_d of the q that shapes the trees (default T, or 1 at T = 0); any value
            keeps the output law exact, sample-and-follow never reads q.
        branching: k >= 1 children per node of the "kary" tree.
        prune: opt_tree only: skip the draft rows of nodes whose descendants can never be chosen
            (default; the tree is unchanged). False runs every top-n node, as the paper's code.

    Returns:
        `DecodeResult` with tokens int64 [B, N] and `TreeDecodeStats` (forwards, accepted lengths,
        predicted E[A], tree sizes and layers per row and iteration).

    Raises:
        TypeError / ValueError (naming the argument): non-`CausalLM` models, vocabulary or device
        mismatch, unknown tree, node_budget / max_depth / branching / max_new_tokens < 1,
        threshold < 0, negative temperature, bad prompt, a stream source with B > 1.
    """
    _check_pair(target, draft)
    tree, n, delta, depth, shape = _check_tree_args(tree, node_budget, threshold, max_depth, branching)
    N = _check_positive(max_new_tokens, "max_new_tokens")
    T = _check_temperature(temperature, "temperature")
    Td = _draft_temperature(draft_temperature, T)
    prompt = _check_prompt(prompt_ids, target)
    source = as_uniform_source(uniforms)
    if source.is_stream and prompt.shape[0] != 1:
        raise ValueError("uniforms: a stream source serves one row; use TorchUniforms for a batch")
    start = time.perf_counter()
    counts = target.forward_count, draft.forward_count
    state = _State(target, draft, prompt, N, depth)
    layers = None if shape is None else _shape_layers(shape, prompt.device)
    draft_rows = 0
    while state.row_id.numel():
        dt = _draft(state.dcache, state.pending, state.pending_count, tree, n, delta, depth, Td, layers, prune)
        draft_rows += dt.draft_rows
        state.step(dt, T, source)
    stats = TreeDecodeStats(tree, iterations=state.iterations, target_forwards=target.forward_count - counts[0],
                            draft_forwards=draft.forward_count - counts[1], wall_time_s=0.0, tree=tree,
                            node_budget=n, draft_rows=draft_rows, **state.logs())
    stats.wall_time_s = time.perf_counter() - start
    return DecodeResult(state.tokens(), stats)


class _State:
    """The active rows of a `tree_speculative` run: caches, emitted tokens, pending draft tokens."""

    def __init__(self, target, draft, prompt, N, max_depth):
        B, device = prompt.shape[0], prompt.device
        # Both caches hold the prompt but its last token: the root of the first tree.
        self.tcache, self.dcache = _Cache(target, prompt[:, :-1]), _Cache(draft, prompt[:, :-1])
        self.N = N
        self.row_id = torch.arange(B, device=device)  # original row of each active row
        self.out = torch.zeros(B, N + max_depth + 1, dtype=torch.long, device=device)
        self.out_len = torch.zeros(B, dtype=torch.long, device=device)
        self.last = prompt[:, -1].clone()  # [B]: emitted, not yet in the target cache
        self.pending = prompt[:, -1:].expand(-1, 2).clone()  # [B, 2]: not yet in the draft cache
        self.pending_count = torch.ones(B, dtype=torch.long, device=device)
        self.iterations = 0
        self.log = {"accepted_lengths": [], "predicted_acceptance": [], "tree_sizes": [], "layers": []}
        self.finished = []

    def step(self, dt: DraftTree, T: float, source) -> None:
        """Verify the drafted trees in one target forward, commit, and drop finished rows."""
        tokens, parents, real, order = _verification_block(dt, self.last)
        S = self.tcache.valid.shape[1]
        p = probabilities(self.tcache.append(tokens, parents, real), T)  # [B, 1 + w, V]
        max_steps = int(torch.where(dt.chosen, dt.depth, 0).max()) if dt.chosen.numel() else 0
        B = tokens.shape[0]
        u = None if T == 0 else source.peek(B, max_steps + 1, p.device)
        path, tau, y = _sample_and_follow(p, tokens, parents, real, u, T == 0, max_steps)
        if T > 0:
            source.advance(tau + 1)  # one uniform per visited node, as the reference
        self.iterations += 1
        for key, value in (("accepted_lengths", tau), ("predicted_acceptance", dt.predicted_acceptance),
                           ("tree_sizes", dt.chosen.sum(1)), ("layers", dt.layers)):
            self.log[key].append(value)
        self._commit(dt, tokens, order, path, tau, y, S)
        self._drop_finished()

    def _commit(self, dt, tokens, order, path, tau, y, S):
        """Emit path + y; keep the accepted path in the target cache and what the draft has run of
        it in the draft cache (the rest, at most one accepted token, and y become pending)."""
        B, D = path.shape
        device = tokens.device
        rows = torch.arange(B, device=device)
        on_path = torch.arange(D, device=device) < tau.unsqueeze(1)  # [B, D]
        path_tokens = tokens.gather(1, path)  # [B, D]
        emitted = torch.cat([torch.where(on_path, path_tokens, 0), torch.zeros_like(y).unsqueeze(1)], 1)
        emitted[rows, tau] = y  # [B, D + 1]
        j = torch.arange(D + 1, device=device)
        idx = (self.out_len.unsqueeze(1) + j).clamp(max=self.out.shape[1] - 1)
        self.out.scatter_(1, idx, torch.where(j <= tau.unsqueeze(1), emitted, self.out.gather(1, idx)))
        self.out_len = self.out_len + tau + 1
        # target: the root (last) and the accepted nodes; a dummy column absorbs the rest
        keep_new = torch.zeros(B, tokens.shape[1] + 1, dtype=torch.bool, device=device)
        keep_new[:, 0] = True
        keep_new.scatter_(1, torch.where(on_path, path, tokens.shape[1]), True)
        self.tcache.keep(torch.cat([self.tcache.valid[:, :S], keep_new[:, :-1]], dim=1))
        # draft: the accepted records it has run (a prefix of the path), pending = the rest + y
        records = order.gather(1, (path - 1).clamp(min=0)) if order.shape[1] else torch.zeros_like(path)
        slot = dt.slot.gather(1, records) if D else path  # [B, D]
        cached = on_path & (slot >= 0)
        Sd = self.dcache.valid.shape[1]
        dkeep = torch.cat([self.dcache.valid, torch.zeros(B, 1, dtype=torch.bool, device=device)], 1)
        dkeep.scatter_(1, torch.where(cached, slot, Sd), True)
        self.dcache.keep(dkeep[:, :-1])
        missing = tau - cached.sum(1)  # accepted tokens the draft has not run: 0 or 1
        assert bool((missing <= 1).all()), "internal: the draft cache lost an accepted node"
        deepest = path_tokens[rows, (tau - 1).clamp(min=0)] if D else y
        self.pending = torch.stack([torch.where(missing == 1, deepest, y), y], dim=1)
        self.pending_count = 1 + missing
        self.last = y

    def _drop_finished(self):
        alive = self.out_len < self.N
        if bool(alive.all()):
            return
        self.finished.append((self.row_id[~alive], self.out[~alive, :self.N]))
        keep = alive.nonzero().squeeze(1)
        self.row_id = self.row_id[keep]
        self.tcache.select(keep)
        self.dcache.select(keep)
        self.pending, self.pending_count, self.last = self.pending[keep], self.pending_count[keep], self.last[keep]
        self.out, self.out_len = self.out[keep], self.out_len[keep]

    def tokens(self) -> torch.Tensor:
        """int64 [B, N] in the original row order (CPU)."""
        B = sum(int(ids.numel()) for ids, _ in self.finished)
        out = torch.zeros(B, self.N, dtype=torch.long)
        for ids, toks in self.finished:
            out[ids.cpu()] = toks.cpu()
        return out

    def logs(self) -> dict:
        """The per-(row, iteration) logs, concatenated on CPU."""
        empty = {"predicted_acceptance": torch.float64}
        return {key: torch.cat(v).cpu() if v else torch.zeros(0, dtype=empty.get(key, torch.long))
                for key, v in self.log.items()}
