"""Built-in torch methods by name, read from the method registry (`verispec.reference.registry`):
the same names, parameters and defaults as `verispec.reference.methods`.

Each is a `TorchMethod` = a drafter (`verispec.empirical.drafters`) + a verifier
(`verispec.empirical.verifiers`), run by `verispec.empirical.engine.decode`:

    get("block", draft_length=4)                     chain + block verification
    get("gbv", draft_length=4, num_paths=3)          K i.i.d. paths + GBV (also nss, rrs, rrsw, spectr, traversal)
    get("opt_tree", node_budget=50)                  OPT-Tree + sample-and-follow (kary, eagle, chain_tree: static)
    get("khisti", draft_length=4, num_paths=2)       multi-draft selection top down (optimal_is,
                                                     global_resolution, hu_greedy; spechub: K = 2)
    get("adaptive", draft_length=4, threshold=0.4)   confidence-stopped chain (hybrid: a lookup phrase first)
    get("ouroboros_phrase", pool=PhrasePool(6))      phrase pools (ouroboros, lookahead)
    get("target_only")                               no draft: the baseline
    get("hybrid", draft_vocab=32768)                 the draft's head over a token subset (FR-Spec)
    get("adaptive", policy="auto", costs=model)      draft length chosen per iteration for tokens/s

`paths_method`, `tree_method`, `selection_method` and `prompt_lookup` are the builders the registry
names; a researcher's own reference `Method` runs through `verispec.empirical.adapter.torch_method`.
"""

from __future__ import annotations

from ..reference import registry
from .validation import check_positive
from .drafters import GreedyDraftDrafter, HubPairsDrafter, PathsDrafter, PromptLookupDrafter, TreeDrafter
from .drafters.tree import check_tree_args
from .torch_method import TorchMethod
from .speedups.draftvocab import with_draft_vocab
from .speedups.policy import with_policy
from .verifiers.multistep import TopDownSelection
from .verifiers.nodes import PathRule, SampleAndFollow

__all__ = ["get", "names", "paths_method", "tree_method", "selection_method", "prompt_lookup"]


def paths_method(name: str, draft_length: int = 4, num_paths: int = 1,
                 draft_temperature: float | None = None, iid: bool = True) -> TorchMethod:
    """A path method: K = num_paths draft paths of L = draft_length tokens, i.i.d. (`iid`) or
    without replacement (rrsw), verified by the rule `name` (`verifiers.nodes.PathRule`).

    Raises:
        ValueError: L or K < 1, K > 1 for a chain method (token, block).
    """
    path_methods = [n for n in names() if "iid" in dict(registry.spec(n).torch_fixed)]
    if name not in path_methods:
        raise ValueError(f"method: unknown path method {name!r}; known: {', '.join(path_methods)}")
    L = check_positive(draft_length, "draft_length")
    K = check_positive(num_paths, "num_paths")
    if name in ("token", "block") and K != 1:
        raise ValueError(f"num_paths: method {name!r} drafts one path, got num_paths={K}")
    return TorchMethod(name, lambda: PathsDrafter(L, K, iid, draft_temperature), PathRule(name),
                       {"draft_length": L, "num_paths": K})


def tree_method(name: str, node_budget: int = 50, threshold: float = 0.0, max_depth: int = 10,
                branching: int = 2, draft_temperature: float | None = None, prune: bool = True,
                kind: str | None = None) -> TorchMethod:
    """A draft-tree method with sample-and-follow (OPT-Tree, arXiv 2406.17276): the tree `kind`
    of `trees.TREES` (default: `name`) with node budget n = node_budget."""

    if kind is None:  # the registry's tree kind of the method (chain_tree drafts a "chain")
        kind = dict(registry.spec(name).torch_fixed).get("kind", name) if name in registry.REGISTRY else name
    check_tree_args(kind, node_budget, threshold, max_depth, branching)
    return TorchMethod(name, lambda: TreeDrafter(kind, node_budget, threshold, max_depth, branching,
                                                 draft_temperature, prune), SampleAndFollow(),
                       {"node_budget": node_budget, "threshold": threshold, "max_depth": max_depth})


def prompt_lookup(draft_length: int = 4, max_ngram: int = 3) -> TorchMethod:
    """Prompt-lookup point-mass drafts with token verification (lossless at any T)."""
    L = check_positive(draft_length, "draft_length")
    n = check_positive(max_ngram, "max_ngram")
    return TorchMethod("prompt_lookup", lambda: PromptLookupDrafter(L, n), PathRule("token"),
                       {"draft_length": L, "max_ngram": n})


def selection_method(name: str, draft_length: int = 4, num_paths: int = 2,
                draft_temperature: float | None = None, truncation: int | None = None) -> TorchMethod:
    """A multi-draft selection method (khisti, optimal_is, global_resolution, spechub, hu_greedy): the
    reference's one-step rule applied top-down on K paths of L = draft_length tokens (`verifiers.multistep.TopDownSelection`). `truncation` = s (khisti,
    optimal_is): the selection LP over s tokens, for large vocabularies (the reference's
    `methods.khisti(L, K, truncation=s)`, `methods.optimal_is(L, K, truncation=s)`).

    Raises:
        TypeError: L, K or s not an int. ValueError: unknown name, L, K or s < 1, K != 2 for
            spechub, truncation for a rule other than khisti and optimal_is.
    """

    L = check_positive(draft_length, "draft_length")
    K = check_positive(num_paths, "num_paths")
    s = None if truncation is None else check_positive(truncation, "truncation")
    verifier = TopDownSelection(name, s)
    params = {"draft_length": L, "num_paths": K} if s is None else {"draft_length": L, "num_paths": K, "truncation": s}
    if name == "spechub":
        if K != 2:
            raise ValueError(f"num_paths: method {name!r} drafts exactly 2 paths (a hub pair), got num_paths={K}")
        return TorchMethod(name, lambda: HubPairsDrafter(L, draft_temperature), verifier, params)
    if name == "hu_greedy":  # Hu et al.'s greedy drafts (arXiv 2502.18779)
        return TorchMethod(name, lambda: GreedyDraftDrafter(L, K, draft_temperature), verifier, params)
    return TorchMethod(name, lambda: PathsDrafter(L, K, True, draft_temperature), verifier, params)


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
