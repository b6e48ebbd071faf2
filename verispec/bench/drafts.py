"""The drafts of one bench run: the int8 copy (``dq=8``) and the lean-forward view (``df=lean``,
``df=scripted``) of each draft model, and the lean-forward view of the target (``tf=lean``), built
once, before any timed span, and held by the run that built them (no process-wide cache)."""

from __future__ import annotations

from ..empirical.speedups.lean_forward import lean_view
from ..empirical.speedups.quantize import quantize_draft
from .spec import BenchMethod
from .weights import ModelPair

__all__ = ["QuantizedDrafts"]


class QuantizedDrafts:
    """The int8 copy of each draft model a run uses (`verispec.empirical.speedups.quantize.quantize_draft`),
    and the view of a draft, or of the target, that runs its forwards lean
    (`verispec.empirical.speedups.lean_forward`).

    One object per run (`run_bench` creates it and passes it down): the copies live as long as
    the run, and two runs never share one.
    """

    def __init__(self):
        self._copies: dict = {}  # (id(draft CausalLM), None) -> (draft, its int8 copy)
        self._lean: dict = {}  # (id(CausalLM: a draft, int8 or not, or the target), scripted) -> (it, its lean view)

    def __len__(self) -> int:
        return len(self._copies)

    def pair_for(self, spec: BenchMethod, pair):
        """The pair a method decodes with: `pair` itself, or a `ModelPair` whose draft is, with
        ``dq=8``, the int8 copy of `pair.draft`, and with ``df=lean`` (``df=scripted``), the view
        of it that runs the lean forward (its layers as TorchScript); and whose target is, with
        ``tf=lean``, the view of `pair.target` that runs the lean forward. Each is built on first
        use, seconds per model: the run's warm-up builds them, so none is built inside a timed span."""
        draft, target = pair.draft, pair.target
        if spec.draft_quant:
            draft = _once(self._copies, draft, lambda d: quantize_draft(d, bits=spec.draft_quant))
        if spec.draft_forward != "hf":  # its stacked layers: a second of copying on a 0.5B
            scripted = spec.draft_forward == "scripted"
            draft = _once(self._lean, draft, lambda d: lean_view(d, scripted), scripted)
        if spec.target_forward != "hf":
            target = _once(self._lean, target, lean_view, False)
        if draft is pair.draft and target is pair.target:
            return pair
        return ModelPair(target, draft, getattr(pair, "tokenizer", None))


def _once(built: dict, model, build, setting=None):
    """`build(model)`, made on the first call for this model object and `setting`, and kept in
    `built` with the model itself (so its id stays its own while the entry lives)."""
    key = (id(model), setting)
    if key not in built:
        built[key] = (model, build(model))
    return built[key][1]
