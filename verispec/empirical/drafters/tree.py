"""Draft trees on real causal LMs: OPT-Tree (adaptive) and static baselines, as drafters of the engine.

`TreeDrafter` drafts one tree per row and iteration; the engine verifies it in ONE target tree
forward with sample-and-follow (`verifiers.nodes.SampleAndFollow`). As a method:
`engine.decode(target, draft, prompts, methods.tree_method("opt_tree", node_budget=n), N, T)`; the
drafter logs per (row, iteration) stats.logs["predicted_acceptance"] (float64: the tree's E[A] =
sum of W over its nodes, OPT-Tree's objective), ["tree_sizes"] (int64: nodes drafted, <= n) and
["layers"] (int64: draft forwards that row's tree needed).

Trees (`TREES`), every one capped at `max_depth`:

- ``"opt_tree"``: OPT-Tree (Wang et al. 2024, arXiv 2406.17276, Algorithm 1), as the reference
  `verispec.reference.drafters.opt_tree_structure`: W = the product of draft probabilities on a
  node's root path; each layer = the global top-n by W over the top-n children of the previous
  layer's nodes; stop when the gain of E[A] (the n largest W so far) is <= gain_threshold; the
  tree = the n largest-W nodes (ties go to the shallower node). ``width=w`` expands only a layer's w
  largest-W nodes, so a layer's forward runs <= w rows (EAGLE-2, arXiv 2406.16858, Section 4.1).
- static baselines at node budget n (`static_shape`): ``"chain"`` (the draft's top-1 path),
  ``"kary"`` (top-k children of every node, breadth first) and ``"eagle"`` (the n rank paths with
  the largest product of the fixed rank priors `EAGLE_RANK_PRIOR`).

ONE draft forward per layer, in the draft KV's uncommitted forest (`verispec.empirical.kv`).
Verification never reads q, so the drafts are deterministic top-n trees at every temperature; the
draft temperature only shapes the tree.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...reference.deprecation import renamed_keywords
from ...reference.drafters import check_threshold
from ...reference.static_trees import EAGLE_RANK_PRIOR, static_shape
from ..validation import check_positive, check_prompt, check_temperature
from .base import DraftTree, ModelDrafter, probabilities
from ..model import CausalLM

__all__ = ["TREES", "EAGLE_RANK_PRIOR", "TreeRecords", "TreeDrafter", "static_shape", "draft_tree"]

#: The tree kinds of `TreeDrafter` (the method registry names them: chain_tree drafts a "chain").
TREES = ("opt_tree", "chain", "kary", "eagle")


@dataclass
class TreeRecords:
    """The drafted trees of a batch, as records appended layer by layer (each layer padded).

    Attributes:
        tokens: int64 [B, R]: a record's token. parent: int64 [B, R]: its parent's record index
            (-1: a child of the root). depth: int64 [R] (1 = child of the root).
        weight: float64 [B, R]: W, the product of draft probabilities on the root path.
        chosen: bool [B, R]: the record is a node of the final tree (padding and dropped nodes: False).
        slot: int64 [B, R]: its id in the draft KV's uncommitted forest, -1 if the draft did not run it.
        layers: int64 [B]: layers built per row (= draft forwards of the row).
        draft_forwards: draft forwards spent drafting (the max of `layers` over rows).
        draft_rows: token rows fed to the draft by those forwards (2 pending columns, then per
            layer the nodes run, padded to the row that runs most); the draft's cost on a CPU.
        q: float64 [B, R, V] (only when the drafter keeps q): the law of each record's children.
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
    q: torch.Tensor | None = None

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


# --- Shapes and layers ---

