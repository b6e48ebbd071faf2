"""The token tree of one phrase-drafter forward (`Tree`: a trie of verifiable nodes plus
unverifiable lookahead branches) and the draft model's one-sequence KV (`DraftSequence`).
"""

from __future__ import annotations

from typing import Sequence

import torch

from ...kv import SequenceKV
from ...model import CausalLM

__all__ = ["Tree", "DraftSequence"]


class Tree:
    """The nodes of one tree forward (node 0 = first token; -1 parent = attached to the cache)."""

    def __init__(self):
        self.tokens: list[int] = []
        self.parents: list[int] = []
        self.verifiable: list[bool] = []
        self.children: list[dict[int, int]] = []  # trie children (verifiable nodes): token -> node

    def add(self, token: int, parent: int, verifiable: bool = True) -> int:
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.verifiable.append(verifiable)
        self.children.append({})
        node = len(self.tokens) - 1
        if verifiable and parent >= 0:
            self.children[parent].setdefault(int(token), node)
        return node

    def add_chain(self, parent: int, tokens: Sequence[int], verifiable: bool = True) -> list[int]:
        nodes = []
        for t in tokens:
            parent = self.add(t, parent, verifiable)
            nodes.append(parent)
        return nodes

    def add_path(self, start: int, tokens: Sequence[int]) -> list[int]:
        """Trie insert under `start`: shared prefixes reuse existing nodes. Returns the path nodes."""
        nodes, node = [], start
        for t in tokens:
            nxt = self.children[node].get(int(t))
            node = nxt if nxt is not None else self.add(t, node)
            nodes.append(node)
        return nodes

    def tensors(self, device):
        """(tokens [1, N], parents [1, N], verifiable [1, N]) on `device`."""
        return (torch.tensor([self.tokens], dtype=torch.long, device=device),
                torch.tensor([self.parents], dtype=torch.long, device=device),
                torch.tensor([self.verifiable], dtype=torch.bool, device=device))

    def height(self) -> int:
        """Largest depth of a verifiable node (root 0)."""
        depth = []
        for parent in self.parents:
            depth.append(depth[parent] + 1 if parent >= 0 else 0)
        return max((d for d, v in zip(depth, self.verifiable) if v), default=0)

    def __len__(self):
        return len(self.tokens)


class DraftSequence:
    """The draft model's KV (`kv.SequenceKV`) and the tokens it holds (one sequence, compact)."""

    def __init__(self, model: CausalLM, tokens: list[int]):
        self.model, self.kv = model, SequenceKV(model)
        self.tokens = list(tokens)
        self.rows = 0  # token rows fed by `forward` (the prefill not counted)
        if tokens:
            ids = torch.tensor([tokens], dtype=torch.long, device=model.device)
            self.kv.prefill(ids, torch.tensor([len(tokens)], device=model.device))

    def forward(self, tree: Tree) -> torch.Tensor:
        """Tree forward after the held tokens -> logits [N, V] (the tree stays uncommitted)."""
        tokens, parents, _ = tree.tensors(self.model.device)
        self.rows += tokens.shape[1]
        return self.kv.append(tokens, parents, torch.ones_like(tokens, dtype=torch.bool))[0]

    def commit(self, tree: Tree, nodes: list[int]) -> None:
        """Keep tree nodes `nodes` (a root path, in order) after a forward."""
        keep = torch.zeros(1, len(tree), dtype=torch.bool, device=self.model.device)
        keep[0, nodes] = True
        self.kv.commit(keep)
        self.tokens += [tree.tokens[j] for j in nodes]

    def rollback(self, length: int) -> None:
        self.kv.rollback(length)
        del self.tokens[length:]
