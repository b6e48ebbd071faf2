"""Methods: a drafter paired with a verifier (docs/architecture.md, core idea 3).

A verifier's correctness depends on how its drafts were sampled, so the two travel together.
Built-in methods (docs/algorithms.md): token, block, gbv, nss, rrs, rrsw, spectr, traversal, opt_tree,
point_mass, prompt_lookup; khisti, optimal_is, global_resolution, spechub, hu_greedy
(docs/multi_draft_verifiers.md); the rules declared lossy (``Method.lossy``): typical, static_ensemble, fsd.
`get(name, **params)` builds one by name; `names()` lists the lossless ones, `lossy_names()` the lossy ones;
`Method(name, draft=..., verify=...)` wraps a researcher's own rule. Methods that need more than
the models and L (a pool snapshot, a confidence threshold) live in their own modules:
`verispec.reference.ouroboros` (Ouroboros' phrase drafts), `verispec.reference.adaptive`;
`verispec.reference.draftvocab.draft_vocab(method, subset)` wraps any method (FR-Spec's draft
vocabulary subset).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from dataclasses import dataclass, field
from numbers import Real
from typing import Callable

from . import drafters, registry
from .deprecation import renamed_keywords
from .audit import PLUMBING
from .contract import RuleContractError, check_signature
from .drafters import Draft
from .models import LanguageModel, check_positive_int, check_pair, check_prefix
from .randomness import Randomness, Sampler
from .static_trees import static_shape
from .verifiers.importance import (khisti_truncated_verify, khisti_verify, optimal_is_truncated_verify,
                                   optimal_is_verify)
from .verifiers.global_resolution import global_resolution_verify
from .verifiers.lossy import DIVERGENCES, FuzzyAcceptance, StaticEnsemble, TypicalAcceptance
from .verifiers.hu_greedy import hu_greedy_verify
from .verifiers.spechub import hub_pairs, spechub_verify
from .verifiers import (block_verify, gbv_verify, nss_verify, rrs_verify, rrsw_verify,
                        sample_and_follow, spectr_verify, token_verify, traversal_verify)


#: Plumbing (`verispec.reference.audit`): Method.step's validation of what a rule returns, not rule code, so
#: `verispec prove --all-vocab` lets this module read V and handle token ids as numbers.
__audit__ = PLUMBING


@dataclass(frozen=True)
class VocabularyOnly:
    """Stands in for a missing draft model: it has a vocabulary size and nothing else, so a
    drafter that needs real draft probabilities still fails with a TypeError naming `draft`."""

    vocab_size: int


@dataclass(frozen=True)
class Method:
    """A speculative decoding method: one iteration drafts, then verifies in one target call.

    Args:
        name: a label.
        draft: drafter, `draft(draft_model, context, rand) -> Draft` (see `verispec.reference.drafters`).
        verify: `verify(target, draft_model, context, draft, rand) -> tuple[int, ...]`: the accepted
            draft prefix followed by exactly one correction/bonus token.
        params: the parameters it was built with (for reports).
        model_state_only: True when an iteration depends on the prefix only through the models'
            conditionals (true of every built-in method except prompt lookup); lets `exact` reuse an
            iteration's law across prefixes with the same model state. Leave False if unsure.
        lossy: True declares the rule lossy by design (typical acceptance, a static ensemble, ...):
            `verispec check` then reports its exact TV and block efficiency as "lossy" instead of
            failing it. A rule not declared lossy whose law differs from the target's fails.
    """

    name: str
    draft: Callable
    verify: Callable
    params: dict = field(default_factory=dict)
    model_state_only: bool = False
    lossy: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError("name: expected a non-empty string")
        if not isinstance(self.lossy, bool):
            raise TypeError(f"lossy: expected a bool, got {type(self.lossy).__name__}")
        for arg in ("draft", "verify"):
            if not callable(getattr(self, arg)):
                raise TypeError(f"{arg}: expected a callable, got {type(getattr(self, arg)).__name__}")
        check_signature(self.draft, ("draft_model", "context", "rand"), "draft", self.name)
        check_signature(self.verify, ("target", "draft_model", "context", "draft", "rand"), "verify", self.name)

    @property
    def draft_length(self) -> int | None:
        """The declared draft depth: L (or a tree's max depth), from ``params`` ("draft_length" or
        "max_depth") or else from the drafter (a `Drafter`'s parameters, or a ``draft_length`` /
        ``max_depth`` attribute of a plain function); None when nothing declares it."""
        for source in (self.params, getattr(self.draft, "params", None)):
            if isinstance(source, dict):
                depth = source.get("draft_length", source.get("max_depth"))
                if depth is not None:
                    return depth
        for attr in ("draft_length", "max_depth"):
            depth = getattr(self.draft, attr, None)
            if depth is not None:
                return depth
        return None

    def step(self, target: LanguageModel, draft_model, context: tuple, rand: Randomness, *,
             observe: Callable | None = None) -> tuple[int, ...]:
        """One draft-verify iteration from `context`; returns the emitted tokens (tau + 1 of them).
        ``observe(draft)``, when given, sees the Draft after a well-formed verification.

        Raises:
            RuleContractError (a TypeError and ValueError): the drafter did not return a Draft; the
                verifier's output is not a sequence of token ids, is empty (no correction/bonus
                token), has ids outside the vocabulary, accepts a prefix that is not a node of the
                draft, or is longer than the declared draft depth + 1.
        """
        # Drafters that need no model (prompt lookup) still read the vocabulary size.
        draft = self.draft(draft_model if draft_model is not None else VocabularyOnly(target.vocab_size),
                           context, rand)
        if not isinstance(draft, Draft):
            raise RuleContractError(f"draft: method {self.name!r}'s drafter returned {type(draft).__name__}, "
                                    "not a Draft")
        out = self.verify(target, draft_model, context, draft, rand)
        try:
            out = check_prefix(out, target.vocab_size, f"tokens emitted by {self.name!r}")
        except (TypeError, ValueError) as err:
            raise RuleContractError(f"verify: {err} (a token outside the vocabulary, V = "
                                    f"{target.vocab_size})" if isinstance(err, ValueError) else f"verify: {err}") from None
        if not out:
            raise RuleContractError(f"verify: method {self.name!r} emitted no token "
                                    "(no correction/bonus token after the accepted prefix)")
        if not draft.contains(out[:-1]):
            raise RuleContractError(f"verify: method {self.name!r} accepted {out[:-1]}, which is not a drafted path")
        depth = self.draft_length
        if isinstance(depth, int) and len(out) > depth + 1:
            raise RuleContractError(f"verify: method {self.name!r} emitted {len(out)} tokens {out}, more than its "
                                    f"declared draft depth {depth} + 1 correction/bonus token")
        if observe is not None:
            observe(draft)
        return out

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"methods.{self.name}({args})"


def target_only() -> Method:
    """No draft: each iteration emits one token drawn from the target's p (sample-and-follow at the
    root of an empty tree), the baseline every method's law must equal."""
    return Method("target_only", drafters.root_only(), sample_and_follow, {}, model_state_only=True)


