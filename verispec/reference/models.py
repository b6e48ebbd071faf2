"""Toy language models as oracles: a prefix (tuple of token ids) -> probability vector [V].

Families (docs/architecture.md, core idea 4): i.i.d. (`iid`), first-order Markov (`markov`,
`random_markov`), random tree (`random_tree`: a seeded Dirichlet per prefix, so every prefix has
its own conditional), explicit tables (`table`), and wrappers (`temperature`, `mixture`). Pass
`rational=True` (or Fraction inputs) for exact-arithmetic variants.

The prefix a model sees is the whole sequence so far: context followed by emitted/drafted tokens.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Hashable, Mapping, Sequence

import numpy as np

from .audit import PLUMBING
from .probability import argmax, as_probs, is_exact, is_symbolic, one_hot, to_rational


#: Plumbing (`verispec.reference.audit`): the models' caches and argument checks, not rule code, so
#: `verispec prove --all-vocab` lets this module read V and handle token ids as numbers.
__audit__ = PLUMBING


def check_prefix(prefix, vocab_size: int, name: str = "prefix") -> tuple[int, ...]:
    """Validate a token sequence: a tuple/list of ints in [0, vocab_size). Returns a tuple.

    Raises:
        TypeError: not a sequence of ints.
        ValueError: a token id out of range.
    """
    if isinstance(prefix, (str, bytes)) or not isinstance(prefix, (tuple, list, np.ndarray)):
        raise TypeError(f"{name}: expected a tuple of token ids, got {type(prefix).__name__}")
    out = []
    for t in prefix:
        if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
            raise TypeError(f"{name}: token ids must be ints, got {t!r}")
        if not 0 <= t < vocab_size:
            raise ValueError(f"{name}: token id {int(t)} out of range [0, {vocab_size})")
        out.append(int(t))
    return tuple(out)


def check_positive_int(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name}: must be >= {minimum}, got {value}")
    return int(value)


def _check_concentration(concentration) -> float:
    if isinstance(concentration, bool) or not isinstance(concentration, (int, float, np.floating)):
        raise TypeError(f"concentration: expected a number, got {type(concentration).__name__}")
    if not (math.isfinite(concentration) and concentration > 0):
        raise ValueError(f"concentration: must be a positive finite number, got {concentration!r}")
    return float(concentration)


class LanguageModel:
    """A causal LM over a vocabulary of `vocab_size` tokens, as a prefix -> probabilities oracle.

    Subclasses implement `_compute(prefix)`; `probs` validates the prefix and memoises.

    Attributes:
        vocab_size: V.
        exact: True when every conditional is a vector of Fractions.
    """

    vocab_size: int
    exact: bool = False

    def __init__(self, vocab_size: int):
        self.vocab_size = check_positive_int(vocab_size, "vocab_size")
        self._cache: dict[tuple[int, ...], np.ndarray] = {}

    def probs(self, prefix: Sequence[int]) -> np.ndarray:
        """p(. | prefix) -> [vocab_size] (float64, or object array of Fraction when `exact`).

        Raises:
            TypeError / ValueError: `prefix` is not a sequence of in-range token ids.
        """
        key = prefix if type(prefix) is tuple else None
        if key is not None and key in self._cache:
            return self._cache[key]
        key = check_prefix(prefix, self.vocab_size)
        if key not in self._cache:
            self._cache[key] = self._compute(key)
        return self._cache[key]

    def _compute(self, prefix: tuple[int, ...]) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def state_key(self, prefix: tuple[int, ...]) -> Hashable:
        """A key such that probs(prefix + s) depends only on (state_key(prefix), s).

        Lets `exact` reuse one iteration's law across prefixes of a Markov or i.i.d. model.
        The default (the prefix itself) is always valid.
        """
        return prefix

    def describe(self) -> str:
        """A one-line description (used in counterexample reports)."""
        return repr(self)


class IID(LanguageModel):
    """Every position ~ `dist`, whatever the prefix."""

    def __init__(self, dist):
        dist = as_probs(dist, "probs")
        super().__init__(len(dist))
        self.dist = dist
        self.exact = is_exact(dist)

    def _compute(self, prefix):
        return self.dist

    def state_key(self, prefix):
        return ()

    def __repr__(self):
        return f"models.iid({list(self.dist)!r})"


class Markov(LanguageModel):
    """First-order Markov chain: p(. | ()) = initial, p(. | ..., t) = transition[t]."""

    def __init__(self, initial, transition):
        initial = as_probs(initial, "initial")
        V = len(initial)
        rows = np.asarray(transition, dtype=object if is_exact(initial) else None)
        if rows.ndim != 2 or rows.shape != (V, V):
            raise ValueError(f"transition: expected shape [{V}, {V}], got {rows.shape}")
        super().__init__(V)
        self.initial = initial
        self.transition = [as_probs(rows[t], f"transition[{t}]", V) for t in range(V)]
        self.exact = is_exact(initial) and all(is_exact(r) for r in self.transition)

    def _compute(self, prefix):
        return self.initial if not prefix else self.transition[prefix[-1]]

    def state_key(self, prefix):
        return prefix[-1:] 

    def __repr__(self):
        return f"models.markov(initial={list(self.initial)!r}, transition={[list(r) for r in self.transition]!r})"


class RandomTree(LanguageModel):
    """A seeded Dirichlet(concentration * 1) conditional for every prefix (a random V-ary tree).

    Small `concentration` gives peaked conditionals (target and draft rarely agree); large gives
    near-uniform ones (high overlap). The conditional of a prefix depends only on (seed, prefix).
    """

    def __init__(self, vocab_size, seed, concentration=1.0, rational=False, denominator=64):
        super().__init__(vocab_size)
        self.seed = check_positive_int(seed, "seed", minimum=0)
        self.concentration = _check_concentration(concentration)
        self.rational = bool(rational)
        self.denominator = check_positive_int(denominator, "denominator")
        self.exact = self.rational

    def _compute(self, prefix):
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, len(prefix), *prefix]))
        dist = rng.dirichlet(np.full(self.vocab_size, self.concentration))
        dist = dist / dist.sum()
        return to_rational(dist, self.denominator) if self.rational else dist

    def __repr__(self):
        extra = f", rational=True, denominator={self.denominator}" if self.rational else ""
        return (f"models.random_tree(vocab_size={self.vocab_size}, seed={self.seed}, "
                f"concentration={self.concentration}{extra})")


class Table(LanguageModel):
    """Explicit conditionals: {prefix tuple: probs}; prefixes not listed use `default`."""

    def __init__(self, probs_by_prefix: Mapping, default=None, vocab_size=None):
        if not isinstance(probs_by_prefix, Mapping):
            raise TypeError("probs_by_prefix: expected a dict {prefix tuple: probs}")
        if not probs_by_prefix and default is None:
            raise ValueError("probs_by_prefix: empty table and no default")
        first = next(iter(probs_by_prefix.values())) if probs_by_prefix else default
        V = vocab_size or len(first)
        super().__init__(V)
        self.table = {check_prefix(k, V, "probs_by_prefix key"): as_probs(v, f"probs_by_prefix[{k!r}]", V)
                      for k, v in probs_by_prefix.items()}
        self.default = None if default is None else as_probs(default, "default", V)
        dists = list(self.table.values()) + ([self.default] if self.default is not None else [])
        self.exact = all(is_exact(d) for d in dists)

    def _compute(self, prefix):
        if prefix in self.table:
            return self.table[prefix]
        if self.default is None:
            raise KeyError(f"prefix {prefix} is not in the table and no default was given")
        return self.default

    def __repr__(self):
        return f"models.table({ {k: list(v) for k, v in self.table.items()}!r}, default={None if self.default is None else list(self.default)!r})"


class Tempered(LanguageModel):
    """`base` at temperature T: p_T ∝ p^(1/T); T = 0 is the greedy point mass (argmax, ties to the
    lowest id); T = 1 returns `base`'s vectors unchanged (so exactness is kept)."""

    def __init__(self, base: LanguageModel, temperature):
        if not isinstance(base, LanguageModel):
            raise TypeError(f"model: expected a LanguageModel, got {type(base).__name__}")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float, Fraction)):
            raise TypeError(f"temperature: expected a number, got {type(temperature).__name__}")
        if not (math.isfinite(temperature) and temperature >= 0):
            raise ValueError(f"temperature: must be finite and >= 0, got {temperature!r}")
        super().__init__(base.vocab_size)
        self.base = base
        self.temperature = temperature
        self.exact = base.exact and temperature in (0, 1)

    def probs(self, prefix: Sequence[int]) -> np.ndarray:
        p = self.base.probs(prefix)
        if is_symbolic(p):
            # Symbolic base (verispec.formal): the argmax is a comparison the replay answers on
            # each run, so its result must not be cached.
            return self._compute(check_prefix(prefix, self.vocab_size))
        return super().probs(prefix)

    def _compute(self, prefix):
        p = self.base.probs(prefix)
        if self.temperature == 1:
            return p
        if self.temperature == 0:
            return one_hot(argmax(p), self.vocab_size, self.base.exact)
        logp = np.log(np.asarray(p, dtype=np.float64), where=np.asarray(p, dtype=np.float64) > 0,
                      out=np.full(self.vocab_size, -np.inf))
        scaled = np.exp((logp - logp.max()) / self.temperature)  # [V]
        return scaled / scaled.sum()

    def state_key(self, prefix):
        return self.base.state_key(prefix)

    def __repr__(self):
        return f"models.temperature({self.base!r}, {self.temperature!r})"


