"""The one sweep: which toy instances a losslessness check runs, planned by one code path.

`assert_lossless`, `assert_not_worse`, the sampler harnesses and `verispec check` take their
instances from a `Sweep`: the vocabulary sizes, the number of emitted tokens N, a cost budget, a
seed, and a design that says which target/draft pairs fill each size:

- `FamilyGrid` (the default of `assert_lossless` and the harnesses): at each size one seeded pair
  per model family (i.i.d., Markov, random tree), each at every temperature (the same T wraps
  target and draft), the pairs rational (k/32) unless asked otherwise;
- `SeededPairs` (the default of `verispec check`): at the smallest size fresh random-tree pairs at
  target/draft temperatures cycling through `TEMPERATURES`, each from its own seeded random context
  of 3 tokens; at the larger sizes fresh i.i.d. pairs (one conditional: cheap at V = 6).

Size-aware (`sweep_plan`): a bug that needs size s (a top-k draft with k = s, K draft paths, a
tree of width s) is found only by instances LARGER than s, while an exact check costs about V**N
(the N-token outcomes). So a size V <= 3 gets the design's full count at N, and a larger V gets
budget // V**N instances (at least 1), N lowered at the sizes where V**N exceeds the budget;
`SeededPairs` gives its smallest size the full count too. `Sweep.instances()` lists the plan,
smallest first (V, then N, then the design's order); `Instance.line()` and `describe_counts` are
the one description both the command and the API print.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

import numpy as np

from ..reference import models
from ..reference.models import LanguageModel, check_positive_int, check_prefix
from ._internal.arguments import as_tuple

__all__ = ["Instance", "Sweep", "FamilyGrid", "SeededPairs", "sweep_plan", "check_vocab_sizes", "check_budget",
           "describe_counts", "sweep", "grid_sweep", "check_families", "check_temperatures", "check_exact", "DEFAULT_FAMILIES", "DEFAULT_VOCAB_SIZES", "DEFAULT_BUDGET", "FULL_GRID_MAX_VOCAB",
           "TEMPERATURES", "CHECK_VOCAB_SIZES"]

#: Model families of `FamilyGrid`, simplest first.
DEFAULT_FAMILIES = ("iid", "markov", "random_tree")

#: `FamilyGrid`'s vocabulary sizes by default (`assert_lossless`, the harnesses go to V = 3).
DEFAULT_VOCAB_SIZES = (2, 3, 4, 5, 6)

#: `SeededPairs`'s vocabulary sizes by default (`verispec check`).
CHECK_VOCAB_SIZES = (3, 4, 5, 6)

#: Vocabulary sizes up to this one always get the design's full count.
FULL_GRID_MAX_VOCAB = 3

#: The default cost budget per larger vocabulary size, in N-token outcome sequences (V ** N).
DEFAULT_BUDGET = 1000

#: `SeededPairs`'s (target temperature, draft temperature), cycled over its instances: sampling, a
#: greedy target, mixed, a greedy draft (on rational instances rounded to 0 or 1).
TEMPERATURES = ((1.0, 1.0), (0.0, 1.0), (0.5, 2.0), (1.0, 0.0))


@dataclass(frozen=True)
class Instance:
    """One losslessness check: the loop's first ``num_tokens`` tokens from ``context``.

    Attributes:
        target, draft: LanguageModels over one vocabulary (draft may be None for draft-free methods).
        context: tuple of token ids.
        num_tokens: N >= 1 (`verispec check` checks each method at the smaller of its own N and
            this; None from `verispec.check.make_instances` without a cap: each method at its own N).
        complexity: a rank used to order instances from simplest to most general (within one
            vocabulary size and N); smaller is simpler.
        label: a short human-readable description (family, temperature, ...).
        index: the instance's position among those of its vocabulary size in its sweep (0 for a
            single given instance).
    """

    target: LanguageModel
    draft: LanguageModel | None
    context: tuple = ()
    num_tokens: int | None = 1
    complexity: int = 0
    label: str = ""
    index: int = 0

    @property
    def vocab_size(self) -> int:
        return self.target.vocab_size

    @property
    def exact(self) -> bool:
        """True when both models are rational (a lossless rule must then give TV == 0 exactly)."""
        return bool(self.target.exact and (self.draft is None or self.draft.exact))

    def models(self) -> tuple:
        """(target, draft)."""
        return self.target, self.draft

    def sort_key(self):
        """(V, N, complexity, len(context)): smallest counterexamples first."""
        return (self.vocab_size, self.num_tokens, self.complexity, len(self.context))

    def describe(self) -> str:
        """A multi-line, copy-pasteable description (used in counterexample reports)."""
        lines = [f"target     = {self.target.describe()}",
                 f"draft      = {self.draft.describe() if self.draft is not None else None}",
                 f"context    = {self.context!r}",
                 f"num_tokens = {self.num_tokens}"]
        if self.label:
            lines.insert(0, f"instance   : {self.label} (V={self.vocab_size})")
        return "\n".join(lines)

    def line(self) -> str:
        """One line: V, N, the label, the context and both models (the instance list of a sweep)."""
        draft = self.draft.describe() if self.draft is not None else None
        return (f"V={self.vocab_size} N={self.num_tokens} {self.label}: context {self.context!r}, "
                f"target {self.target.describe()}, draft {draft}")

    def summary(self) -> dict:
        """The instance as plain JSON values (label, V, N, context, index, both models' reprs)."""
        return {"label": self.label, "index": self.index, "vocab_size": self.vocab_size,
                "num_tokens": self.num_tokens, "context": list(self.context), "target": self.target.describe(),
                "draft": self.draft.describe() if self.draft is not None else None}


def describe_counts(instances) -> tuple:
    """((V, number of instances), ...) in V order: the per-size counts a sweep reports."""
    sizes = sorted({inst.vocab_size for inst in instances})
    return tuple((V, sum(inst.vocab_size == V for inst in instances)) for V in sizes)


# --------------------------------------------------------------------------------------------------
# argument checks shared by every sweep

def check_vocab_sizes(vocab_sizes) -> tuple[int, ...]:
    """`vocab_sizes` (an int or a sequence of ints >= 1) as a sorted tuple without duplicates;
    shared by the strategies, the sweeps and `verispec check` so that all reject bad sizes with
    the same message.

    Raises:
        TypeError: not an int or a sequence of ints. ValueError: empty, or a size < 1.
    """
    sizes = as_tuple(vocab_sizes, "vocab_sizes", lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, bool),
                     "a sequence of ints", "at least one vocabulary size is needed")
    for v in sizes:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"vocab_sizes: expected ints, got {v!r}")
        if v < 1:
            raise ValueError(f"vocab_sizes: every size must be >= 1, got {v}")
    return tuple(sorted(set(int(v) for v in sizes)))


