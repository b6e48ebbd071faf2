"""The int8 drafts of one bench run (``dq=8``): built once per draft model, before any timed span,
and held by the run that built them (no process-wide cache)."""

from __future__ import annotations

from ..empirical.speedups.quantize import quantize_draft
from .spec import BenchMethod
from .weights import ModelPair

__all__ = ["QuantizedDrafts"]


class QuantizedDrafts:
    """The int8 copy of each draft model a run uses (`verispec.empirical.speedups.quantize.quantize_draft`).

    One object per run (`run_bench` creates it and passes it down): the copies live as long as
    the run, and two runs never share one.
    """

    def __init__(self):
        self._copies: dict = {}  # id(draft CausalLM) -> (draft, its int8 copy); the draft kept so its id stays its own

    def __len__(self) -> int:
        return len(self._copies)

    def pair_for(self, spec: BenchMethod, pair):
        """The pair a method decodes with: `pair` itself, or with ``dq=8`` a `ModelPair` whose draft
        is the int8 copy of `pair.draft` (built on first use, seconds on a 0.5B: the run's warm-up
        builds it, so it is never built inside a timed span)."""
        if not spec.draft_quant:
            return pair
        key = id(pair.draft)
        if key not in self._copies:
            self._copies[key] = (pair.draft, quantize_draft(pair.draft, bits=spec.draft_quant))
        return ModelPair(pair.target, self._copies[key][1], getattr(pair, "tokenizer", None))