def _shape_layers(paths: list[tuple[int, ...]], device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per depth d >= 1: (parent position in layer d-1 [m_d], rank [m_d]) of a BFS-ordered shape."""
    layers, index = [], {(): 0}
    for d in range(1, max((len(u) for u in paths), default=0) + 1):
        layer = [u for u in paths if len(u) == d]
        layers.append((torch.tensor([index[u[:-1]] for u in layer], dtype=torch.long, device=device),
                       torch.tensor([u[-1] for u in layer], dtype=torch.long, device=device)))
        index = {u: j for j, u in enumerate(layer)}
    return layers


def _children_law(logits: torch.Tensor, temperature: float, k: int):
    """The k most likely children of each node, q = softmax(logits / T) of those only (no float64
    law over V): logits float32 [..., V] -> (q float64 [..., min(k, V)] descending, ids); T = 0:
    `probabilities`' one-hot law. Ids outside a head subset (-inf logits) get q = 0: never drafted."""
    k = min(k, logits.shape[-1])
    if temperature == 0:
        return probabilities(logits, 0.0).topk(k, dim=-1)
    top, ids = logits.topk(k, dim=-1)  # [..., k]: softmax is monotone, so the top logits are the top q
    scaled = logits if temperature == 1 else logits / temperature  # x / 1 == x: no pass over V for it
    # float32 is enough to rank and weigh a tree's nodes: sample-and-follow never reads q.
    norm = torch.logsumexp(scaled, dim=-1, keepdim=True)  # [..., 1]
    return (top / temperature - norm).double().exp(), ids


def _opt_children(top_q, top_t, weight, valid, n):
    """OPT-Tree's next layer: global top-n by W of the top-n children of every node. top_q / top_t
    [B, m, k] (`_children_law`, k = min(n, V)), weight / valid [B, m] -> (tokens, parent position, W, valid) [B, n']."""
    B, m, k = top_q.shape  # children sorted descending
    w = weight.unsqueeze(-1) * top_q  # [B, m, k]
    ok = valid.unsqueeze(-1) & (top_q > 0)  # zero-probability children are never drafted
    w = torch.where(ok, w, -1.0).reshape(B, m * k)
    order = torch.sort(w, dim=1, descending=True, stable=True).indices[:, :min(n, m * k)]  # [B, n']
    new_w = w.gather(1, order)
    return top_t.reshape(B, m * k).gather(1, order), order // k, new_w.clamp(min=0.0), new_w > 0


def _static_children(top_q, top_t, weight, valid, parent_pos, rank):
    """A static layer: child j = the rank[j]-th most likely child of node parent_pos[j]. top_q / top_t [B, m, k]
    (k = min(max rank + 1, V)), weight / valid [B, m], parent_pos / rank [m'] -> (tokens, parent, W, valid) [B, m']."""
    B = top_q.shape[0]
    in_vocab = rank < top_q.shape[-1]  # a rank beyond the vocabulary is no node
    r = rank.clamp(max=top_q.shape[-1] - 1)
    child_q = top_q[:, parent_pos, r]  # [B, m']
    ok = valid[:, parent_pos] & (child_q > 0) & in_vocab
    parent = parent_pos.unsqueeze(0).expand(B, -1)
    return top_t[:, parent_pos, r], parent, torch.where(ok, weight[:, parent_pos] * child_q, 0.0), ok


def _choose(cat: dict, tree: str, n: int) -> torch.Tensor:
    """The final tree, bool [B, R]: OPT-Tree keeps the n largest W over all layers (stable sort over
    layer-ordered records: ties go to the shallower node, so the set is a subtree); a static tree
    keeps every valid node of its shape."""
    if tree != "opt_tree":
        return cat["valid"]
    w_all = torch.where(cat["valid"], cat["weight"], -1.0)  # [B, R]
    order = torch.sort(w_all, dim=1, descending=True, stable=True).indices[:, :n]  # [B, n]
    return torch.zeros_like(cat["valid"]).scatter_(1, order, True) & cat["valid"]


# --- The drafter: one draft forward per layer ---

class TreeDrafter(ModelDrafter):
    """OPT-Tree or a static tree per row and iteration (module docstring).

    Exact pruning (`prune=True`, the default): a layer forward feeds only the nodes whose children
    can still matter. Once n nodes are recorded, a node x with W_x <= the n-th largest W so far is
    not run: each descendant has W <= W_x and n earlier records rank ahead of it (ties go to earlier
    records), so it can never be chosen nor raise E[A]. The final tree and E[A] are the same as
    without pruning (tested); drafting stops as soon as a layer has nothing worth running.

    Args:
        tree: one of `TREES`. node_budget: n >= 1. gain_threshold: OPT-Tree's E[A]-gain threshold >= 0.
        max_depth: >= 1. branching: k >= 1 ("kary"). draft_temperature: T_d of q (None: T, or 1
        at T = 0). prune: opt_tree's exact pruning. width: opt_tree's largest-W nodes expanded per
        layer, the others leaves (None: all). keep_q: keep every node's q in the tree (for
        verifiers that read q, e.g. a reference rule through the adapter; costs n V floats).
    """

    @renamed_keywords(threshold="gain_threshold")
    def __init__(self, tree="opt_tree", node_budget=50, gain_threshold=0.0, max_depth=10, branching=2, *,
                 draft_temperature=None, prune=True, width=None, keep_q=False):
        self.tree, self.n, self.delta, self.depth, self.shape, self.width = check_tree_args(
            tree, node_budget, gain_threshold, max_depth, branching, width)
        self.draft_temperature = None if draft_temperature is None else check_temperature(
            draft_temperature, "draft_temperature")
        self.prune, self.keep_q = prune, keep_q
        self.log = {"predicted_acceptance": [], "tree_sizes": [], "layers": []}

    def start(self, draft, tokens, lengths, temperature, source, storage="padded") -> None:
        super().start(draft, tokens, lengths, temperature, source, storage)
        self.Td = self.draft_temperature if self.draft_temperature is not None else (
            temperature if temperature > 0 else 1.0)  # a one-hot q (T = 0) would make every tree a chain
        self.layers = None if self.shape is None else _shape_layers(self.shape, tokens.device)
        # children ranked per node: OPT-Tree's top n, a static shape's deepest rank
        self.k = self.n if self.layers is None else 1 + max(int(rank.max()) for _, rank in self.layers)

    def draft(self, rows) -> DraftTree:
        if self.policy is not None:
            self.policy.begin(rows.ctx_len)
        records = self.grow()
        for key, value in (("predicted_acceptance", records.predicted_acceptance),
                           ("tree_sizes", records.chosen.sum(1)), ("layers", records.layers)):
            self.log[key].append(value.cpu())
        return self._node_tree(records, rows.last)

    def logs(self) -> dict:
        empty = {"predicted_acceptance": torch.float64}
        return {key: torch.cat(v) if v else torch.zeros(0, dtype=empty.get(key, torch.long))
                for key, v in self.log.items()}

    def _run_layer(self, tokens, parent_fed, run):
        """ONE draft forward over the nodes of a layer that are `run` (tokens / parent_fed / run
        [B, m]; parent_fed: forest ids of their parents), packed to the left: a pruned or invalid
        node costs no row. Returns (law: the top children of each node, (q float64, ids) [B, m, k]
        from `_children_law`, q = 0 where not run; q float64 [B, m, V] when the drafter keeps q,
        else None; fed [B, m]: forest ids)."""
        B, m = tokens.shape
        device = tokens.device
        c = int(run.sum(1).max())
        pick = torch.sort((~run).to(torch.int8), dim=1, stable=True).indices[:, :c]  # [B, c]: run nodes first
        real = run.gather(1, pick)  # [B, c]
        base = self.kv.uncommitted
        logits_c = self.kv.append(torch.where(real, tokens.gather(1, pick), 0),
                                  torch.where(real, parent_fed.gather(1, pick), -1), real)  # [B, c, V]
        self.draft_rows += c
        fed = torch.full((B, m), -1, dtype=torch.long, device=device)
        fed.scatter_(1, pick, torch.where(real, base + torch.arange(c, device=device), -1))
        top_q, top_t = _children_law(logits_c, self.Td, self.k)  # [B, c, k] each
        k = top_q.shape[-1]
        where = pick.unsqueeze(-1).expand(-1, -1, k)  # [B, c, k]
        law = (top_q.new_zeros(B, m, k).scatter_(1, where, torch.where(real.unsqueeze(-1), top_q, 0.0)),
               top_t.new_zeros(B, m, k).scatter_(1, where, top_t))  # [B, m, k] each
        if not self.keep_q:
            return law, None, fed
        V = logits_c.shape[-1]
        logits = torch.zeros(B, m, V, dtype=logits_c.dtype, device=device)
        logits.scatter_(1, pick.unsqueeze(-1).expand(-1, -1, V), torch.where(real.unsqueeze(-1), logits_c, 0))
        return law, probabilities(logits, self.Td), fed

    def grow(self) -> TreeRecords:
        """Draft one tree per row: the pending tokens (root's q), then ONE forward per layer but
        the deepest. OPT-Tree stops growing a row when E[A] gains <= gain_threshold."""
        q, root = self._feed_pending(self.Td)  # [B, V], [B]
        B, device = q.shape[0], q.device
        g = {"q": q.unsqueeze(1), "law": tuple(t.unsqueeze(1) for t in q.topk(min(self.k, q.shape[-1]), dim=-1)),
             "weight": torch.ones(B, 1, dtype=torch.float64, device=device),
             "valid": torch.ones(B, 1, dtype=torch.bool, device=device), "fed": root.unsqueeze(1),
             "active": torch.ones(B, dtype=torch.bool, device=device),
             "layers": torch.zeros(B, dtype=torch.long, device=device),
             "expected": torch.zeros(B, dtype=torch.float64, device=device), "total": 0, "prev": 0,
             "forwards": 1, "rows": 2}
        recs = {"tokens": [], "parent": [], "depth": [], "weight": [], "valid": [], "slot": [], "q": []}
        q_root = q
        for depth in range(1, self.depth + 1):
            tokens, parent, w, run = self._layer(g, recs, depth)
            if depth == self.depth or not bool(run.any()):
                break  # the deepest layer is never run: its q is not needed
            law, q, fed = self._run_layer(tokens, g["fed"].gather(1, parent), run)
            g["forwards"], g["rows"] = g["forwards"] + 1, g["rows"] + int(run.sum(1).max())
            recs["slot"][-1] = fed
            g.update(law=law, weight=w, valid=run, fed=fed)  # ([B, m, k] x2), [B, m] x3
            if self.keep_q:
                g["q"] = recs["q"][-1] = q  # [B, m, V]
        cat = {key: torch.cat(value, dim=1 if key != "depth" else 0) for key, value in recs.items() if value}
        chosen = _choose(cat, self.tree, self.n)  # [B, R]
        if self.policy is not None:  # the cost policy's budget: the top-W nodes that pay
            chosen = self.policy.cut(cat["weight"], chosen, cat["depth"])
        return TreeRecords(cat["tokens"], cat["parent"], cat["depth"], cat["weight"],
                           chosen, cat["slot"], g["layers"], g["forwards"], g["rows"],
                           torch.cat([q_root.unsqueeze(1), cat["q"]], 1) if self.keep_q else None)

    def _layer(self, g: dict, recs: dict, depth: int):
        """Record the next layer's children and decide which of them to run (OPT-Tree's E[A]
        stopping rule and exact pruning; static trees stop at their shape's depth)."""
        if self.tree == "opt_tree":
            tokens, parent, w, ok = _opt_children(*g["law"], g["weight"], g["valid"], self.n)  # each [B, m]
        else:
            tokens, parent, w, ok = _static_children(*g["law"], g["weight"], g["valid"], *self.layers[depth - 1])
        ok = ok & g["active"].unsqueeze(1)
        m = tokens.shape[1]
        parent_rec = parent + g["prev"] if depth > 1 else torch.full_like(parent, -1)
        g["prev"], g["total"] = g["total"], g["total"] + m
        for key, value in (("tokens", tokens), ("parent", parent_rec), ("weight", w), ("valid", ok),
                           ("slot", torch.full_like(tokens, -1)),
                           ("q", g["q"].new_zeros(*tokens.shape, g["q"].shape[-1] if self.keep_q else 0)),
                           ("depth", torch.full((m,), depth, dtype=torch.long, device=tokens.device))):
            recs[key].append(value)
        g["layers"] = g["layers"] + ok.any(1).long()
        run = ok  # [B, m]: this layer's nodes to forward
        if self.tree == "opt_tree":  # E[A] = sum of the n largest W so far; stop when it gains <= delta
            all_w = torch.where(torch.cat(recs["valid"], 1), torch.cat(recs["weight"], 1), 0.0)  # [B, total]
            top = all_w.topk(min(self.n, g["total"]), dim=1).values  # [B, <= n], descending
            best = top.sum(1)  # [B]
            g["active"] = g["active"] & ok.any(1) & (best - g["expected"] > self.delta)
            g["expected"] = best
            if self.prune and top.shape[1] == self.n:  # exact pruning (why it is exact: class docstring)
                run = run & (w > top[:, self.n - 1:])
            run = run if self.width is None else run & (torch.arange(m, device=run.device) < self.width)  # sorted by W
        else:
            g["active"] = g["active"] & ok.any(1) & (depth < len(self.layers))
        return tokens, parent, w, run & g["active"].unsqueeze(1)

    def _node_tree(self, records: TreeRecords, last: torch.Tensor) -> DraftTree:
        """The chosen records as a node-layout tree: node 0 = the root (`last` [B]), then the
        chosen records in record (= topological) order; `self.fed` maps nodes to forest ids."""
        B, R = records.chosen.shape
        device = last.device
        count = records.chosen.sum(1)  # [B]
        width = int(count.max()) if R else 0
        order = torch.sort((~records.chosen).long(), dim=1, stable=True).indices[:, :width]  # [B, w] chosen first
        is_node = torch.arange(width, device=device) < count.unsqueeze(1)  # [B, w]
        node_of = torch.full((B, R + 1), -1, dtype=torch.long, device=device)  # column R: a dummy
        node_of.scatter_(1, torch.where(is_node, order, R), torch.arange(1, width + 1, device=device).expand(B, -1))
        parent_rec = records.parent.gather(1, order)  # [B, w]
        parent_node = torch.where(parent_rec >= 0, node_of.gather(1, parent_rec.clamp(min=0)), 0)
        ones = torch.ones(B, 1, dtype=torch.bool, device=device)
        tokens = torch.cat([last.unsqueeze(1), torch.where(is_node, records.tokens.gather(1, order), 0)], dim=1)
        parents = torch.cat([-ones.long(), torch.where(is_node, parent_node, 0)], dim=1)
        self.fed = torch.cat([(self.pending_count - 1).unsqueeze(1),
                              torch.where(is_node, records.slot.gather(1, order), -1)], dim=1)  # [B, 1 + w]
        q = None if records.q is None else records.q.gather(  # [B, 1 + w, V]; record q 0 is the root's
            1, torch.cat([ones.long() * 0, order + 1], 1).unsqueeze(-1).expand(-1, -1, records.q.shape[-1]))
        return DraftTree(tokens, parents, torch.cat([ones, is_node], dim=1), q)


# --- Public API ---

def check_tree_args(tree, node_budget, gain_threshold, max_depth, branching, width=None):
    """Validated (tree, n, gain_threshold, max_depth, shape or None, width or None)."""
    if not isinstance(tree, str):
        raise TypeError(f"tree: expected a tree name string, got {type(tree).__name__}")
    if tree not in TREES:
        raise ValueError(f"tree: unknown tree {tree!r}; known: {', '.join(TREES)}")
    n = check_positive(node_budget, "node_budget")
    delta = check_threshold(gain_threshold)  # the reference's check: a number >= 0
    depth = check_positive(max_depth, "max_depth")
    k = check_positive(branching, "branching")
    shape = None if tree == "opt_tree" else static_shape(tree, n, depth, k)
    if width is not None and shape is not None:
        raise ValueError(f"width: only opt_tree's layers take a width, not {tree!r}'s fixed shape")
    return tree, n, delta, depth, shape, None if width is None else check_positive(width, "width")


@renamed_keywords(threshold="gain_threshold")
def draft_tree(draft: CausalLM, prefix_ids, tree: str = "opt_tree", node_budget: int = 50,
               gain_threshold: float = 0.0, max_depth: int = 10, *, draft_temperature: float = 1.0,
               branching: int = 2, prune: bool = True, width: int | None = None) -> TreeRecords:
    """Draft one tree after `prefix_ids` (the drafting step of the tree methods,
    `verispec.empirical.methods.tree_method`, exposed for tests and analysis). Costs a prefill of
    all but the last prefix token plus one forward per layer.

    Args:
        draft: `CausalLM`. prefix_ids: int [B, n] or [n]. draft_temperature: >= 0 (q = softmax(logits
        / T_d); 0: one-hot argmax). The rest as `TreeDrafter`'s; prune=False runs every top-n node
        of every layer, as the paper's code (the same tree, more draft rows).

    Returns:
        `TreeRecords` (use `.nodes(row)` for {node tuple: W} and `.predicted_acceptance`).

    Raises:
        TypeError / ValueError (naming the argument): a non-`CausalLM` draft, a bad prefix, a
        negative draft_temperature, or as `TreeDrafter` (`check_tree_args`: a width on a static tree).

    Source: Wang et al. 2024, "OPT-Tree", arXiv 2406.17276, Algorithm 1; width: EAGLE-2, arXiv 2406.16858.
    """
    if not isinstance(draft, CausalLM):
        raise TypeError(f"draft: expected a CausalLM, got {type(draft).__name__}")
    drafter = TreeDrafter(tree, node_budget, gain_threshold, max_depth, branching, prune=prune, width=width,
                          draft_temperature=check_temperature(draft_temperature, "draft_temperature"))
    prefix = check_prompt(prefix_ids, draft)
    lengths = torch.full((prefix.shape[0],), prefix.shape[1], dtype=torch.long, device=prefix.device)
    drafter.start(draft, prefix, lengths, drafter.draft_temperature, None)
    return drafter.grow()