def token(draft_length: int) -> Method:
    """Token-level speculative sampling on a chain (arXiv 2211.17192)."""
    return Method("token", drafters.chain(draft_length), token_verify,
                  {"draft_length": draft_length}, model_state_only=True)


def block(draft_length: int) -> Method:
    """Block verification on a chain (arXiv 2403.10444)."""
    return Method("block", drafters.chain(draft_length), block_verify,
                  {"draft_length": draft_length}, model_state_only=True)


def _multi(name, verify, drafter_factory):
    def factory(draft_length: int, num_paths: int) -> Method:
        return Method(name, drafter_factory(draft_length, num_paths), verify,
                      {"draft_length": draft_length, "num_paths": num_paths}, model_state_only=True)

    factory.__name__ = name
    return factory


gbv = _multi("gbv", gbv_verify, drafters.iid_paths)
gbv.__doc__ = "Greedy multi-path block verification on K i.i.d. paths (arXiv 2602.16961)."
nss = _multi("nss", nss_verify, drafters.iid_paths)
nss.__doc__ = "Naive multi-draft sampling on K i.i.d. paths (SpecInfer, arXiv 2305.09781)."
rrs = _multi("rrs", rrs_verify, drafters.iid_paths)
rrs.__doc__ = "Recursive rejection sampling on K i.i.d. paths (SpecInfer, arXiv 2305.09781)."
rrsw = _multi("rrsw", rrsw_verify, drafters.paths_without_replacement)
rrsw.__doc__ = "RRS without replacement on K paths with distinct first tokens (arXiv 2402.14160)."
spectr = _multi("spectr", spectr_verify, drafters.iid_paths)
spectr.__doc__ = "SpecTr K-SEQ on K i.i.d. paths (arXiv 2310.15141)."
traversal = _multi("traversal", traversal_verify, drafters.iid_paths)
traversal.__doc__ = "Traversal verification on the tree of K i.i.d. paths (arXiv 2505.12398)."