def check_budget(budget) -> int:
    """`budget` (N-token outcomes per larger vocabulary size) as an int >= 1 (TypeError / ValueError)."""
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)):
        raise TypeError(f"budget: expected an int (N-token outcomes per vocabulary size), got {type(budget).__name__}")
    if budget < 1:
        raise ValueError(f"budget: must be >= 1, got {budget}")
    return int(budget)


def check_temperatures(temperatures) -> tuple:
    """`temperatures` as a tuple of distinct finite numbers >= 0, in their order (TypeError / ValueError)."""
    temps = as_tuple(temperatures, "temperatures", lambda t: isinstance(t, Real) and not isinstance(t, bool),
                     "a sequence of numbers", "at least one temperature is needed (1 = no temperature wrapper)")
    out = []
    for t in temps:
        if isinstance(t, bool) or not isinstance(t, Real):
            raise TypeError(f"temperatures: expected numbers, got {t!r}")
        if not (math.isfinite(t) and t >= 0):
            raise ValueError(f"temperatures: every temperature must be finite and >= 0, got {t!r}")
        if t not in out:
            out.append(t)
    return tuple(out)


def check_exact(exact):
    """`exact`: None, True or False (TypeError otherwise)."""
    if exact is not None and not isinstance(exact, (bool, np.bool_)):
        raise TypeError(f"exact: expected None, True or False, got {type(exact).__name__}")
    return exact if exact is None else bool(exact)


