"""Hypothesis strategies for speculative-decoding tests: distributions, toy LMs, target/draft pairs.

Use them in your own ``@given`` tests together with `verispec.reference.exact`::

    from hypothesis import given
    from verispec.reference import exact, methods
    from verispec.testing import strategies as vst

    @given(vst.instances(vocab_sizes=(2, 3), max_num_tokens=3))
    def test_my_rule_is_lossless(inst):
        law = exact.output_distribution(inst.target, inst.draft, my_method, inst.context, inst.num_tokens)
        ref = exact.target_distribution(inst.target, inst.context, inst.num_tokens)
        assert exact.total_variation(law, ref) <= 1e-12

Every strategy is deterministic given hypothesis' draws: numpy seeds are *drawn integers* (hypothesis
does not seed ``numpy.random.default_rng``), so a failing example replays exactly.

``exact=True`` everywhere means rational models (``fractions.Fraction`` probabilities); rules built
from + - * / min max then give output laws that equal the target's exactly (TV == 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from ..reference import models
from .sweeps import Instance, check_families, check_vocab_sizes

__all__ = ["Instance", "distributions", "language_models", "model_pairs", "temperatures", "instances",
           "FAMILIES", "NEAR_ZERO", "register_profiles", "check_vocab_sizes"]

#: Model families `language_models` knows, from cheapest to most expensive to enumerate.
FAMILIES = ("iid", "markov", "random_tree", "table")

#: The "near-zero" probability used in the edge cases of `distributions` (float64).
NEAR_ZERO = 1e-12

_MAX_SEED = 2**32 - 1


def register_profiles() -> None:
    """Register (never load) the hypothesis profiles "verispec-ci" (derandomized, no deadline, 100
    examples) and "verispec-dev" (25 examples, no deadline). Done on import of this module and by
    the pytest plugin; opt in with ``settings.load_profile("verispec-ci")`` or
    ``pytest --hypothesis-profile=verispec-ci``."""
    settings.register_profile("verispec-ci", derandomize=True, deadline=None, max_examples=100,
                              suppress_health_check=[HealthCheck.too_slow], print_blob=True)
    settings.register_profile("verispec-dev", deadline=None, max_examples=25,
                              suppress_health_check=[HealthCheck.too_slow])


register_profiles()


# --------------------------------------------------------------------------------------------------
# argument checks (at strategy-construction time, so a typo fails before hypothesis runs anything)

def _vocab_strategy(vocab_size, name="vocab_size"):
    """An int or a strategy of ints -> a strategy of ints >= 1."""
    if isinstance(vocab_size, st.SearchStrategy):
        return vocab_size
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)):
        raise TypeError(f"{name}: expected an int >= 1 or a hypothesis strategy, got {type(vocab_size).__name__}")
    if vocab_size < 1:
        raise ValueError(f"{name}: must be >= 1, got {vocab_size}")
    return st.just(int(vocab_size))


def _check_bool(value, name):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")
    return bool(value)


# --------------------------------------------------------------------------------------------------
# distributions

def _from_weights(weights, exact):
    """Normalise non-negative integer/float weights (positive sum) to a distribution [V]."""
    if exact:
        total = sum(weights)
        return np.array([Fraction(w) / total for w in weights], dtype=object)
    arr = np.asarray(weights, dtype=np.float64)
    return arr / arr.sum()


@st.composite
def _distribution(draw, vocab_size, exact):
    V = draw(vocab_size)
    if V == 1:
        return _from_weights([1], exact)
    kind = draw(st.sampled_from(["one_hot", "uniform", "peaked", "near_zero", "generic"]))
    if kind == "one_hot":
        weights = [0] * V
        weights[draw(st.integers(0, V - 1))] = 1
    elif kind == "uniform":
        weights = [1] * V
    elif kind == "peaked":
        # one token holds almost all the mass; the rest share the remainder (some may be 0)
        top = draw(st.integers(0, V - 1))
        weights = [draw(st.integers(0, 1)) for _ in range(V)]
        weights[top] = draw(st.sampled_from([20, 100, 1000]))
    elif kind == "near_zero":
        # entries of about 1e-12 next to ordinary ones: the usual source of 0/0 and overflow bugs
        tiny = Fraction(1, 10**12) if exact else NEAR_ZERO
        weights = [draw(st.sampled_from([tiny, 1, 2, 3])) for _ in range(V)]
        if all(w == tiny for w in weights):
            weights[0] = 1
        weights[draw(st.integers(0, V - 1))] = tiny
    else:
        weights = [draw(st.integers(0, 8)) for _ in range(V)]
        if sum(weights) == 0:
            weights[draw(st.integers(0, V - 1))] = 1
    return _from_weights(weights, exact)


def distributions(vocab_size=st.integers(2, 4), exact: bool = False) -> st.SearchStrategy:
    """Probability vectors of shape [vocab_size].

    Generates, with roughly equal weight: one-hot vectors, the uniform vector, peaked vectors (one
    token with >= ~90% of the mass; other entries possibly 0), vectors with near-zero entries
    (``NEAR_ZERO`` = 1e-12 next to O(1) ones) and generic vectors with small-integer weights
    (including exact zeros). ``vocab_size == 1`` gives the point mass [1].

    Args:
        vocab_size: an int >= 1 or a strategy of such ints (default: 2..4).
        exact: False -> float64 arrays summing to 1 up to round-off; True -> ``dtype=object``
            arrays of ``Fraction`` summing to exactly 1 (the near-zero entry is then 10**-12 exactly).

    Raises:
        TypeError / ValueError: a bad ``vocab_size`` or ``exact`` (at construction time).
    """
    return _distribution(_vocab_strategy(vocab_size), _check_bool(exact, "exact"))


# --------------------------------------------------------------------------------------------------
# language models

_CONCENTRATIONS = (0.2, 0.5, 1.0, 3.0)


@st.composite
def _model(draw, vocab_size, families, exact):
    V = draw(vocab_size)
    return _build_model(draw, V, draw(st.sampled_from(families)), exact)


def _build_model(draw, V, family, exact):
    if family == "iid":
        return models.iid(draw(distributions(V, exact)))
    if family == "markov":
        if draw(st.booleans()):
            # seeded Dirichlet rows: generic transitions (rounded to k/32 when exact)
            return models.random_markov(V, draw(st.integers(0, _MAX_SEED)),
                                        draw(st.sampled_from(_CONCENTRATIONS)), rational=exact,
                                        denominator=32)
        initial = draw(distributions(V, exact))
        rows = [draw(distributions(V, exact)) for _ in range(V)]
        return models.markov(initial, np.array([list(r) for r in rows], dtype=object if exact else np.float64))
    if family == "random_tree":
        return models.random_tree(V, draw(st.integers(0, _MAX_SEED)), draw(st.sampled_from(_CONCENTRATIONS)),
                                  rational=exact, denominator=32)
    if family == "table":
        # explicit rows for the empty prefix and every one-token prefix, a default row below
        rows = {(): draw(distributions(V, exact))}
        for t in range(V):
            if draw(st.booleans()):
                rows[(t,)] = draw(distributions(V, exact))
        return models.table(rows, default=draw(distributions(V, exact)), vocab_size=V)
    raise AssertionError(family)  # pragma: no cover - families are checked up front


def language_models(vocab_size=st.integers(2, 4), families=("iid", "markov", "random_tree"),
                    exact: bool = False) -> st.SearchStrategy:
    """Toy `LanguageModel`s of the reference families over ``vocab_size`` tokens.

    Families (pick with ``families``):

    - ``"iid"``: every position ~ a vector from `distributions` (so one-hot, near-zero, ... rows).
    - ``"markov"``: either `models.random_markov` with a drawn seed and Dirichlet concentration in
      {0.2, 0.5, 1, 3}, or explicit rows drawn from `distributions` (edge cases included).
    - ``"random_tree"``: `models.random_tree` with a drawn seed and concentration (a fresh
      conditional for every prefix: the most general and the most expensive to enumerate).
    - ``"table"``: explicit rows for () and some one-token prefixes, a drawn default row.

    Args:
        vocab_size: an int >= 1 or a strategy of ints (default 2..4).
        families: a sequence of family names from ``FAMILIES``.
        exact: True gives rational models (``model.exact`` is True).
    """
    return _model(_vocab_strategy(vocab_size), check_families(families, FAMILIES), _check_bool(exact, "exact"))


_OVERLAPS = (0, Fraction(1, 4), Fraction(1, 2), Fraction(3, 4), 1)


def _overlap_strategy(overlap, exact):
    if overlap is None:
        values = st.sampled_from(_OVERLAPS)
        if not exact:
            values = st.one_of(values, st.floats(0, 1))
        return values
    if isinstance(overlap, st.SearchStrategy):
        return overlap
    if isinstance(overlap, bool) or not isinstance(overlap, (int, float, Fraction)):
        raise TypeError(f"overlap: expected a number in [0, 1], a strategy or None, got {type(overlap).__name__}")
    if not 0 <= overlap <= 1:
        raise ValueError(f"overlap: must lie in [0, 1], got {overlap!r}")
    if exact and isinstance(overlap, float):
        overlap = Fraction(overlap)
    return st.just(overlap)


@st.composite
def _pair(draw, vocab_size, families, exact, overlap, independent):
    V = draw(vocab_size)
    target = _build_model(draw, V, draw(st.sampled_from(families)), exact)
    other = _build_model(draw, V, draw(st.sampled_from(families)), exact)
    if independent is True or (independent is None and draw(st.booleans())):
        return target, other
    weight = draw(overlap)
    if exact and not isinstance(weight, (int, Fraction)):
        weight = Fraction(weight)
    # draft = (1 - w) * other + w * target: w = 1 is a perfect draft, w = 0 an independent one
    return target, models.mixture(other, target, weight)


def model_pairs(vocab_size=st.integers(2, 4), families=("iid", "markov", "random_tree"),
                exact: bool = False, overlap=None, independent=None) -> st.SearchStrategy:
    """(target, draft) pairs of `LanguageModel`s over one vocabulary, with controlled overlap.

    Either an *independent* pair (both drawn from `language_models`), or an *overlapping* pair
    where ``draft = models.mixture(other, target, weight=overlap)``, i.e.
    ``q = (1 - overlap) * other + overlap * p`` at every prefix.

    Args:
        vocab_size: an int >= 1 or a strategy of ints (default 2..4); both models share it.
        families: family names for both models (see `language_models`).
        exact: rational models (and rational mixture weights).
        overlap: the mixture weight of the target in the draft: a number in [0, 1], a strategy, or
            None (default) to draw from {0, 1/4, 1/2, 3/4, 1} (plus any float in [0, 1] when not
            exact). overlap = 1 is the draft == target edge case.
        independent: True -> only independent pairs; False -> only mixtures; None -> both.

    Raises:
        TypeError / ValueError: bad knobs (named), at construction time.
    """
    if independent is not None:
        independent = _check_bool(independent, "independent")
    exact = _check_bool(exact, "exact")
    return _pair(_vocab_strategy(vocab_size), check_families(families, FAMILIES), exact,
                 _overlap_strategy(overlap, exact), independent)


def temperatures(include_zero: bool = True, min_value: float = 0.1, max_value: float = 4.0) -> st.SearchStrategy:
    """Sampling temperatures for `models.temperature`.

    Always-included edge cases: 0 (greedy point mass; only with ``include_zero``) and exactly 1
    (the wrapper returns the base vectors unchanged); plus 0.5, 2 and floats in
    [min_value, max_value].

    Args:
        include_zero: whether T = 0 may be generated.
        min_value, max_value: the range of the generic floats (0 < min_value <= max_value).
    """
    include_zero = _check_bool(include_zero, "include_zero")
    for name, value in (("min_value", min_value), ("max_value", max_value)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise TypeError(f"{name}: expected a finite number, got {value!r}")
    if not 0 < min_value <= max_value:
        raise ValueError(f"min_value, max_value: need 0 < min_value <= max_value, got {min_value}, {max_value}")
    fixed = [1, 0.5, 2.0] + ([0] if include_zero else [])
    fixed = [t for t in fixed if t in (0, 1) or min_value <= t <= max_value]
    return st.one_of(st.sampled_from(fixed), st.floats(min_value, max_value))


# --------------------------------------------------------------------------------------------------
# instances

_FAMILY_RANK = {"iid": 0, "markov": 1, "table": 2, "random_tree": 3}


@dataclass(frozen=True)
class _InstanceSpace:
    """What `instances` draws from (its checked arguments; `overlap` a strategy of weights)."""

    vocab_sizes: tuple
    families: tuple
    exact: bool
    max_num_tokens: int
    max_context: int
    temperatures: object
    overlap: object


@st.composite
def _instance(draw, space: _InstanceSpace):
    exact, max_num_tokens, temps = space.exact, space.max_num_tokens, space.temperatures
    V = draw(st.sampled_from(space.vocab_sizes))
    fam_t = draw(st.sampled_from(space.families))
    fam_d = draw(st.sampled_from(space.families))
    target = _build_model(draw, V, fam_t, exact)
    draft = _build_model(draw, V, fam_d, exact)
    if draw(st.booleans()):
        weight = draw(_overlap_strategy(space.overlap, exact))
        if exact and not isinstance(weight, (int, Fraction)):
            weight = Fraction(weight)
        draft = models.mixture(draft, target, weight)
    label = f"{fam_t}/{fam_d}"
    if temps is not None:
        T = draw(temps)
        if T != 1:
            target, draft = models.temperature(target, T), models.temperature(draft, T)
            label += f", T={T}"
    # random trees have a fresh conditional per prefix: keep N small for them (cost ~ V^N)
    n_cap = max_num_tokens if "random_tree" not in (fam_t, fam_d) or V <= 2 else min(max_num_tokens, 3)
    N = draw(st.integers(1, n_cap))
    context = tuple(draw(st.lists(st.integers(0, V - 1), max_size=space.max_context)))
    rank = max(_FAMILY_RANK[fam_t], _FAMILY_RANK[fam_d])
    return Instance(target, draft, context, N, complexity=rank, label=label)


def instances(vocab_sizes=(2, 3), families=("iid", "markov", "random_tree"), exact: bool = False,
              max_num_tokens: int = 4, max_context: int = 2, temperatures=None,
              overlap=None) -> st.SearchStrategy:
    """Small, cost-bounded `Instance`s (target, draft, context, num_tokens) for exact checks.

    Sizes stay where exact enumeration of a chain method with draft length <= 2 costs well under a
    second: V from ``vocab_sizes``, N in 1..max_num_tokens (at most 3 when a random-tree model is
    involved and V >= 3), a context of 0..max_context tokens. The draft is either independent of
    the target or a mixture with it (``overlap`` as in `model_pairs`).

    Args:
        vocab_sizes: a non-empty sequence of ints >= 1.
        families: model families (see `language_models`).
        exact: rational models.
        max_num_tokens: N's upper bound (>= 1).
        max_context: the longest context (>= 0).
        temperatures: None (no temperature wrapper) or a strategy of temperatures, e.g.
            `temperatures()`; the same T wraps target and draft (T = 1 adds no wrapper). A
            tempered model with 0 < T != 1 is float64 even when ``exact``.
        overlap: see `model_pairs`.
    """
    vocab_sizes = check_vocab_sizes(vocab_sizes)
    for name, value, low in (("max_num_tokens", max_num_tokens, 1), ("max_context", max_context, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
        if value < low:
            raise ValueError(f"{name}: must be >= {low}, got {value}")
    if temperatures is not None and not isinstance(temperatures, st.SearchStrategy):
        raise TypeError("temperatures: expected None or a hypothesis strategy (e.g. strategies.temperatures())")
    exact = _check_bool(exact, "exact")
    return _instance(_InstanceSpace(vocab_sizes, check_families(families, FAMILIES), exact, int(max_num_tokens),
                                    int(max_context), temperatures, _overlap_strategy(overlap, exact)))