def khisti(draft_length: int, num_paths: int, truncation: int | None = registry.default("khisti", "truncation")) -> Method:
    """Khisti et al.'s importance-sampling selection + single-draft SD on K i.i.d. paths
    (arXiv 2410.18234; pairwise tournament for K > 2). `truncation` = s solves the selection LP
    over the s tokens of largest p - q_1 q_2 only (the GBV authors' code; `TruncatedSelection`):
    still lossless, affordable at any vocabulary. None: the LP over the full vocabulary."""
    return _is_method("khisti", draft_length, num_paths, truncation, khisti_verify, khisti_truncated_verify)


def optimal_is(draft_length: int, num_paths: int,
               truncation: int | None = registry.default("optimal_is", "truncation")) -> Method:
    """IS selection with the optimal selection law (one-step optimum alpha*, arXiv 2502.18779 /
    2410.18234) + single-draft SD on K i.i.d. paths. `truncation` = s solves the selection LP over
    the sets inside the s tokens of largest p - q^k only (`TruncatedSetSelection`): still lossless,
    affordable at any vocabulary, below alpha* in general. None: the LP over the full vocabulary."""
    return _is_method("optimal_is", draft_length, num_paths, truncation, optimal_is_verify,
                      optimal_is_truncated_verify)


def global_resolution(draft_length: int, num_paths: int) -> Method:
    """The alpha*-optimal selection for K i.i.d. drafts at any vocabulary size, then single-draft SD,
    top down on K i.i.d. paths (after Thomas & Pal, "Global Resolution", arXiv 2511.15898; the
    construction is `verifiers.global_resolution`'s). Exact for rational p, q: no LP, no
    truncation; one node costs an O(V log V) sort plus a pass over the segment's tie runs per blend."""
    params = {"draft_length": draft_length, "num_paths": num_paths}
    return Method("global_resolution", drafters.iid_paths(draft_length, num_paths), global_resolution_verify, params,
                  model_state_only=True)


def _is_method(name, draft_length, num_paths, truncation, full_verify, truncated_verify) -> Method:
    """An importance-sampling method on K i.i.d. paths: the full-vocabulary selection LP, or the
    s-truncated one (`truncated_verify(s)`) when `truncation` = s is given."""
    params = {"draft_length": draft_length, "num_paths": num_paths}
    draft = drafters.iid_paths(draft_length, num_paths)
    if truncation is None:
        return Method(name, draft, full_verify, params, model_state_only=True)
    s = check_positive_int(truncation, "truncation")
    return Method(name, draft, truncated_verify(s), {**params, "truncation": s}, model_state_only=True)


def spechub(draft_length: int) -> Method:
    """SpecHub: a hub-token draft pair with its transport verifier, K = 2 (arXiv 2411.05289)."""
    return Method("spechub", hub_pairs(draft_length), spechub_verify,
                  {"draft_length": draft_length, "num_paths": 2}, model_state_only=True)


