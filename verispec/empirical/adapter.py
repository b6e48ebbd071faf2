"""The reference adapter: ANY reference `Method`'s verify runs on real-model p / q from the engine.

A rule checked with `verispec.testing.assert_lossless` runs as is on real causal LMs, no torch twin:

    drafter (the torch twin of the Method's reference drafter) -> DraftTree
        -> ONE target tree forward -> p [B, N, V]
        -> per row: method.verify(target_view, draft_view, context, draft, rand)   (numpy)
        -> accepted node path + correction/bonus token -> KV keep

- `target_view.probs(context + node)` serves p at the root (node ()) and every drafted node; any
  other prefix raises `OffTreeError` naming it (it would need another target forward).
- `draft_view.probs(context + node)` and `draft.proposal(node)` serve q, the law each drafted
  node's children were drawn from (one-hot for point-mass drafts); at a leaf: `OffTreeError`.
- `draft` is a reference `Draft` holding the drafted paths in path order (duplicates kept for
  i.i.d. paths), `context` the row's prompt and emitted tokens.
- `rand` draws with `verispec.reference.randomness.Sampler`'s conventions from the engine's
  uniform source (bernoulli = u < p, categorical = inverse CDF), one uniform per draw in the order
  the rule asks, so with a stream source (`NumpyUniforms`, B = 1) the adapter and a torch twin of
  the rule read the same uniforms and emit the same tokens.

Drafters: the Method's reference drafter picks its torch twin (`twin_drafter`); pass `drafter=`
for others.
Cost: the verify runs in Python per row (V-sized numpy vectors): for research, not for speed.
"""

from __future__ import annotations

from functools import partial
from types import MappingProxyType, SimpleNamespace
from typing import Callable, Mapping

import numpy as np
import torch

from ..reference.drafters import Draft
from ..reference.methods import Method
from ..reference.models import LanguageModel
from ..reference.randomness import Sampler
from .drafters import GreedyDraftDrafter, HubPairsDrafter, PathsDrafter, PromptLookupDrafter, TreeDrafter
from .torch_method import TorchMethod
from .verifiers.nodes import Verdict

__all__ = ["OffTreeError", "ReferenceVerifier", "TWIN_DRAFTERS", "torch_method", "twin_drafter"]


class OffTreeError(ValueError):
    """A reference verifier read p or q at a prefix the tree forward did not compute."""


class _TreeModel(LanguageModel):
    """p (or q) of one row served from the tree forward: prefix = context + a node of the tree."""

    def __init__(self, rows: np.ndarray, index: dict, context: tuple, what: str, method: str):
        super().__init__(rows.shape[-1])  # rows [N, V]
        self._rows, self._index, self._context, self._what, self._method = rows, index, context, what, method

    def _compute(self, prefix: tuple) -> np.ndarray:
        n = len(self._context)
        node = prefix[n:] if prefix[:n] == self._context else None
        j = self._index.get(node) if node is not None else None
        if j is None:
            where = f"node {node}" if node is not None else f"prefix {prefix} (not an extension of the context)"
            raise OffTreeError(f"verify: method {self._method!r} read {self._what} at {where}, which the "
                               f"tree forward did not compute (it computes {self._what} at the root () and at "
                               "the drafted nodes only)")
        row = self._rows[j]
        if not row.any():
            raise OffTreeError(f"verify: method {self._method!r} read {self._what} at node {node}, where no "
                               "proposal was computed (a leaf, or a node drafted deterministically)")
        return row


class _Feed:
    """Each row's uniforms from the engine's source, handed out one at a time (`Sampler` reads
    `generator.random()`); more are peeked when a row runs out."""

    def __init__(self, source, rows: int, first: int, device):
        self.source, self.device, self.rows = source, device, rows
        self.values = source.peek(rows, first, device).cpu().tolist()  # [B][n]
        self.used = [0] * rows

    def generator(self, row: int):
        """Row `row`'s stand-in for a numpy generator: `random()` hands out its next uniform."""
        return SimpleNamespace(random=partial(self._next, row))

    def _next(self, row: int) -> float:
        if self.used[row] == len(self.values[row]):
            self._more(row)
        self.used[row] += 1
        return self.values[row][self.used[row] - 1]

    def _more(self, row: int) -> None:
        more = self.source.peek(self.rows, 2 * len(self.values[row]) + 1, self.device).cpu().tolist()
        # A stream keeps what was peeked (peek further); fresh uniforms go after each row's old ones.
        self.values = more if self.source.is_stream else [old + new for old, new in zip(self.values, more)]

    def advance(self) -> None:
        self.source.advance(torch.tensor(self.used, dtype=torch.long))


def _row_draft(tokens, parents, real, q, paths, point_mass: bool, vocab_size: int):
    """One row of a DraftTree as ({node tuple: node id}, reference `Draft`, q rows [N, V] numpy).

    q None (nothing kept: a deterministic tree) gives no proposal where a node has several
    children (the reference's contract: reading it raises `RuleContractError`) and, for point-mass
    drafts, the one-hot of a node's only child."""
    index, node_of = {(): 0}, {0: ()}
    for j in range(1, len(tokens)):
        if real[j]:
            node_of[j] = node_of[parents[j]] + (tokens[j],)
            index[node_of[j]] = j
    if paths is not None:
        drafted = [node_of[p[-1]] if p else () for p in ([i for i in path if i >= 0] for path in paths)]
    else:
        has_child = {parents[j] for j in node_of if j}
        drafted = [node_of[j] for j in sorted(node_of) if j not in has_child and j]
    drafted = [path for path in drafted if path]
    if q is None:
        q = np.zeros((len(tokens), vocab_size))  # [N, V]: the draft view serves the same proposals
        children = {}
        for node in index:
            if node:
                children.setdefault(node[:-1], set()).add(node[-1])
        for node, kids in children.items():
            if point_mass and len(kids) == 1:
                q[index[node], next(iter(kids))] = 1.0
        proposal = {node: q[j] if q[j].any() else None for node, j in index.items()}
    else:
        proposal = {node: q[j] for node, j in index.items()}
    draft = Draft.from_paths(drafted, lambda node: proposal.get(node)) if drafted else None
    return index, draft, q


