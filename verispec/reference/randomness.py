"""The `Randomness` interface, a numpy sampler, and the exact enumerator.

A rule draws every random choice through `rand.bernoulli(p)` and `rand.categorical(probs)`. Run
with a `Sampler` it samples; run under `enumerate_law` every branch is explored with its
probability and the exact output law comes back (float64, or `Fraction` when every probability
the rule reads is rational). One implementation of each rule serves both (docs/architecture.md, core
idea 1).

The enumerator re-executes the program once per leaf of its choice tree, replaying a recorded
prefix of choices (depth-first); programs must therefore be deterministic given their choices —
which every rule is, because all randomness goes through `rand`.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Hashable, Protocol, runtime_checkable

import numpy as np

from .audit import PLUMBING
from .probability import SUM_TOLERANCE
from .uniform import LazyUniform


#: Plumbing (`verispec.reference.audit`): the samplers and the exact enumerator, not rule code, so
#: `verispec prove --all-vocab` lets this module read V and handle token ids as numbers.
__audit__ = PLUMBING


@runtime_checkable
class Randomness(Protocol):
    """Where a rule gets its randomness."""

    def bernoulli(self, p) -> bool:
        """True with probability p (0 <= p <= 1; float or Fraction)."""

    def categorical(self, probs) -> int:
        """A token id drawn from `probs` ([V], sums to 1)."""

    def uniform(self):
        """u ~ U[0, 1): a float when sampling, a `LazyUniform` split exactly under enumeration."""


def _check_bernoulli(p):
    if isinstance(p, Fraction) or isinstance(p, int):
        if not 0 <= p <= 1:
            raise ValueError(f"bernoulli: p must lie in [0, 1], got {p}")
        return p
    p = float(p)
    if not (-SUM_TOLERANCE <= p <= 1 + SUM_TOLERANCE):  # also rejects NaN
        raise ValueError(f"bernoulli: p must lie in [0, 1], got {p!r}")
    return min(max(p, 0.0), 1.0)


def _check_categorical(probs) -> np.ndarray:
    probs = np.asarray(probs) if not isinstance(probs, np.ndarray) else probs
    if probs.ndim != 1 or probs.shape[0] == 0:
        raise ValueError(f"categorical: probs must have shape [vocab_size], got {probs.shape}")
    if probs.dtype == object:
        if sum(probs) != 1 or any(x < 0 for x in probs):
            raise ValueError("categorical: exact probs must be non-negative and sum to 1")
        return probs
    total = float(probs.sum())
    if not abs(total - 1.0) <= SUM_TOLERANCE or probs.min() < 0:
        raise ValueError(f"categorical: probs must be non-negative and sum to 1, got sum {total!r}")
    return probs


class Sampler:
    """Draws with a numpy Generator; one uniform per draw.

    `bernoulli(p)` is `u < p` and `categorical(probs)` is the inverse CDF at `u`, with u ~ U[0, 1)
    from `generator.random()` — so a backend fed the same uniform stream emits the same tokens.

    Args:
        seed: an int seed, a `numpy.random.SeedSequence`, or an existing `numpy.random.Generator`.
    """

    def __init__(self, seed: int | np.random.Generator | np.random.SeedSequence | None = None):
        if isinstance(seed, np.random.Generator):
            self.generator = seed
        elif isinstance(seed, bool):
            raise TypeError("seed: expected int, SeedSequence or numpy Generator, got bool")
        elif isinstance(seed, (int, np.integer)) and seed < 0:
            raise ValueError(f"seed: must be a non-negative int, got {seed}")
        elif seed is None or isinstance(seed, (int, np.integer, np.random.SeedSequence)):
            self.generator = np.random.default_rng(seed)
        else:
            raise TypeError(f"seed: expected int, SeedSequence or numpy Generator, got {type(seed).__name__}")

    def bernoulli(self, p) -> bool:
        return bool(self.generator.random() < float(_check_bernoulli(p)))

    def uniform(self) -> float:
        """u ~ U[0, 1) from the generator (one draw of the shared uniform stream)."""
        return float(self.generator.random())

    def categorical(self, probs) -> int:
        probs = _check_categorical(probs)
        cdf = np.cumsum(np.asarray(probs, dtype=np.float64))  # [V]
        u = self.generator.random() * cdf[-1]
        index = int(np.searchsorted(cdf, u, side="right"))
        # Round-off can push u past the last positive entry; step back onto the support.
        index = min(index, len(cdf) - 1)
        while probs[index] <= 0:
            index -= 1
        return index


class _Replay:
    """Randomness that replays `forced` choices, then takes branch 0 and queues the siblings."""

    __slots__ = ("forced", "trace", "weight", "pending", "supports")

    def __init__(self, forced: tuple[int, ...], pending: list, supports: dict):
        self.forced = forced
        self.trace: list[int] = []
        self.weight = 1
        self.pending = pending
        self.supports = supports

    def _choose(self, probs: list) -> int:
        pos = len(self.trace)
        if pos < len(self.forced):
            index = self.forced[pos]
        else:
            index = 0
            base = tuple(self.trace)
            for j in range(len(probs) - 1, 0, -1):
                self.pending.append(base + (j,))
        self.trace.append(index)
        self.weight = self.weight * probs[index]
        return index

    def uniform(self):
        """An exact U[0, 1), split lazily at the thresholds it is compared with (`LazyUniform`)."""
        return LazyUniform(self)

    def bernoulli(self, p) -> bool:
        p = _check_bernoulli(p)
        if p == 1:
            return True
        if p == 0:
            return False
        return self._choose([p, 1 - p]) == 0

    def categorical(self, probs) -> int:
        # Replays hand us the same cached arrays (model conditionals, binomial pmfs) again and
        # again: validate each once. The memo holds the array itself, so its id is never reused.
        entry = self.supports.get(id(probs))
        if entry is None or entry[0] is not probs:
            probs = _check_categorical(probs)
            support = [i for i in range(len(probs)) if probs[i] > 0]
            entry = (probs, support, [probs[i] for i in support])
            self.supports[id(probs)] = entry
        _, support, weights = entry
        if len(support) == 1:
            return support[0]
        return support[self._choose(weights)]


@dataclass
class Enumeration:
    """The exact law of a program's output.

    Attributes:
        law: {outcome: probability}; Fraction probabilities when every draw was rational.
        num_branches: leaves of the choice tree that were explored (= program runs).
    """

    law: dict
    num_branches: int


class _Recorder(_Replay):
    """A replay that also records every draw as (kind, argument, outcome, probability)."""

    __slots__ = ("draws",)

    def __init__(self, forced):
        super().__init__(forced, [], {})
        self.draws: list = []

    def bernoulli(self, p) -> bool:
        outcome = super().bernoulli(p)
        p = _check_bernoulli(p)
        self.draws.append(("bernoulli", p, outcome, p if outcome else 1 - p))
        return outcome

    def categorical(self, probs) -> int:
        outcome = super().categorical(probs)
        self.draws.append(("categorical", probs, outcome, probs[outcome]))
        return outcome


def replay_draws(program: Callable[[Randomness], Hashable], choices: tuple[int, ...]) -> list:
    """Re-run `program` along the branch given by its choice indices and return its draws, as
    [(kind, argument, outcome, probability)], up to where it returns or raises."""
    recorder = _Recorder(tuple(choices))
    try:
        program(recorder)
    except Exception:  # the branch is being replayed because it raised
        pass
    return recorder.draws


def enumerate_law(program: Callable[[Randomness], Hashable], max_branches: int | None = None,
                  on_error: Callable | None = None) -> Enumeration:
    """Run `program(rand)` over every branch of its random choices; return the output law.

    Args:
        program: a deterministic function of its `Randomness` argument returning a hashable outcome.
        max_branches: raise `RuntimeError` past this many leaves (guards against runaway instances).
        on_error: None (an exception of `program` propagates) or
            ``on_error(error, probability, draws) -> Exception``: the exception to raise instead,
            given the branch's probability and its draws (as `replay_draws` returns them).

    Returns:
        `Enumeration` with the law {outcome: prob} (probabilities sum to 1: exactly for rational
        inputs, to round-off for float64) and the number of leaves explored.
    """
    law: dict = {}
    pending: list[tuple[int, ...]] = [()]
    supports: dict = {}
    branches = 0
    while pending:
        rand = _Replay(pending.pop(), pending, supports)
        try:
            outcome = program(rand)
        except Exception as err:
            if on_error is None:
                raise
            raise on_error(err, rand.weight, replay_draws(program, tuple(rand.trace))) from err
        law[outcome] = law.get(outcome, 0) + rand.weight
        branches += 1
        if max_branches is not None and branches > max_branches:
            raise RuntimeError(f"enumeration exceeded max_branches={max_branches}")
    return Enumeration(law=law, num_branches=branches)


def law_is_exact(law: dict) -> bool:
    """True when every probability in `law` is an exact rational."""
    return all(isinstance(v, (Fraction, int)) for v in law.values())


def total_mass(law: dict):
    """sum of the law's probabilities (1 up to round-off)."""
    return sum(law.values()) if law else 0


__all__ = ["Randomness", "Sampler", "Enumeration", "enumerate_law", "replay_draws", "law_is_exact", "total_mass"]