def hu_greedy(draft_length: int, num_paths: int) -> Method:
    """Greedy draft sampling + its optimal verifier (Hu et al. 2025, arXiv 2502.18779): at each node
    the top K - 1 tokens of q and one token from q off them (`drafters.greedy_draft_paths`),
    verified by `verifiers.hu_greedy.hu_greedy_step` top down; one-step acceptance
    p(G) + sum_{y not in G} min(p(y), q_last(y)), the transport optimum of that draft law."""
    return Method("hu_greedy", drafters.greedy_draft_paths(draft_length, num_paths), hu_greedy_verify,
                  {"draft_length": draft_length, "num_paths": num_paths}, model_state_only=True)


@renamed_keywords(threshold="gain_threshold")
def opt_tree(node_budget: int, gain_threshold: float = registry.default("opt_tree", "gain_threshold"),
             max_depth: int | None = registry.default("opt_tree", "max_depth"),
             width: int | None = registry.default("opt_tree", "width")) -> Method:
    """OPT-Tree adaptive draft tree with sample-and-follow verification (arXiv 2406.17276); `width`
    caps the nodes of a layer that are expanded (`drafters.opt_tree_structure`)."""
    drafter = drafters.opt_tree(node_budget, gain_threshold, max_depth, width)
    return Method("opt_tree", drafter, sample_and_follow, dict(drafter.params), model_state_only=True)


def _static_tree(name: str, kind: str, node_budget: int, max_depth: int, branching: int) -> Method:
    drafter = drafters.ranked_tree(static_shape(kind, node_budget, max_depth, branching))
    return Method(name, drafter, sample_and_follow,
                  {"node_budget": node_budget, "max_depth": max_depth, "branching": branching}, model_state_only=True)


def kary(node_budget: int, max_depth: int = registry.default("kary", "max_depth"),
         branching: int = registry.default("kary", "branching")) -> Method:
    """A static k-ary draft tree (k = branching, filled breadth first) with sample-and-follow."""
    return _static_tree("kary", "kary", node_budget, max_depth, branching)


def eagle(node_budget: int, max_depth: int = registry.default("eagle", "max_depth"),
          branching: int = registry.default("eagle", "branching")) -> Method:
    """EAGLE's static rank-prior tree (arXiv 2401.15077) with sample-and-follow; branching unused."""
    return _static_tree("eagle", "eagle", node_budget, max_depth, branching)


def chain_tree(node_budget: int, max_depth: int = registry.default("chain_tree", "max_depth"),
               branching: int = registry.default("chain_tree", "branching")) -> Method:
    """A chain of min(n, max_depth) argmax tokens as a draft tree with sample-and-follow."""
    return _static_tree("chain_tree", "chain", node_budget, max_depth, branching)


def point_mass(draft_length: int) -> Method:
    """The draft model's greedy phrase as a point-mass draft, with token verification."""
    return Method("point_mass", drafters.greedy(draft_length), token_verify,
                  {"draft_length": draft_length}, model_state_only=True)


def prompt_lookup(draft_length: int, max_ngram: int = registry.default("prompt_lookup", "max_ngram")) -> Method:
    """Prompt-lookup (n-gram) point-mass drafts with token verification; reads the whole prefix."""
    return Method("prompt_lookup", drafters.prompt_lookup(draft_length, max_ngram), token_verify,
                  {"draft_length": draft_length, "max_ngram": max_ngram})


def _unit_interval(value, name: str, open_left: bool = True) -> float:
    """`value` as a real in (0, 1] (or [0, 1]); TypeError / ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
    if not (0 < value <= 1 if open_left else 0 <= value <= 1):
        raise ValueError(f"{name}: expected a value in {'(0' if open_left else '[0'}, 1], got {value!r}")
    return value


def typical(draft_length: int, epsilon: float = registry.default("typical", "epsilon"),
            delta: float = registry.default("typical", "delta")) -> Method:
    """Medusa's typical acceptance on a chain (Cai et al., arXiv 2401.10774, Section 2.3.1; lossy):
    accept X_i iff p_i(X_i) > min(epsilon, delta exp(-H(p_i))), then one token ~ p. Defaults are
    Medusa's (posterior_threshold 0.09, posterior_alpha 0.3)."""
    L = check_positive_int(draft_length, "draft_length")
    rule = TypicalAcceptance(_unit_interval(epsilon, "epsilon"), _unit_interval(delta, "delta"))
    return Method("typical", drafters.chain(L), rule, {"draft_length": L, "epsilon": epsilon, "delta": delta},
                  model_state_only=True, lossy=True)


