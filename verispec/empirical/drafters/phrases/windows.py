"""Lookahead (Jacobi) windows that ride in a forward and fill the phrase pool: a one-level window
(`JacobiWindow`) and lookahead decoding's 2D window (`JacobiWindow2D`), after Fu et al. 2024,
arXiv 2402.02057.
"""

from __future__ import annotations

from collections import deque
from typing import Sequence

from .pool import PhrasePool
from .token_tree import Tree

__all__ = ["JacobiWindow", "JacobiWindow2D"]


class JacobiWindow:
    """A lookahead (Jacobi) branch of W guesses hung after the current last token.

    After a forward, the argmax at each window slot becomes that slot's next guess (the window
    thus slides one position per forward). Along a slot s the tokens form a chain: the output of
    forward t is the next input of slot s, whose output at forward t + 1 continues it; n
    consecutive forwards give the phrase (input_t[s]; out_t[s], ..., out_{t+n-1}[s]) keyed by
    input_t[s] (lookahead decoding's n-gram trajectories, Fu et al. 2024, arXiv 2402.02057, with
    one level per forward instead of a 2D window).
    """

    def __init__(self, width: int, phrase_length: int, seed: Sequence[int]):
        self.guesses = [int(seed[-width:][i % min(len(seed), width)]) for i in range(width)]
        self.history: deque = deque(maxlen=phrase_length)  # (inputs, outputs) of recent forwards

    def attach(self, tree: Tree, anchor: int) -> list[int]:
        return tree.add_chain(anchor, self.guesses, verifiable=False)

    def update(self, outputs: list[int], pool: PhrasePool) -> None:
        self.history.append((self.guesses, outputs))
        self.guesses = list(outputs)
        if len(self.history) == self.history.maxlen:
            for s, key in enumerate(self.history[0][0]):
                pool._insert(key, tuple(out[s] for _, out in self.history))


class JacobiWindow2D:
    """Lookahead decoding's 2D window (Fu et al. 2024, arXiv 2402.02057), as Ouroboros' draft runs
    it: a level-0 chain L_1..L_{W-1} hung after the anchor (L_0) and W columns of n - 1 tokens,
    column i hung after L_i, so a column node sees the anchor, L_1..L_i and the column below it.

    After a forward, the argmax at column i's top is a new token: (column i, new token) is an
    n-token phrase keyed by L_i's token, added once every column token is a model output (from
    the n-th forward on). Then column i drops its lowest token, which becomes L_i, and takes the
    new token on top: one Jacobi step of all W n-grams per forward (the window slides one
    position per forward). (W - 1) + W (n - 1) rows per forward.
    """

    def __init__(self, width: int, phrase_length: int, seed: Sequence[int]):
        recent = list(seed[-width:])
        cycle = [int(recent[i % len(recent)]) for i in range(width * phrase_length)]
        self.n, self.forwards = phrase_length, 0
        self.level0 = cycle[:width - 1]
        self.columns = [cycle[width - 1 + i * (phrase_length - 1):width - 1 + (i + 1) * (phrase_length - 1)]
                        for i in range(width)]

    def attach(self, tree: Tree, anchor: int) -> list[int]:
        """Hang the window after `anchor`; returns the W column tops (the output slots)."""
        keys = [anchor] + tree.add_chain(anchor, self.level0, verifiable=False)
        self.keys = [tree.tokens[j] for j in keys]
        return [(tree.add_chain(keys[i], column, verifiable=False) or [keys[i]])[-1]
                for i, column in enumerate(self.columns)]

    def update(self, outputs: list[int], pool: PhrasePool) -> None:
        self.forwards += 1
        if self.forwards >= self.n:
            for key, column, out in zip(self.keys, self.columns, outputs):
                pool._insert(key, tuple(column) + (out,))
        if self.n == 1:  # no column: the new tokens themselves shift down to level 0
            self.level0 = list(outputs[1:])
            return
        self.level0 = [column[0] for column in self.columns[1:]]
        self.columns = [column[1:] + [out] for column, out in zip(self.columns, outputs)]