class Mixture(LanguageModel):
    """(1 - weight) * a + weight * b at every prefix: dials the overlap between two models."""

    def __init__(self, a: LanguageModel, b: LanguageModel, weight):
        for name, m in (("a", a), ("b", b)):
            if not isinstance(m, LanguageModel):
                raise TypeError(f"{name}: expected a LanguageModel, got {type(m).__name__}")
        if a.vocab_size != b.vocab_size:
            raise ValueError(f"b: vocab_size {b.vocab_size} differs from a's {a.vocab_size}")
        if isinstance(weight, bool) or not isinstance(weight, (int, float, Fraction, np.floating)):
            raise TypeError(f"weight: expected a number in [0, 1], got {type(weight).__name__}")
        if not 0 <= weight <= 1:
            raise ValueError(f"weight: must lie in [0, 1], got {weight!r}")
        super().__init__(a.vocab_size)
        self.a, self.b, self.weight = a, b, weight
        self.exact = a.exact and b.exact and isinstance(weight, (Fraction, int))

    def _compute(self, prefix):
        mixed = (1 - self.weight) * self.a.probs(prefix) + self.weight * self.b.probs(prefix)  # [V]
        # A Fraction weight over float models yields an object array of floats: only an all-exact
        # mixture may stay dtype=object (object arrays are read as exact everywhere).
        return mixed if self.exact else np.asarray(mixed, dtype=np.float64)

    def state_key(self, prefix):
        return (self.a.state_key(prefix), self.b.state_key(prefix))

    def __repr__(self):
        return f"models.mixture({self.a!r}, {self.b!r}, weight={self.weight!r})"