def static_ensemble(draft_length: int, ensemble_weight: float = registry.default("static_ensemble", "ensemble_weight")) -> Method:
    """DIVERSE's static ensemble on a chain (Wang et al., arXiv 2604.07622; lossy): speculative
    sampling against v = w p + (1 - w) q, w = `ensemble_weight` in [0, 1] (transformers'
    ``assistant_ensemble_weight``; w = 1 is token verification). Pass a Fraction w for exact laws."""
    L = check_positive_int(draft_length, "draft_length")
    rule = StaticEnsemble(_unit_interval(ensemble_weight, "ensemble_weight", open_left=False))
    return Method("static_ensemble", drafters.chain(L), rule, {"draft_length": L, "ensemble_weight": ensemble_weight},
                  model_state_only=True, lossy=True)


@renamed_keywords(threshold="divergence_threshold")
def fsd(draft_length: int, divergence_threshold: float = registry.default("fsd", "divergence_threshold"),
        divergence: str = registry.default("fsd", "divergence")) -> Method:
    """Fuzzy Speculative Decoding on a chain (Holsman et al., arXiv 2502.20704; lossy): accept X_i
    iff D(p_i, q_i) <= divergence_threshold (T), D = `divergence` ("js", "kl" or "tv"), then one token ~ p."""
    L = check_positive_int(draft_length, "draft_length")
    if divergence not in DIVERGENCES:
        raise ValueError(f"divergence: expected one of {', '.join(DIVERGENCES)}, got {divergence!r}")
    rule = FuzzyAcceptance(_unit_interval(divergence_threshold, "divergence_threshold", open_left=False), divergence)
    return Method("fsd", drafters.chain(L), rule, {"draft_length": L, "divergence_threshold": divergence_threshold,
                                                   "divergence": divergence},
                  model_state_only=True, lossy=True)


def names() -> list[str]:
    """Names of the lossless built-in methods with a reference rule, in the order of
    docs/algorithms.md (`verispec.reference.registry`); `lossy_names` lists the lossy ones."""
    return registry.names("reference", lossy=False)


def lossy_names() -> list[str]:
    """Names of the built-in rules declared lossy (typical, static_ensemble, fsd)."""
    return registry.names("reference", lossy=True)


def parameters(name: str) -> list[str]:
    """The parameter names method `name` accepts (its reference rule's, `registry.REGISTRY`).

    Raises:
        TypeError / ValueError: name not a string / not a method with a reference rule.
    """
    _reference_spec(name)
    return list(registry.spec(name).defaults("reference"))


def _reference_spec(name: str) -> registry.MethodSpec:
    entry = registry.spec(name)
    if entry.reference is None:
        raise ValueError(f"name: unknown method {name!r}; known: {', '.join(names() + lossy_names())}")
    return entry


def get(name: str, **params) -> Method:
    """Build the built-in method `name` with `params`, the registry's defaults for the rest.

    Raises:
        ValueError: unknown name, or a parameter out of range (named in the message).
        TypeError: a parameter the method does not take.
    """
    _reference_spec(name)
    return registry.build(name, "reference", params)