def check_families(families, known=DEFAULT_FAMILIES) -> tuple:
    """`families` (a name or a sequence of names) as a non-empty tuple of names from `known`
    (the sweep's `DEFAULT_FAMILIES`, or the strategies' families).

    Raises:
        TypeError: not a name or a sequence of names. ValueError: empty, or an unknown name.
    """
    families = as_tuple(families, "families", lambda f: isinstance(f, str), "a sequence of family names",
                        "at least one family is needed")
    for fam in families:
        if fam not in known:
            raise ValueError(f"families: unknown family {fam!r}; known: {', '.join(known)}")
    return families


# --------------------------------------------------------------------------------------------------
# how many instances, and with which N, at each size

def sweep_plan(vocab_sizes=DEFAULT_VOCAB_SIZES, num_tokens=4, num_cells=9, budget=DEFAULT_BUDGET):
    """How many instances, and with which N, a sweep checks at each vocabulary size.

    Sizes V <= 3 (`FULL_GRID_MAX_VOCAB`) get the full count ``num_cells`` at N = ``num_tokens``.
    A larger V gets N_V = N when V**N <= budget, else the largest n >= 1 with V**n <= budget (at
    least 1), and max(1, min(num_cells, budget // V**N)) instances. The cost of an exact check
    grows like the number of N-token outcomes V**N, so ``budget`` bounds the work spent per larger
    size while every size is reached.

    Returns:
        {V: (instances, N_V)}, V ascending.
    """
    sizes = check_vocab_sizes(vocab_sizes)
    N = check_positive_int(num_tokens, "num_tokens", 1)
    budget = check_budget(budget)
    plan = {}
    for V in sizes:
        if V <= FULL_GRID_MAX_VOCAB:
            plan[V] = (num_cells, N)
            continue
        n = N
        while n > 1 and V ** n > budget:
            n -= 1
        plan[V] = (max(1, min(num_cells, budget // V ** N)), n)
    return plan


# --------------------------------------------------------------------------------------------------
# the designs: which pairs fill a size

def _seed_for(seed, *keys) -> int:
    """A numpy seed derived from the user's seed and the instance coordinates."""
    return int(np.random.SeedSequence([seed, *keys]).generate_state(1)[0])


def _grid_order(families, temps):
    """(family, temperature) pairs in a Latin-square order: every prefix of the list spreads over
    families and temperatures (i.i.d./T=1 first, then Markov at the next T, random tree at the
    next...), so a size that affords few instances still gets varied ones."""
    F, T = len(families), len(temps)
    return [(families[i % F], temps[(i % F + i // F) % T]) for i in range(F * T)]


@dataclass(frozen=True)
class FamilyGrid:
    """Every model family at every temperature: one seeded pair per family and size, derived from
    ``seed``; the same T wraps target and draft (T = 1: no wrapper). Rational models (k/32) unless
    ``exact is False``; a temperature other than 0 and 1 makes the tempered models float64.

    Attributes:
        families: a subset of ("iid", "markov", "random_tree"). temperatures: numbers >= 0.
        context: token ids every instance starts from (valid for every size). exact: None/True ->
            rational models, False -> float64 models. seed: int >= 0.
    """

    families: tuple = DEFAULT_FAMILIES
    temperatures: tuple = (1, 0, 0.5)
    context: tuple = ()
    exact: bool | None = None
    seed: int = 0

    #: A size above 3 gets the budget's count, the smallest one included.
    full_at_smallest = False

    @property
    def cells(self) -> int:
        return len(self.families) * len(self.temperatures)

    def instances(self, V: int, count: int, num_tokens: int, smallest: bool) -> list:
        """The first `count` cells of the grid at size V (Latin-square order), N = `num_tokens`."""
        ctx = check_prefix(self.context, V, "context")
        pairs = {family: self._pair(family, V) for family in self.families}
        out = []
        for index, (family, T) in enumerate(_grid_order(self.families, self.temperatures)[:count]):
            target, draft = pairs[family]
            t_model, d_model = (target, draft) if T == 1 else (models.temperature(target, T),
                                                               models.temperature(draft, T))
            out.append(Instance(t_model, d_model, ctx, num_tokens,
                                complexity=self.families.index(family) * len(self.temperatures)
                                + self.temperatures.index(T), label=f"{family} pair, T={T}", index=index))
        return out

    def _pair(self, family, V):
        kw = dict(rational=self.exact is not False, denominator=32)
        if family == "iid":
            rng = np.random.default_rng(_seed_for(self.seed, V, 0))
            p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
            return models.iid(p, **kw), models.iid(q, **kw)
        if family == "markov":
            return (models.random_markov(V, _seed_for(self.seed, V, 1, 0), **kw),
                    models.random_markov(V, _seed_for(self.seed, V, 1, 1), **kw))
        return (models.random_tree(V, _seed_for(self.seed, V, 2, 0), **kw),
                models.random_tree(V, _seed_for(self.seed, V, 2, 1), **kw))


@dataclass(frozen=True)
class SeededPairs:
    """Fresh seeded pairs, one per instance: random-tree pairs at the smallest size (a fresh
    conditional per prefix), i.i.d. pairs above it (one conditional: cheap at V = 6). Instance i
    of a size has target seed 2 (1000 seed + i) and draft seed that + 1, the target/draft
    temperatures ``TEMPERATURES[i % 4]`` (rounded to 0 or 1 when rational) and a random context of
    ``context_length`` tokens (the i-th drawn from a generator seeded with ``seed``), so context
    handling and prompt lookup are exercised.

    Attributes:
        num_instances: instances at the smallest size (and at every size <= 3). rational: exact
            Fraction models (then TV must be exactly 0). seed: int >= 0. context_length: int >= 0.
    """

    num_instances: int = 4
    rational: bool = False
    seed: int = 0
    context_length: int = 3

    #: The smallest size always gets `num_instances`, whatever the budget.
    full_at_smallest = True

    @property
    def cells(self) -> int:
        return self.num_instances

    def instances(self, V: int, count: int, num_tokens, smallest: bool, family: str | None = None) -> list:
        """`count` seeded pairs at size V, N = `num_tokens` (random trees at the smallest size)."""
        family = family or ("random_tree" if smallest else "iid")
        rng = np.random.default_rng(self.seed)
        out = []
        for i in range(count):
            context = tuple(int(t) for t in rng.integers(0, V, size=self.context_length))
            t_target, t_draft = TEMPERATURES[i % len(TEMPERATURES)]
            if self.rational:
                t_target, t_draft = (0.0 if t_target == 0 else 1.0), (0.0 if t_draft == 0 else 1.0)
            seeds = 2 * (self.seed * 1000 + i), 2 * (self.seed * 1000 + i) + 1
            target, draft = (self._model(family, V, s, t) for s, t in zip(seeds, (t_target, t_draft)))
            out.append(Instance(target, draft, context, num_tokens, complexity=i, label=f"check instance {i}",
                                index=i))
        return out

    def _model(self, family, V, seed, temperature):
        if family == "iid":
            p = np.random.default_rng(seed).dirichlet(np.ones(V))  # [V]
            base = models.iid(p, rational=self.rational, denominator=32)
        else:
            base = models.random_tree(V, seed, concentration=1.0, rational=self.rational)
        return base if temperature == 1 else models.temperature(base, temperature)


@dataclass(frozen=True)
class Sweep:
    """A planned losslessness sweep: `design` fills each size of `vocab_sizes` with the number of
    instances `sweep_plan` gives it within `budget`, at N = `num_tokens` (lowered at large sizes).

    Attributes:
        design: a `FamilyGrid` or `SeededPairs`. vocab_sizes: ints >= 1. num_tokens: N >= 1 (None:
            the checker's own, `assert_lossless`'s L + 2). budget: int >= 1.
    """

    design: FamilyGrid | SeededPairs = FamilyGrid()
    vocab_sizes: tuple = DEFAULT_VOCAB_SIZES
    num_tokens: int | None = None
    budget: int = DEFAULT_BUDGET

    @classmethod
    def check(cls, vocab_sizes=CHECK_VOCAB_SIZES, num_instances: int = 4, seed: int = 0, rational: bool = False,
              budget: int = DEFAULT_BUDGET, num_tokens: int | None = None) -> "Sweep":
        """The sweep `verispec check` runs with these flags (--vocab-sizes, --instances, --seed,
        --rational, --budget, --num-tokens): `SeededPairs`."""
        design = SeededPairs(check_positive_int(num_instances, "num_instances"), bool(rational),
                             check_positive_int(seed, "seed", 0))
        return cls(design, check_vocab_sizes(vocab_sizes), num_tokens, check_budget(budget))

    def with_num_tokens(self, num_tokens: int) -> "Sweep":
        """This sweep at N = `num_tokens` (the checker's N when the sweep leaves it open)."""
        return Sweep(self.design, self.vocab_sizes, num_tokens, self.budget)

    def plan(self) -> dict:
        """{V: (instances, N_V)}, V ascending (`sweep_plan`; `SeededPairs` fills its smallest size)."""
        sizes = check_vocab_sizes(self.vocab_sizes)
        if self.num_tokens is None:
            raise ValueError("num_tokens: the sweep needs N (Sweep.with_num_tokens, or the method's L + 2)")
        plan = sweep_plan(sizes, self.num_tokens, self.design.cells, self.budget)
        if self.design.full_at_smallest:
            plan[sizes[0]] = (self.design.cells, self.num_tokens)
        return plan

    def instances(self) -> list:
        """The planned instances, smallest first (V, N, then the design's order)."""
        plan = self.plan()
        smallest = min(plan)
        out = []
        for V, (count, n_V) in plan.items():
            out += self.design.instances(V, count, n_V, V == smallest)
        out.sort(key=Instance.sort_key)
        return out


def sweep(vocab_sizes=DEFAULT_VOCAB_SIZES, temperatures=(1, 0, 0.5), num_tokens=4, context=(), seed=0,
          families=DEFAULT_FAMILIES, exact=None, *, budget=DEFAULT_BUDGET) -> list[Instance]:
    """The deterministic instances `assert_lossless` checks by default, smallest first: the
    `FamilyGrid` sweep.

    For every V in ``vocab_sizes`` and every family (i.i.d., Markov, random tree — in that order of
    complexity) one independent target/draft pair is derived from ``seed``; each pair is checked
    at temperatures from ``temperatures`` (the same T wraps target and draft; T = 1 adds no
    wrapper). Models are rational (k/32) unless ``exact is False``; a temperature other than 0 and
    1 makes the tempered models float64. Order: V, then N, then family, then temperature.

    Size-aware: a bug that needs size s — a top-k draft with k = s, K draft paths, a tree of width
    s — is found only by instances LARGER than s (a top-3 draft of a 3-token vocabulary is the
    whole q). So the default sizes go up to 6, and the cost is kept affordable by `sweep_plan`:
    V <= 3 gets every family at every temperature; a larger V gets budget // V**N instances (at
    least 1), picked in an order that varies family and temperature, with N lowered at the sizes
    where V**N exceeds ``budget``. Default (N = 4): 9, 9, 3, 1, 1 instances at V = 2..6 (N = 3 at
    V = 6).

    Args:
        vocab_sizes: ints >= 1 (default 2..6). temperatures: numbers >= 0. num_tokens: N >= 1.
        context: tuple of token ids, valid for every V. seed: int >= 0.
        families: a subset of ("iid", "markov", "random_tree").
        exact: None/True -> rational models; False -> float64 models. With True, temperatures
            other than 0 and 1 are rejected (they cannot be rational).
        budget: int >= 1, N-token outcome sequences (V**N) per vocabulary size above 3.

    Raises:
        TypeError / ValueError: invalid arguments, naming the argument.
    """
    return grid_sweep(vocab_sizes, temperatures, num_tokens, context, seed, families, exact, budget=budget).instances()


def grid_sweep(vocab_sizes=DEFAULT_VOCAB_SIZES, temperatures=(1, 0, 0.5), num_tokens=4, context=(), seed=0,
               families=DEFAULT_FAMILIES, exact=None, *, budget=DEFAULT_BUDGET) -> Sweep:
    """The `Sweep` of `sweep`'s arguments (checked as `sweep` documents; num_tokens None leaves N to
    the checker)."""
    sizes = check_vocab_sizes(vocab_sizes)
    temps = check_temperatures(temperatures)
    N = None if num_tokens is None else check_positive_int(num_tokens, "num_tokens", 1)
    seed = check_positive_int(seed, "seed", 0)
    families = check_families(families)
    exact = check_exact(exact)
    if exact and any(t not in (0, 1) for t in temps):
        raise ValueError(f"temperatures: exact=True needs temperatures in {{0, 1}} (a tempered model at "
                         f"T = {[t for t in temps if t not in (0, 1)][0]} is float64); got {list(temps)}")
    return Sweep(FamilyGrid(families, temps, context, exact, seed), sizes, N, check_budget(budget))
