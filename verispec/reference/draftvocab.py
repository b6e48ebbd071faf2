"""The reference twin of a frequency-ranked draft vocabulary (FR-Spec).

FR-Spec (Zhao et al. 2025, "FR-Spec: Accelerating Large-Vocabulary Language Models via
Frequency-Ranked Speculative Sampling", arXiv 2502.14856) drafts from the draft model restricted
to a token subset S, and verifies against the full-vocabulary target with the restricted q:

    q_S(x) = q(x) 1[x in S] / q(S)        (q(S) = sum of q over S)

Any verifier stays lossless, because its ratios and residuals read the law the drafts were
actually drawn from. q(S) = 0 (the draft model puts no mass on S, possible for the toy models of
`verispec.reference.models`, never for a softmax) is defined as the uniform law on S: any law
supported on S keeps the rules exact, and this one is what a softmax over S of equal (e.g. all
minus-infinity-clamped) logits gives.

Temperature: the torch engine computes the draft's logits over S and then applies T (at T = 0
the argmax over S), so `restrict` of a `models.temperature(base, T)` wrapper restricts `base`
first and re-applies T: restricting a greedy point mass after the fact would lose the argmax over S.

- `restrict(model, subset)`: the `LanguageModel` q_S.
- `draft_vocab(method, subset)`: any reference `Method` with its draft model restricted to S
  (both in drafting and wherever the verifier reads the draft model).

The torch engine's version: `verispec.empirical.speedups.draftvocab` (`methods.get(name, draft_vocab=k)`).
"""

from __future__ import annotations

from fractions import Fraction
from numbers import Integral

import numpy as np

from .drafters import Drafter
from .methods import Method
from .models import LanguageModel, Tempered, temperature

__all__ = ["Restricted", "restrict", "draft_vocab", "subset_ids"]


def subset_ids(subset, vocab_size: int, name: str = "subset") -> tuple[int, ...]:
    """The token ids of `subset` over a vocabulary of V = `vocab_size` tokens, sorted, unique:
    an int k >= 1 means the k lowest ids {0, ..., min(k, V) - 1}; a sequence lists the ids.

    Raises:
        TypeError: neither an int nor a sequence of ints (numpy integers allowed).
        ValueError: k < 1, an empty sequence, or an id outside [0, V).
    """
    if isinstance(subset, Integral) and not isinstance(subset, bool):
        if subset < 1:
            raise ValueError(f"{name}: expected k >= 1 lowest ids or a sequence of token ids, got {subset}")
        return tuple(range(min(int(subset), vocab_size)))
    if isinstance(subset, (str, bytes)) or not hasattr(subset, "__iter__"):
        raise TypeError(f"{name}: expected an int k or a sequence of token ids, got {type(subset).__name__}")
    items = list(subset)
    if not all(isinstance(t, Integral) and not isinstance(t, bool) for t in items):
        raise TypeError(f"{name}: token ids must be ints")
    if not items:
        raise ValueError(f"{name}: the subset is empty")
    if not all(0 <= t < vocab_size for t in items):
        raise ValueError(f"{name}: token ids must lie in [0, {vocab_size})")
    return tuple(sorted({int(t) for t in items}))


class Restricted(LanguageModel):
    """`base` restricted to the token ids `subset`: q_S = q 1_S / q(S), uniform on S when
    q(S) = 0 (module docstring). Exact (Fractions) when `base` is.

    Args:
        base: a `LanguageModel`. subset: an int k (the k lowest ids) or a sequence of token ids.

    Raises:
        TypeError: `base` not a LanguageModel; `subset` as `subset_ids`. ValueError: as `subset_ids`.
    """

    def __init__(self, base: LanguageModel, subset):
        if not isinstance(base, LanguageModel):
            raise TypeError(f"model: expected a LanguageModel, got {type(base).__name__}")
        super().__init__(base.vocab_size)
        self.base, self.subset = base, subset_ids(subset, base.vocab_size)
        self.exact = base.exact
        self._mask = np.zeros(base.vocab_size, dtype=np.int64)  # [V]: 1 on S
        self._mask[list(self.subset)] = 1

    def _compute(self, prefix):
        q = self.base.probs(prefix)  # [V], float64 or Fractions
        kept = q * self._mask  # [V]: q 1_S
        mass = kept.sum()  # q(S)
        if mass == 0:  # no mass on S: the uniform law on S
            n = len(self.subset)
            if q.dtype == object:
                return np.array([Fraction(int(m), n) for m in self._mask], dtype=object)
            return self._mask / n
        return kept / mass

    def state_key(self, prefix):
        return self.base.state_key(prefix)

    def __repr__(self):
        return f"draftvocab.restrict({self.base!r}, {list(self.subset)!r})"


def restrict(model: LanguageModel, subset) -> LanguageModel:
    """`model` restricted to `subset` (q_S); a `models.temperature(base, T)` wrapper becomes
    `temperature(restrict(base, subset), T)`, the torch engine's order (logits over S, then T).

    Raises:
        TypeError / ValueError: as `Restricted`.
    """
    if isinstance(model, Tempered):
        return temperature(restrict(model.base, subset), model.temperature)
    return Restricted(model, subset)


def draft_vocab(method: Method, subset) -> Method:
    """`method` with its draft model restricted to `subset` (FR-Spec, arXiv 2502.14856): the
    drafter samples from q_S, and the verifier gets the same restricted draft model (its
    proposals are q_S already). Lossless whenever `method` is.

    Args:
        method: a reference `Method`. subset: an int k (the k lowest ids) or a sequence of ids.

    Returns:
        a `Method` named ``"<name>+draft_vocab"``, params ``{..., "subset": subset}``.

    Raises:
        TypeError: not a Method, or a bad `subset` (also at draft time: an id >= V raises
        ValueError naming `subset`).
    """
    if not isinstance(method, Method):
        raise TypeError(f"method: expected a verispec.reference.methods.Method, got {type(method).__name__}")
    if isinstance(subset, Integral) and not isinstance(subset, bool):
        subset_ids(subset, 1)  # k >= 1
    else:
        subset_ids(subset, 2 ** 62)  # well-formed ids; the range is checked against V when drafting
    restricted = _memo(subset)
    inner = method.draft

    def build(draft_model, context, rand):
        return inner(restricted(draft_model), context, rand)

    def verify(target, draft_model, context, draft, rand):
        return method.verify(target, restricted(draft_model), context, draft, rand)

    params = dict(getattr(inner, "params", {}))
    drafter = Drafter("draft_vocab", build, **params, subset=subset)
    return Method(f"{method.name}+draft_vocab", drafter, verify, {**method.params, "subset": subset},
                  model_state_only=method.model_state_only, lossy=method.lossy)


def _memo(subset):
    """restrict(model, subset), one wrapper per draft model (so its conditionals are memoised
    across iterations), None passed through (a draft-free drafter's missing model)."""
    made: dict = {}

    def restricted(model):
        if not isinstance(model, LanguageModel):
            return model  # the drafter or rule raises its own error about a missing draft model
        key = id(model)
        if key not in made or made[key][0] is not model:
            if len(made) > 64:  # a sweep builds many models: keep the memo small
                made.clear()
            made[key] = (model, restrict(model, subset))
        return made[key][1]

    return restricted