def load(spec: str, argument: str = "method", **params) -> Method:
    """The user's Method named by ``"pkg.module:attr"`` (the command-line form of a Method object).

    ``attr`` may be a dotted path inside the module (``"mod:Rules.mine"``). It must be a `Method`,
    or a factory returning one: it is called with those of `params` its signature names (the
    commands pass ``draft_length`` and ``num_paths`` from --draft-length / --num-paths), its other
    parameters left at their defaults. The module is imported with the current directory on
    ``sys.path``, as ``python -m`` does.

    Raises:
        ValueError: `spec` has no ``module:attr`` form, the module cannot be imported, the attribute
            is missing, or it is not (and does not build) a Method; the message names `argument`.
    """
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise ValueError(f"{argument}: expected 'pkg.module:attr', got {spec!r}")
    module_name, attr = spec.split(":")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(module_name)
    except Exception as err:  # ImportError, or the user's module failing at import time
        raise ValueError(f"{argument}: cannot import module {module_name!r} of {spec!r}: "
                         f"{type(err).__name__}: {err}") from err
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{argument}: {spec!r}: {type(obj).__name__} {getattr(obj, '__name__', '')!r} "
                             f"has no attribute {part!r}")
        obj = getattr(obj, part)
    if callable(obj) and not isinstance(obj, Method):
        obj = _build(obj, spec, argument, params)
    if not isinstance(obj, Method):
        raise ValueError(f"{argument}: {spec!r} is a {type(obj).__name__}, not a "
                         "verispec.reference.methods.Method")
    return obj


def _build(factory, spec: str, argument: str, params: dict):
    """`factory` called with the `params` its signature names (all of them when it takes
    ``**kwargs``; none when it has no inspectable signature)."""
    try:
        signature = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        signature = {}
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.values())
    given = {name: value for name, value in params.items() if open_ended or name in signature}
    try:
        return factory(**given)
    except TypeError as err:
        shown = ", ".join(f"{name}={value!r}" for name, value in given.items()) or "no arguments"
        raise ValueError(f"{argument}: {spec!r} is a callable that cannot be called with {shown} ({err}); "
                         "point at a Method or a factory whose other parameters have defaults") from err


def resolve(spec, argument: str = "method", **params) -> Method:
    """A Method from a Method object, a built-in name (built with `params`, as `get_compatible`),
    or ``"pkg.module:attr"`` (see `load`: a factory gets the `params` its signature names).

    Raises:
        ValueError / TypeError: as `get_compatible` and `load`, naming `argument`.
    """
    if isinstance(spec, Method):
        return spec
    if isinstance(spec, str) and ":" in spec:
        return load(spec, argument, **params)
    if not isinstance(spec, str):
        raise TypeError(f"{argument}: expected a Method, a method name or 'pkg.module:attr', "
                        f"got {type(spec).__name__}")
    return get_compatible(spec, **params)


def get_compatible(name: str, **params) -> Method:
    """Like `get`, silently ignoring parameters the method does not take (used by the CLI, which
    passes one set of --draft-length/--num-paths to every method). Trees get node_budget = L * K
    and max_depth = L when not given."""
    accepted = set(parameters(name))
    if "node_budget" in accepted:  # a tree: as many nodes as L x K paths, as deep as L
        L, K = params.get("draft_length", 3), params.get("num_paths", 1)
        params = {"node_budget": L * K, "max_depth": L, **params}
    return get(name, **{k: v for k, v in params.items() if k in accepted})


def generate(target: LanguageModel, draft: LanguageModel | None, method: Method, context=(),
             num_tokens: int = 50, rng: Randomness | None = None) -> tuple[int, ...]:
    """Run the draft-verify loop until `num_tokens` tokens are emitted; returns exactly those.

    Args:
        target, draft: LanguageModels over one vocabulary (draft may be None for prompt lookup).
        method: a `Method`. context: tuple of token ids. num_tokens: N >= 1.
        rng: a `Randomness` (e.g. `Sampler(seed)`); default `Sampler(None)`.

    Raises:
        TypeError / ValueError: mismatched vocabularies, bad context, N < 1, non-Method.
    """
    check_pair(target, draft)
    if not isinstance(method, Method):
        raise TypeError(f"method: expected a Method, got {type(method).__name__}")
    context = check_prefix(context, target.vocab_size, "context")
    N = check_positive_int(num_tokens, "num_tokens")
    rand = rng if rng is not None else Sampler(None)
    out: tuple[int, ...] = ()
    while len(out) < N:
        out += method.step(target, draft, context + out, rand)
    return out[:N]