class ExactTwin(LanguageModel):
    """`base` with every conditional written exactly: the Fractions of its float64 values,
    normalised to sum to 1 exactly (each entry moves by about 1e-16). An exact model whose laws
    are, to round-off, those of `base`: the rational twin of a float64 instance."""

    exact = True

    def __init__(self, base: LanguageModel):
        if not isinstance(base, LanguageModel):
            raise TypeError(f"base: expected a LanguageModel, got {type(base).__name__}")
        super().__init__(base.vocab_size)
        self.base = base

    def _compute(self, prefix):
        values = [Fraction(x) for x in self.base.probs(prefix)]  # exact values of the float64 entries
        total = sum(values)
        return np.array([x / total for x in values], dtype=object)  # [V]

    def state_key(self, prefix):
        return self.base.state_key(prefix)

    def __repr__(self):
        return f"models.exact_twin({self.base!r})"


def exact_twin(model: LanguageModel) -> LanguageModel:
    """`model` itself when exact, else its `ExactTwin` (its float64 conditionals as Fractions)."""
    return model if isinstance(model, LanguageModel) and model.exact else ExactTwin(model)


def _rationalise(dist, rational: bool, denominator: int):
    return to_rational(dist, denominator) if rational else dist


def iid(probs, rational: bool = False, denominator: int = 64) -> IID:
    """A context-free model: every position ~ `probs` ([V]). Fractions in `probs` (or
    `rational=True`, rounding to k/denominator) give an exact model."""
    return IID(_rationalise(as_probs(probs, "probs"), rational, denominator))


