"""The bench's method-spec mini-language: ``"name"`` or ``"name:L=4,K=3,dq=8,lin=wxpad"`` ->
`BenchMethod` (`parse_method`).

Method names, parameters, defaults and short keys come from the method registry
(`verispec.reference.registry`; where a parameter declares a `bench` value, the bench runs that
when its key is not given: the cost policy ``pol=auto`` on adaptive, hybrid and opt_tree); the
bench adds only its baselines (the transformers peers ``hf`` and ``hf_prompt_lookup``; ``hf`` takes
the assistant's own settings `PEER_PARAMS`: ``L=`` num_assistant_tokens, ``sched=`` its schedule,
``c=`` its confidence threshold in percent), a user's Method as ``pkg.module:attr``, and five
options of the run: ``dq=8`` (int8 draft weights), ``dv=k`` (a draft vocabulary subset), ``lin=``
(the target's GEMM layout), ``df=lean`` / ``df=scripted`` (the engine's draft forward,
`DRAFT_FORWARDS`) and ``tf=lean`` (the engine's target forward, `TARGET_FORWARDS`).
`verispec bench`'s --draft-length / --num-paths give L and K where the method has them. A method's
label is also the key of its records in a results file, so labels are kept as given.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..empirical.speedups.draftvocab import DraftVocab
from ..empirical.speedups.linear_layout import LAYOUTS
from ..reference import registry
from ..reference.deprecation import deprecated
from ..reference.methods import load
from .config import DEFAULT_METHODS

__all__ = ["BenchMethod", "parse_method", "method_names", "method_entry", "draft_vocabulary", "DEFAULT_METHODS",
           "PEERS", "PEER_PARAMS", "USER_METHOD", "BASELINE", "DRAFT_FORWARDS", "TARGET_FORWARDS"]

#: ``df=``: how the engine runs its draft model's forwards. "hf": the transformers module's own
#: forward; "lean": `verispec.empirical.speedups.lean_forward.LeanForward` (the same function in
#: fewer ops, q/k/v and gate/up stacked); "scripted": the lean forward with its layers run by
#: TorchScript. The peer runs its assistant through transformers always.
DRAFT_FORWARDS = ("hf", "lean", "scripted")
#: ``tf=``: how the engine runs its target model's forwards. "hf": the transformers module's own
#: forward; "lean": the same `LeanForward` (the target's function up to float rounding: its float
#: linears stacked, so only the GEMM's summation order can differ). The peer runs its target through
#: transformers always.
TARGET_FORWARDS = ("hf", "lean")

#: The transformers assisted-generation baselines (`verispec.bench.peer`): not methods of ours.
PEERS = ("hf", "hf_prompt_lookup")
#: The settings of transformers' assistant that ``hf`` takes (its generation_config fields; None:
#: transformers' default): the peer at its own best is a sweep over these.
PEER_PARAMS = (
    registry.Param("num_assistant_tokens", None, "L", "draft tokens per call (transformers' default 20)"),
    registry.Param("schedule", None, "sched", "num_assistant_tokens_schedule: constant (transformers' default) or "
                   "heuristic (+2 after a fully accepted call, -1 otherwise)", choices=("constant", "heuristic")),
    registry.Param("confidence", None, "c", "assistant_confidence_threshold in percent (default 40; 0: no stop)",
                   minimum=0, maximum=100, per=100))
#: The method name of a user's reference Method given as ``pkg.module:attr`` (its label is the spec).
USER_METHOD = "method"
#: The registry's baseline (target-only decoding): every run measures it, and every method against it.
BASELINE = registry.BASELINE_METHOD
#: Every method key in the registry -> what it is (for the error when a method lacks it).
_ALL_KEYS = {p.key: p.doc for e in registry.REGISTRY.values() for p in e.params if p.key}


@dataclass(frozen=True)
class BenchMethod:
    """One bench method: its label (the text given), its registry `name`, the method parameters
    (``(name, value)`` pairs passed to `verispec.empirical.methods.get`) and the run's options:
    draft_vocab k (FR-Spec subset, 0: all), draft_quant (8: int8 draft weights, 0: as loaded),
    linear_layout (the target's GEMM layout, `speedups.linear_layout.LAYOUTS`), draft_forward
    (`DRAFT_FORWARDS`), target_forward (`TARGET_FORWARDS`), and cost_model:
    the id of the measured cost model a policy-"auto" method runs with (`verispec.bench.costs`;
    set by the run, "" before)."""

    label: str
    name: str
    params: tuple = ()
    draft_vocab: int = 0
    draft_quant: int = 0
    linear_layout: str = "xw"
    cost_model: str = ""
    draft_forward: str = "hf"
    target_forward: str = "hf"

    def param(self, name: str, default=None):
        """The value of method parameter `name` (`default` when the spec does not set it)."""
        return dict(self.params).get(name, default)


def method_names() -> tuple:
    """Every method `verispec bench --methods` accepts (besides ``pkg.module:attr``)."""
    return PEERS + tuple(registry.names("torch"))


def method_entry(name: str) -> registry.MethodSpec | None:
    """The registry entry of bench method `name`; None for a peer or a user's Method."""
    return registry.REGISTRY.get(name)


def _takes_draft_vocab(name: str) -> bool:
    """Chains, path methods and trees run the draft's head, so they take a subset; phrase pools do not."""
    entry = registry.spec(name)
    return entry.needs_draft and entry.family != registry.PHRASE_POOL


def _bad(item: str, text: str, known: dict) -> ValueError:
    options = ["dq=8", "dv=k", f"lin= one of {', '.join(LAYOUTS)}", "df=lean or scripted", "tf=lean"]
    keys = ", ".join(list(known) + options)
    return ValueError(f"methods: bad parameter {item!r} in {text!r} (this method takes {keys})")


def _read(name: str, params: str, text: str) -> tuple[dict, dict]:
    """({method parameter: value}, {option: value}) from the ``key=value`` items of `params`.

    Raises:
        ValueError (naming ``methods``): a key the method does not take, or a value out of range.
    """
    entry = None if name in PEERS else registry.spec(name)
    declared = PEER_PARAMS if name == "hf" else () if entry is None else entry.params
    keys = {p.key: p.name for p in declared if p.key}
    by_name = {p.name: p for p in declared}
    values, options = {}, {}
    for item in filter(None, params.split(",")):
        key, _, value = (part.strip() for part in item.partition("="))
        if key not in keys and registry.RENAMED_KEYS.get(key) in keys:  # e.g. a phrase pool's K, now C
            deprecated(f"the key {key}= of {name}", f"{registry.RENAMED_KEYS[key]}=", stacklevel=4)
            key = registry.RENAMED_KEYS[key]
        if key in ("lin", "df", "tf"):
            if value not in {"lin": LAYOUTS, "df": DRAFT_FORWARDS, "tf": TARGET_FORWARDS}[key]:
                raise _bad(item, text, keys)
            options[key] = value
        elif key in ("dq", "dv"):
            if not value.isdigit() or int(value) < 1:
                raise _bad(item, text, keys)
            options[key] = int(value)
        elif key in keys:
            parsed = by_name[keys[key]].from_key(value)
            if parsed is None:
                raise _bad(item, text, keys)
            values[keys[key]] = parsed
        elif key == "K" and dict(getattr(entry, "torch_fixed", ())).get("num_paths", 1) > 1:
            raise ValueError(f"methods: {name} drafts exactly K={dict(entry.torch_fixed)['num_paths']} paths; "
                             f"got {text!r}")
        elif key in _ALL_KEYS:  # another method's key
            raise ValueError(f"methods: {name} takes no {key} ({_ALL_KEYS[key]}; its keys: "
                             f"{', '.join(keys) or 'none'}); got {text!r}")
        else:
            raise _bad(item, text, keys)
    return values, options


def _check_options(name: str, options: dict, values: dict, text: str) -> None:
    """ValueError (naming ``methods``) for dq other than 8 or on a method without a draft model, dv
    on a method whose draft head it cannot narrow, df=lean on a peer or a method without a draft
    model, tf=lean on a peer, or a length cap M below L."""
    drafts = name == "hf" or (name not in PEERS and registry.spec(name).needs_draft)
    if "dq" in options and (options["dq"] != 8 or not drafts):
        raise ValueError(f"methods: dq=8 (int8 draft weights) is the only width, for methods with a draft model "
                         f"(and the peer hf); got {text!r}")
    if "dv" in options and (name != "hf" and (name in PEERS or not _takes_draft_vocab(name))):
        raise ValueError(f"methods: dv (a draft vocabulary subset) is for chains, path methods, trees and hf; got {text!r}")
    if options.get("df", "hf") != "hf" and (name in PEERS or not registry.spec(name).needs_draft):
        raise ValueError(f"methods: df (the engine's draft forward) is for our methods with a draft model; "
                         f"got {text!r}")
    if options.get("tf", "hf") != "hf" and name in PEERS:
        raise ValueError(f"methods: tf (the engine's target forward) is for our methods; the peer runs "
                         f"transformers' own; got {text!r}")
    top = values.get("max_draft_length")
    if top is not None and top < values.get("draft_length", 0):
        raise ValueError(f"methods: M (the length cap's ceiling) must be >= L; got {text!r}")


def parse_method(text: str, draft_length: int, num_paths: int) -> BenchMethod:
    """``"name"`` or ``"name:L=4,K=3"`` (trees ``"opt_tree:n=50"``, phrase pools ``"ouroboros:C=1,W=0"``,
    options ``dq=8``, ``dv=k``, ``lin=wxpad``, ``df=lean``, ``tf=lean``), or a user's
    ``"pkg.module:attr"`` -> BenchMethod.
    `draft_length` / `num_paths` are L and K where the method has them and the text does not set
    them; every other parameter takes the registry's default.

    Raises:
        ValueError (naming ``methods``): unknown method or key, a value out of range, an option
            the method does not take.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"methods: expected a method name, got {text!r}")
    text = text.strip()
    name, _, params = text.partition(":")
    if name not in method_names() and params and "=" not in params:  # a user's Method: pkg.module:attr
        load(text, "methods", draft_length=draft_length, num_paths=num_paths)  # a clear error now
        return BenchMethod(text, USER_METHOD)
    if name not in method_names():
        raise ValueError(f"methods: unknown method {name!r}; known: {', '.join(method_names())}")
    values, options = _read(name, params, text)
    _check_options(name, options, values, text)
    if name not in PEERS:
        takes = registry.spec(name).defaults("torch")
        for key, value in (("draft_length", draft_length), ("num_paths", num_paths)):
            if key in takes:
                values.setdefault(key, value)
        for param in registry.spec(name).params:  # the bench's own defaults (the cost policy)
            if param.bench is not None:
                values.setdefault(param.name, param.bench)
    label = text if params else name
    if name in PEERS or name == BASELINE:  # the label lists the settings, then the options, in one order
        kept = [f"{p.key}={_key_text(p, values[p.name])}" for p in PEER_PARAMS if p.name in values]
        kept += [f"{key}={options[key]}" for key in ("dv", "dq", "lin", "tf") if key in options]
        label = f"{name}:{','.join(kept)}" if kept else name
    order = [p.name for p in PEER_PARAMS] if name in PEERS else list(registry.spec(name).defaults("torch"))
    return BenchMethod(label, name, tuple(sorted(values.items(), key=lambda kv: order.index(kv[0]))),
                       options.get("dv", 0), options.get("dq", 0), options.get("lin", "xw"),
                       draft_forward=options.get("df", "hf"), target_forward=options.get("tf", "hf"))


def _key_text(param, value) -> str:
    """The bench text of a parsed value (``c=40`` for 0.4)."""
    return str(value) if param.choices or param.per == 1 else str(round(value * param.per))


def draft_vocabulary(spec: BenchMethod, pair):
    """The method's draft vocabulary (`verispec.empirical.speedups.draftvocab.DraftVocab`) or None:
    the spec's k lowest ids, the prompt's ids and the tokenizer's added tokens (specials such as
    <|endoftext|>, which the target emits and the draft should be able to propose)."""
    if not spec.draft_vocab:
        return None
    added = getattr(getattr(pair, "tokenizer", None), "added_tokens_decoder", None) or {}
    return DraftVocab(size=spec.draft_vocab, ids=tuple(t for t in sorted(added) if t < pair.draft.vocab_size))
