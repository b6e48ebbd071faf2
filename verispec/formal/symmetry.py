"""Orbits of output sequences under relabeling tokens: one SMT query per orbit instead of per output.

A rule whose law commutes with every permutation pi of the vocabulary (law(pi s; pi P) = law(s; P)
for every pair P, checked on its trace by `verispec.formal.watch.Watch.equivariant`) has a
counterexample at an output s exactly when it has one at pi s, since pi maps the closed simplex onto
itself and the target's law commutes with pi too. So the outputs of one orbit need one query, asked
at the orbit's canonical representative: the sequence relabeled by first occurrence (0, 1, 2, ... in
the order tokens first appear), e.g. (2, 0, 2) -> (0, 1, 0). At V tokens and N positions that is
sum_{k <= min(N, V)} S(N, k) queries (Stirling numbers of the second kind) instead of V^N.
"""

from __future__ import annotations

import itertools

__all__ = ["canonical", "representatives", "orbit_size"]


def canonical(output) -> tuple:
    """The representative of `output`'s orbit: its tokens relabeled 0, 1, ... by first occurrence."""
    labels: dict = {}
    return tuple(labels.setdefault(t, len(labels)) for t in output)


def representatives(vocab_size: int, num_tokens: int) -> list:
    """The canonical output of every orbit of [V]^N, in `itertools.product` order."""
    if vocab_size < 1 or num_tokens < 0:
        raise ValueError(f"vocab_size, num_tokens: expected V >= 1 and N >= 0, got {vocab_size}, {num_tokens}")
    width = min(vocab_size, num_tokens)
    return [s for s in itertools.product(range(width), repeat=num_tokens) if canonical(s) == s]


def orbit_size(output, vocab_size: int) -> int:
    """Outputs in the orbit of `output`: V! / (V - k)! for k distinct tokens."""
    size = 1
    for i in range(len(set(output))):
        size *= vocab_size - i
    return size
