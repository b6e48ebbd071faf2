"""Built-in torch methods by name, read from the method registry (`verispec.reference.registry`):
the same names, parameters and defaults as `verispec.reference.methods`.

Each is a `TorchMethod` = a drafter (`verispec.empirical.drafters`) + a verifier
(`verispec.empirical.verifiers`), run by `verispec.empirical.engine.decode`:

    get("block", draft_length=4)                     chain + block verification
    get("gbv", draft_length=4, num_paths=3)          K i.i.d. paths + GBV (also nss, rrs, rrsw, spectr, traversal)
    get("opt_tree", node_budget=50)                  OPT-Tree + sample-and-follow (kary, eagle, chain_tree: static)
    get("khisti", draft_length=4, num_paths=2)       multi-draft selection top down (optimal_is,
                                                     global_resolution, hu_greedy; spechub: K = 2)
    get("adaptive", confidence_threshold=0.4)        confidence-stopped chain (hybrid: a lookup phrase first)
    get("ouroboros_phrase", pool=PhrasePool(6))      phrase pools (ouroboros, lookahead)
    get("target_only")                               no draft: the baseline
    get("hybrid", draft_vocab=32768)                 the draft's head over a token subset (FR-Spec)
    get("adaptive", policy="auto", costs=model)      draft length chosen per iteration for tokens/s

`paths_method`, `tree_method` (`opt_tree_method`: a tree without branching), `selection_method` and
`prompt_lookup` are the builders the registry names; a researcher's own reference `Method` runs
through `verispec.empirical.adapter.torch_method`.
"""

from __future__ import annotations

import inspect

from ..reference import registry
from ..reference.deprecation import renamed_keywords
from .validation import check_positive
from .drafters.tree import check_tree_args
from .torch_method import TorchMethod
from .speedups.draftvocab import with_draft_vocab
from .speedups.policy import with_policy
from .verifiers.nodes import PathRule

__all__ = ["get", "names", "paths_method", "tree_method", "opt_tree_method", "selection_method", "prompt_lookup"]


def _family_entry(name: str, builder: str, what: str) -> registry.MethodSpec:
    """The registry entry of `name` when `builder` (this module's builder) is its torch factory.

    Raises:
        ValueError: `name` is not one of that builder's methods (the message lists them).
    """
    known = [n for n in names() if registry.spec(n).torch == f"{__name__}:{builder}"]
    if name not in known:
        raise ValueError(f"method: unknown {what} method {name!r}; known: {', '.join(known)}")
    return registry.spec(name)


def _fixed_paths(entry: registry.MethodSpec, K: int) -> None:
    """ValueError when `entry` drafts a fixed number of paths (a chain: 1) and K differs from it."""
    fixed = 1 if entry.family == registry.CHAIN else entry.fixed_paths
    if fixed is not None and K != fixed:
        if fixed == 1:
            raise ValueError(f"num_paths: method {entry.name!r} drafts one path, got num_paths={K}")
        drafter = entry.torch_drafter.rpartition(":")[2]
        raise ValueError(f"num_paths: method {entry.name!r} drafts exactly {fixed} paths ({drafter}), "
                         f"got num_paths={K}")


def _drafter(entry: registry.MethodSpec, **params):
    """A factory of `entry`'s torch drafter (``torch_drafter``) given those of `params` it takes."""
    cls = registry.resolve_factory(entry.torch_drafter)
    takes = inspect.signature(cls).parameters
    given = {key: value for key, value in params.items() if key in takes}
    return lambda: cls(**given)


def paths_method(name: str, draft_length: int = registry.L.default, num_paths: int = 1,
                 draft_temperature: float | None = registry.T_DRAFT.default, iid: bool = True) -> TorchMethod:
    """A path method: K = num_paths draft paths of L = draft_length tokens, i.i.d. (`iid`) or
    without replacement (rrsw), verified by the rule `name` (`verifiers.nodes.PathRule`).

    Raises:
        ValueError: L or K < 1, K > 1 for a chain method (token, block).
    """
    entry = _family_entry(name, "paths_method", "path")
    L = check_positive(draft_length, "draft_length")
    K = check_positive(num_paths, "num_paths")
    _fixed_paths(entry, K)
    drafter = _drafter(entry, draft_length=L, num_paths=K, replacement=iid, draft_temperature=draft_temperature)
    return TorchMethod(name, drafter, PathRule(name), {"draft_length": L, "num_paths": K})


@renamed_keywords(threshold="gain_threshold")
def tree_method(name: str, node_budget: int = registry.N_BUDGET.default, gain_threshold: float = registry.THRESHOLD.default,
                max_depth: int = registry.DEPTH.default, branching: int = registry.default("kary", "branching"), *,
                draft_temperature: float | None = registry.T_DRAFT.default, prune: bool = registry.PRUNE.default,
                kind: str | None = None) -> TorchMethod:
    """A draft-tree method with sample-and-follow (OPT-Tree, arXiv 2406.17276): the tree `kind` of
    `trees.TREES` (default: the registry's tree of method `name`, else `name`), node budget n."""
    return _tree_method(name, kind, node_budget=node_budget, gain_threshold=gain_threshold, max_depth=max_depth,
                        branching=branching, draft_temperature=draft_temperature, prune=prune)