def markov(initial, transition, rational: bool = False, denominator: int = 64) -> Markov:
    """First-order Markov model. initial: [V]; transition: [V, V], row t = p(. | last token t)."""
    initial = as_probs(initial, "initial")
    if rational:
        initial = to_rational(initial, denominator)
        rows = np.asarray(transition, dtype=np.float64)
        transition = np.array([list(to_rational(r, denominator)) for r in rows], dtype=object)
    return Markov(initial, transition)


def random_markov(vocab_size: int, seed: int, concentration: float = 1.0, rational: bool = False,
                  denominator: int = 64) -> Markov:
    """A Markov model whose initial law and transition rows are seeded Dirichlet draws."""
    vocab_size = check_positive_int(vocab_size, "vocab_size")
    _check_concentration(concentration)
    rng = np.random.default_rng(check_positive_int(seed, "seed", minimum=0))
    rows = rng.dirichlet(np.full(vocab_size, float(concentration)), size=vocab_size + 1)  # [V + 1, V]
    rows = rows / rows.sum(axis=1, keepdims=True)
    return markov(rows[0], rows[1:], rational=rational, denominator=denominator)


def random_tree(vocab_size: int, seed: int, concentration: float = 1.0, rational: bool = False,
                denominator: int = 64) -> RandomTree:
    """A seeded Dirichlet conditional per prefix (see `RandomTree`)."""
    return RandomTree(vocab_size, seed, concentration, rational, denominator)


def table(probs_by_prefix: Mapping, default=None, vocab_size: int | None = None) -> Table:
    """Explicit conditionals {prefix tuple: probs [V]}, with an optional `default` row."""
    return Table(probs_by_prefix, default, vocab_size)


def temperature(model: LanguageModel, temperature) -> Tempered:
    """`model` at the given temperature (0 = greedy point mass)."""
    return Tempered(model, temperature)


def mixture(a: LanguageModel, b: LanguageModel, weight) -> Mixture:
    """(1 - weight) * a + weight * b, prefix by prefix."""
    return Mixture(a, b, weight)


def check_pair(target: LanguageModel, draft: LanguageModel) -> None:
    """Raise TypeError/ValueError unless target and draft are LanguageModels over one vocabulary."""
    if not isinstance(target, LanguageModel):
        raise TypeError(f"target: expected a LanguageModel, got {type(target).__name__}")
    if draft is not None and not isinstance(draft, LanguageModel):
        raise TypeError(f"draft: expected a LanguageModel, got {type(draft).__name__}")
    if draft is not None and draft.vocab_size != target.vocab_size:
        raise ValueError(f"draft: vocab_size {draft.vocab_size} differs from target's {target.vocab_size}")
