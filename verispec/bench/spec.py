"""The bench's method-spec mini-language: ``"name"`` or ``"name:L=4,K=3,dq=8,lin=wxpad"`` ->
`BenchMethod` (`parse_method`), and the families of methods each parameter applies to.

What each method and parameter means: `verispec.bench` (the package docstring) and
docs/real_models.md. A method label is also the key of its records in a results file, so labels
are kept exactly as given.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..empirical import decode, methods

__all__ = ["BenchMethod", "parse_method", "method_names", "draft_vocabulary", "DEFAULT_METHODS", "PHRASE_METHODS",
           "PHRASE_DEFAULTS", "TREE_METHODS", "USER_METHOD", "OTHER_METHODS", "ADAPTIVE_METHODS",
           "DRAFT_VOCAB_METHODS", "DRAFT_QUANT_METHODS"]

DEFAULT_METHODS = ("hf", "token", "block", "gbv:K=3")
_PARAMS = {"L": "draft_length", "K": "num_paths", "n": "node_budget", "W": "window", "G": "guess_set",
           "s": "truncation", "dv": "draft_vocab", "dq": "draft_quant", "M": "max_draft_length",
           "c": "confidence_percent", "g": "guess_length"}
#: Phrase-pool methods: K = pool candidates per lookup, W = Jacobi window slots (0: none).
PHRASE_METHODS = ("ouroboros", "ouroboros_phrase", "lookahead")
#: Their defaults, the decoders' own (`ouroboros_speculative`, `lookahead_speculative`).
PHRASE_DEFAULTS = {"num_paths": 3, "window": 4}
#: Tree drafters of `verispec.empirical.trees` (method name -> tree kind), node budget `n`.
TREE_METHODS = {"opt_tree": "opt_tree", "kary": "kary", "eagle": "eagle", "chain_tree": "chain"}
#: The method name of a user's reference Method given as ``pkg.module:attr`` (its label is the spec).
USER_METHOD = "method"
#: Methods that are neither decode methods nor trees (the phrase methods among them take K and W).
OTHER_METHODS = ("target_only", "hf", "hf_prompt_lookup", "ouroboros", "ouroboros_phrase", "lookahead",
                 "prompt_lookup")
#: Cheaper-draft methods of `verispec.empirical.adaptive` (L = the initial length cap, M = its ceiling).
ADAPTIVE_METHODS = ("adaptive", "hybrid")
#: Methods whose draft model may run over a token subset (``dv=k``, FR-Spec: `verispec.empirical.speedups.draftvocab`).
DRAFT_VOCAB_METHODS = ADAPTIVE_METHODS + tuple(decode.METHODS) + tuple(methods.WALK_METHODS)
#: Methods that run the draft model, so take ``dq=8`` (int8 draft weights: `verispec.empirical.speedups.quantize`),
#: the peer ``hf`` among them (the same int8 draft as its assistant: the like-for-like comparison).
DRAFT_QUANT_METHODS = ("hf",) + DRAFT_VOCAB_METHODS + tuple(TREE_METHODS) + ("ouroboros", "ouroboros_phrase")


@dataclass(frozen=True)
class BenchMethod:
    """One method: `name` and its L (draft length), K (paths; pool candidates of phrase methods),
    n (node budget of trees), W (Jacobi window of phrase methods)."""

    label: str
    name: str
    draft_length: int = 0
    num_paths: int = 1
    node_budget: int = 0
    window: int = 0
    guess_set: int = 0  # ouroboros_phrase: pool phrases the draft model checks per draft forward
    truncation: int = 0  # khisti, optimal_is: tokens of the s-truncated selection LP (0: full vocabulary)
    draft_vocab: int = 0  # FR-Spec: the draft's head over the k lowest ids + prompt + added tokens (0: all)
    draft_quant: int = 0  # 8: the draft's Linear weights int8 (`quantize.quantize_draft`); 0: as loaded
    max_draft_length: int = 0  # adaptive, hybrid: the length cap's ceiling M >= L (0: the method's default, 4 L)
    confidence_percent: int = 40  # adaptive, hybrid: stop a chain after a token of draft confidence < c / 100
    schedule: str = "heuristic"  # adaptive, hybrid: the cap's schedule (`adaptive.SCHEDULES`; constant: stays L)
    verifier: str = "token"  # adaptive, hybrid: the chain's verifier (`adaptive.VERIFIERS`: token or block)
    guess_length: int = 0  # adaptive, hybrid: prompt-lookup guesses the draft model checks per forward (0: none)
    linear_layout: str = "xw"  # the target's GEMM layout for few rows (`linear_layout.LAYOUTS`; any method)


def method_names() -> tuple:
    """Every method `verispec bench --methods` accepts."""
    return OTHER_METHODS + ADAPTIVE_METHODS + tuple(decode.METHODS) + tuple(TREE_METHODS) + tuple(methods.WALK_METHODS)


def _read_params(params: str, text: str, values: dict) -> set:
    """Write the ``KEY=int`` items of `params` into `values` (by `_PARAMS` name),
    ``sched=heuristic|constant``, ``v=token|block`` and ``lin=xw|wx``; the keys given.

    Raises:
        ValueError: an unknown key or a value that is not an int >= 1 (W: >= 0), or an unknown
            schedule, verifier or linear layout.
    """
    from ..empirical.adaptive import SCHEDULES, VERIFIERS
    from ..empirical.speedups.linear_layout import LAYOUTS

    given = set()
    for item in filter(None, params.split(",")):
        key, _, value = (part.strip() for part in item.partition("="))
        if key == "sched" and value in SCHEDULES:
            values["schedule"] = value
        elif key == "v" and value in VERIFIERS:
            values["verifier"] = value
        elif key == "lin" and value in LAYOUTS:
            values["linear_layout"] = value
        elif (key not in _PARAMS or not value.isdigit() or int(value) < (0 if key in ("W", "c") else 1)
                or (key == "c" and int(value) > 100)):
            raise ValueError(f"methods: bad parameter {item!r} in {text!r} "
                             "(use L=, K=, n=, G=, g=, s=, dv=, M= with an int >= 1, dq=8, W= with an int >= 0, "
                             f"c= in 0..100, sched= one of {', '.join(SCHEDULES)}, v= one of "
                             f"{', '.join(VERIFIERS)} or lin= one of {', '.join(LAYOUTS)})")
        else:
            values[_PARAMS[key]] = int(value)
        given.add(key)
    return given


#: Parameters only some methods take: key -> (those methods, what it is).
_SCOPED = {"dv": (DRAFT_VOCAB_METHODS, "dv (a draft vocabulary subset) is for"),
           "dq": (DRAFT_QUANT_METHODS, "dq=8 (int8 draft weights) is the only width, for runners with a draft model:"),
           "M": (ADAPTIVE_METHODS, "M (the length cap's ceiling, >= L) is for"),
           "c": (ADAPTIVE_METHODS, "c (the confidence stop, in percent) is for"),
           "sched": (ADAPTIVE_METHODS, "sched (the length cap's schedule) is for"),
           "v": (ADAPTIVE_METHODS, "v (the chain's verifier, token or block) is for"),
           "g": (ADAPTIVE_METHODS, "g (prompt-lookup guesses per draft forward) is for"),
           "G": (("ouroboros_phrase",), "only ouroboros_phrase takes a guess set G:"),
           "s": (("khisti", "optimal_is"), "only khisti and optimal_is take an LP truncation s:")}


def _check_scopes(name: str, given: set, values: dict, text: str) -> None:
    """Raise ValueError (naming ``methods``) for a parameter in `given` that method `name` does not
    take, a dq other than 8, or a ceiling M below L."""
    out_of_range = {"dq": values["draft_quant"] != 8,
                    "M": values["max_draft_length"] < values["draft_length"]}
    for key in sorted(given & set(_SCOPED)):
        scope, what = _SCOPED[key]
        if name not in scope or out_of_range.get(key, False):
            raise ValueError(f"methods: {what} {', '.join(scope)}; got {text!r}")


def parse_method(text: str, draft_length: int, num_paths: int) -> BenchMethod:
    """``"name"`` or ``"name:L=4,K=3"`` (trees: ``"opt_tree:n=50"``; phrase methods:
    ``"ouroboros:K=1,W=0"``) -> BenchMethod. Chain methods get K = 1; trees default to n = 50;
    ouroboros and lookahead default to K = 3 pool candidates and a W = 4 Jacobi window.

    Raises:
        ValueError: unknown method or parameter, K > 1 for a chain method, W for a method without
            a Jacobi window, values < 1 (W < 0), dq other than 8 or on a method without a draft
            model (``DRAFT_QUANT_METHODS`` take ``dq=8``, ``hf:dq=8`` included).
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"methods: expected a runner name, got {text!r}")
    name, _, params = text.strip().partition(":")
    if name not in method_names() and params and "=" not in params:  # a user's Method: pkg.module:attr
        from ..reference.methods import load

        load(text.strip(), "methods", draft_length=draft_length, num_paths=num_paths)  # a clear error now
        return BenchMethod(text.strip(), USER_METHOD)
    if name not in method_names():
        raise ValueError(f"methods: unknown runner {name!r}; known: {', '.join(method_names())}")
    values = {"draft_length": draft_length, "num_paths": num_paths, "node_budget": 50, "window": 0, "guess_set": 8,
              "draft_vocab": 0, "draft_quant": 0, "guess_length": 0, "max_draft_length": BenchMethod.max_draft_length,
              "confidence_percent": BenchMethod.confidence_percent, "schedule": BenchMethod.schedule,
              "verifier": BenchMethod.verifier, "linear_layout": BenchMethod.linear_layout}
    if name in PHRASE_METHODS:
        values.update(PHRASE_DEFAULTS)
    given = _read_params(params, text, values)
    _check_scopes(name, given, values, text)
    layout = values["linear_layout"]
    if name in ("target_only", "hf", "hf_prompt_lookup"):
        kept = ",".join(f"{key}={value}" for key, value in (("dq", values["draft_quant"]), ("lin", layout))
                        if key in given)
        return BenchMethod(f"{name}:{kept}" if kept else name, name, draft_quant=values["draft_quant"],
                           linear_layout=layout)
    label = name if not params else f"{name}:{params}"
    if name in PHRASE_METHODS:
        return BenchMethod(label, name, values["draft_length"], values["num_paths"], 0, values["window"],
                           values["guess_set"] if name == "ouroboros_phrase" else 0,
                           draft_quant=values["draft_quant"], linear_layout=layout)
    if "W" in given:
        raise ValueError(f"methods: {name} has no Jacobi window W; got {text!r}")
    if methods.WALK_METHODS.get(name) == "hub_pair":  # SpecHub: exactly two paths
        if "K" in given and values["num_paths"] != 2:
            raise ValueError(f"methods: {name} drafts exactly K=2 paths (a hub pair); got {text!r}")
        values["num_paths"] = 2
    elif name not in methods.WALK_METHODS and decode.METHODS.get(name, "chain") == "chain":  # chains, trees: no K
        if "K" in given and values["num_paths"] != 1:
            raise ValueError(f"methods: {name} takes no K (one draft path or a tree); got {text!r}")
        values["num_paths"] = 1
    if name not in TREE_METHODS:
        values["node_budget"] = 0
    return BenchMethod(label, name, values["draft_length"], values["num_paths"], values["node_budget"],
                       truncation=values["truncation"] if "s" in given else 0, draft_vocab=values["draft_vocab"],
                       draft_quant=values["draft_quant"], max_draft_length=values["max_draft_length"],
                       confidence_percent=values["confidence_percent"], schedule=values["schedule"],
                       verifier=values["verifier"], guess_length=values["guess_length"], linear_layout=layout)


def draft_vocabulary(spec: BenchMethod, pair):
    """The method's draft vocabulary (`verispec.empirical.speedups.draftvocab.DraftVocab`) or None:
    the spec's k lowest ids, the prompt's ids and the tokenizer's added tokens (specials such as
    <|endoftext|>, which the target emits and the draft should be able to propose)."""
    if not spec.draft_vocab:
        return None
    from ..empirical.speedups.draftvocab import DraftVocab

    added = getattr(getattr(pair, "tokenizer", None), "added_tokens_decoder", None) or {}
    return DraftVocab(size=spec.draft_vocab, ids=tuple(t for t in sorted(added) if t < pair.draft.vocab_size))
