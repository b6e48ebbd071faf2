"""The drafts of one bench run: the int8 copy (``dq=8``) and the lean-forward view (``df=lean``,
``df=scripted``) of each draft model, built once, before any timed span, and held by the run that
built them (no process-wide cache)."""

from __future__ import annotations

from ..empirical.speedups.lean_forward import lean_view
from ..empirical.speedups.quantize import quantize_draft
from .spec import BenchMethod
from .weights import ModelPair

__all__ = ["QuantizedDrafts"]


class QuantizedDrafts:
    """The int8 copy of each draft model a run uses (`verispec.empirical.speedups.quantize.quantize_draft`),
    and the view of a draft that runs its forwards lean (`verispec.empirical.speedups.lean_forward`).

    One object per run (`run_bench` creates it and passes it down): the copies live as long as
    the run, and two runs never share one.
    """

    def __init__(self):
        self._copies: dict = {}  # (id(draft CausalLM), None) -> (draft, its int8 copy)
        self._lean: dict = {}  # (id(draft CausalLM, int8 or not), scripted) -> (draft, its lean view)

    def __len__(self) -> int:
        return len(self._copies)

    def pair_for(self, spec: BenchMethod, pair):
        """The pair a method decodes with: `pair` itself, or a `ModelPair` whose draft is, with
        ``dq=8``, the int8 copy of `pair.draft`, and with ``df=lean`` (``df=scripted``), the view
        of it that runs the lean forward (its layers as TorchScript). Each is built on first use,
        seconds on a 0.5B: the run's warm-up builds them, so none is built inside a timed span."""
        draft = pair.draft
        if spec.draft_quant:
            draft = _once(self._copies, draft, lambda d: quantize_draft(d, bits=spec.draft_quant))
        if spec.draft_forward != "hf":  # its stacked layers: a second of copying on a 0.5B
            scripted = spec.draft_forward == "scripted"
            draft = _once(self._lean, draft, lambda d: lean_view(d, scripted), scripted)
        return pair if draft is pair.draft else ModelPair(pair.target, draft, getattr(pair, "tokenizer", None))


def _once(built: dict, draft, build, setting=None):
    """`build(draft)`, made on the first call for this draft object and `setting`, and kept in
    `built` with the draft itself (so its id stays its own while the entry lives)."""
    key = (id(draft), setting)
    if key not in built:
        built[key] = (draft, build(draft))
    return built[key][1]