@renamed_keywords(threshold="gain_threshold")
def opt_tree_method(name: str, node_budget: int = registry.N_BUDGET.default,
                    gain_threshold: float = registry.THRESHOLD.default, max_depth: int = registry.DEPTH.default, *,
                    width: int | None = registry.WIDTH.default, draft_temperature: float | None = registry.T_DRAFT.default,
                    prune: bool = registry.PRUNE.default, kind: str | None = None) -> TorchMethod:
    """`tree_method` for OPT-Tree (arXiv 2406.17276), whose layers take a width, not a branching."""
    return _tree_method(name, kind, node_budget=node_budget, gain_threshold=gain_threshold, max_depth=max_depth,
                        branching=registry.default("kary", "branching"), draft_temperature=draft_temperature,
                        prune=prune, width=width)


def _tree_method(name: str, kind: str | None, **args) -> TorchMethod:
    entry = registry.spec(name) if name in registry.REGISTRY else None
    if kind is None:  # the registry's tree kind of the method (chain_tree drafts a "chain")
        kind = dict(entry.torch_fixed).get("kind", name) if entry is not None else name
    check_tree_args(kind, *(args.get(key) for key in ("node_budget", "gain_threshold", "max_depth", "branching", "width")))
    if entry is None:  # a label of the caller's: the tree family's drafter and rule
        entry = registry.spec(registry.names(family=registry.TREE)[0])
    return TorchMethod(name, _drafter(entry, tree=kind, **args), registry.resolve_factory(entry.torch_rule)(),
                       {key: args[key] for key in ("node_budget", "gain_threshold", "max_depth", "width") if key in args})


def prompt_lookup(draft_length: int = registry.L.default, max_ngram: int = registry.NGRAM.default) -> TorchMethod:
    """Prompt-lookup point-mass drafts with token verification (lossless at any T)."""
    L = check_positive(draft_length, "draft_length")
    n = check_positive(max_ngram, "max_ngram")
    entry = registry.spec("prompt_lookup")
    return TorchMethod(entry.name, _drafter(entry, draft_length=L, max_ngram=n), PathRule(entry.name),
                       {"draft_length": L, "max_ngram": n})


def selection_method(name: str, draft_length: int = registry.L.default, num_paths: int = registry.K.default,
                     draft_temperature: float | None = registry.T_DRAFT.default,
                     truncation: int | None = registry.S.default) -> TorchMethod:
    """A multi-draft selection method (khisti, optimal_is, global_resolution, spechub, hu_greedy): the
    reference's one-step rule applied top-down on K paths of L = draft_length tokens
    (`verifiers.multistep.TopDownSelection`), drafted by the registry entry's torch drafter.
    `truncation` = s (khisti, optimal_is): the selection LP over s tokens, for large vocabularies
    (the reference's `methods.khisti(L, K, truncation=s)`, `methods.optimal_is(L, K, truncation=s)`).

    Raises:
        TypeError: L, K or s not an int. ValueError: unknown name, L, K or s < 1, K other than the
            paths the method always drafts (spechub: 2), truncation for a rule other than khisti and
            optimal_is.
    """
    entry = _family_entry(name, "selection_method", "selection")
    L = check_positive(draft_length, "draft_length")
    K = check_positive(num_paths, "num_paths")
    s = None if truncation is None else check_positive(truncation, "truncation")
    verifier = registry.resolve_factory(entry.torch_rule)(name, s)
    params = {"draft_length": L, "num_paths": K} if s is None else {"draft_length": L, "num_paths": K, "truncation": s}
    _fixed_paths(entry, K)
    return TorchMethod(name, _drafter(entry, draft_length=L, num_paths=K, draft_temperature=draft_temperature),
                       verifier, params)


def names() -> list[str]:
    """Every built-in torch method name (`verispec.reference.registry`)."""
    return registry.names("torch")


def get(name: str, draft_vocab=None, **params) -> TorchMethod:
    """The built-in torch method `name` with `params`, the registry's defaults for the rest.

    `draft_vocab` (every method with a draft model): the draft's logits over a token subset only
    (FR-Spec, arXiv 2502.14856): an int k (the k lowest ids and the prompts' ids), a
    `verispec.empirical.speedups.draftvocab.DraftVocab`, or a sequence of ids (`draftvocab.with_draft_vocab`).
    ``policy="auto"`` with ``costs`` (a `verispec.reference.costs.CostModel`) and
    ``calibration_weight``, where the registry declares them: the draft length or node budget
    chosen per iteration for expected tokens per second (`speedups.policy.with_policy`).

    Raises:
        ValueError: unknown name or a parameter out of range. TypeError: an unknown parameter.
    """
    if draft_vocab is not None:
        return with_draft_vocab(get(name, **params), draft_vocab)
    options = {key: params.pop(key) for key in registry.POLICY_OPTIONS if key in params}
    if options:
        if not set(options) <= set(registry.spec(name).defaults("torch")):
            raise TypeError(f"{', '.join(sorted(options))}: not a parameter of method {name!r} (it has no draft "
                            "length or node budget to choose)")
        return with_policy(get(name, **params), **options)
    if registry.spec(name).torch is None:
        raise ValueError(f"method: unknown method {name!r}; known: {', '.join(names())}")
    return registry.build(name, "torch", params)