class ReferenceVerifier:
    """The engine verifier that runs a reference `Method`'s verify row by row (module docstring).

    Raises (from `__call__`):
        OffTreeError: the rule read p or q outside the tree forward.
        ValueError: the rule's output is empty, has out-of-range ids, or accepts a non-drafted path.
    """

    needs_q = False  # a missing q is the reference's contract error, raised only if the rule reads it

    def __init__(self, method: Method):
        if not isinstance(method, Method):
            raise TypeError(f"method: expected a verispec.reference.methods.Method, got {type(method).__name__}")
        self.method, self.name = method, method.name

    def __call__(self, p, tree, source, temperature, rows) -> Verdict:
        B, N, V = p.shape
        feed = _Feed(source, B, 2 * N + 2, p.device)
        results = [self._row(b, p[b].cpu().numpy(), tree, rows, feed) for b in range(B)]
        feed.advance()
        D = max(1, max(len(nodes) for nodes, _ in results))
        nodes = torch.tensor([path + [-1] * (D - len(path)) for path, _ in results], dtype=torch.long)  # [B, D]
        tau = torch.tensor([len(path) for path, _ in results], dtype=torch.long)
        y = torch.tensor([token for _, token in results], dtype=torch.long)
        return Verdict(nodes.to(p.device), tau.to(p.device), y.to(p.device))

    def _row(self, b, p_rows, tree, rows, feed):
        q = tree.q[b].cpu().numpy() if tree.q is not None else None
        paths = tree.paths[b].tolist() if tree.paths is not None else None
        index, draft, q = _row_draft(tree.tokens[b].tolist(), tree.parents[b].tolist(), tree.real[b].tolist(),
                                     q, paths, tree.point_mass, p_rows.shape[1])
        context = tuple(rows.ctx[b, :int(rows.ctx_len[b])].tolist())
        target = _TreeModel(p_rows, index, context, "p", self.name)
        draft_model = _TreeModel(q, index, context, "q", self.name)
        rand = Sampler.__new__(Sampler)  # Sampler's draw conventions on the engine's uniforms
        rand.generator = feed.generator(b)
        if draft is None:  # nothing drafted: the rule sees an empty draft
            draft = Draft(1, lambda node, k: ((), None))
        out = tuple(int(t) for t in self.method.verify(target, draft_model, context, draft, rand))
        if not out or not all(0 <= t < p_rows.shape[1] for t in out):
            raise ValueError(f"verify: method {self.name!r} emitted {out}: expected the accepted prefix and "
                             f"one token, ids in [0, {p_rows.shape[1]})")
        if out[:-1] not in index:
            raise ValueError(f"verify: method {self.name!r} accepted {out[:-1]}, which is not a drafted path")
        return [index[out[:i]] for i in range(1, len(out))], out[-1]


#: A reference drafter's name -> ``twin(draft_length, params)``, a factory of its torch twin
#: (`verispec.empirical.drafters`) from the reference drafter's L and parameters. Keyed by
#: drafter, not by method: several methods share a drafter.
TWIN_DRAFTERS: Mapping[str, Callable] = MappingProxyType({
    "chain": lambda L, params: lambda: PathsDrafter(L, 1),
    "iid_paths": lambda L, params: lambda: PathsDrafter(L, params["num_paths"], True),
    "paths_without_replacement": lambda L, params: lambda: PathsDrafter(L, params["num_paths"], False),
    # the draft's argmax chain: one-hot q
    "greedy": lambda L, params: lambda: PathsDrafter(L, 1, draft_temperature=0.0),
    "opt_tree": lambda L, params: lambda: TreeDrafter("opt_tree", params["node_budget"], params["gain_threshold"],
                                                      params["max_depth"]),
    "prompt_lookup": lambda L, params: lambda: PromptLookupDrafter(L, params["max_ngram"]),
    "hub_pairs": lambda L, params: lambda: HubPairsDrafter(L),  # SpecHub's hub-pair paths
    "greedy_draft_paths": lambda L, params: lambda: GreedyDraftDrafter(L, params["num_paths"]),  # Hu et al.'s
})


def twin_drafter(method: Method) -> Callable:
    """The torch twin of `method`'s reference drafter, as a drafter factory (`TWIN_DRAFTERS`).

    Raises:
        ValueError: a drafter without a torch twin (pass `drafter=` to `torch_method`).
    """
    drafter = method.draft
    name, params = getattr(drafter, "name", None), dict(getattr(drafter, "params", {}))
    if name not in TWIN_DRAFTERS:
        raise ValueError(f"method: {method.name!r} drafts with {drafter!r}, which has no torch twin; pass "
                         "drafter= (a factory of verispec.empirical.drafters.Drafter)")
    return TWIN_DRAFTERS[name](params.get("draft_length"), params)


def torch_method(method: Method, drafter: Callable | None = None) -> TorchMethod:
    """A reference `Method` as a `TorchMethod`: its reference drafter's torch twin (or `drafter`,
    a factory returning a `verispec.empirical.drafters.Drafter`) + `ReferenceVerifier(method)`.

    Raises:
        TypeError: not a Method. ValueError: no torch twin of its drafter and no `drafter`.
    """
    verifier = ReferenceVerifier(method)
    return TorchMethod(method.name, drafter if drafter is not None else twin_drafter(method), verifier,
                       dict(method.params))
