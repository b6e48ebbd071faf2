"""The method registry: every built-in method declared once, the source of its behaviour.

A method is a drafter paired with a verifier. Each entry (`MethodSpec`) holds everything the rest
of the package needs to know about one method: its name, a line of doc, its family (`FAMILIES`:
baseline, chain, multi-path, selection, tree, phrase pool), its parameters (keyword, the one
default, the bench's short key), whether it needs a draft model, how many uniforms one row of its
torch rule can read (`uniforms`), and where its implementations live: the numpy reference factory
(drafter + rule, `verispec.reference`), the torch factory, the torch rule and the torch drafter
(`verispec.empirical`). Implementations are named as ``"module:attr"`` and imported on first use,
so this table imports neither torch nor the rules.

`verispec.reference.methods`, `verispec.empirical.methods`, the torch rule table
(`verispec.empirical.verifiers.rule_table`), the engine's verifiers, `verispec check`, `prove` and
`verispec bench` read this table; no other module tests a method's name (a test checks it over
the source). Adding a method is one entry here plus its rule files. Parameters listed in
`MethodSpec.torch_only` are engine options of the torch twin (its draft temperature, a length
schedule, guesses checked in the same forward, the cost policy that picks an iteration's draft
length or node budget) that change neither the rule nor its output law. A `Param`'s `bench` value
is what `verispec bench` runs when its key is not given (the cost policy "auto" on the recommended
methods: adaptive, hybrid, opt_tree); the library's default is `default`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, replace
from typing import Any, Callable

from .deprecation import deprecated

__all__ = ["Param", "MethodSpec", "REGISTRY", "FAMILIES", "BASELINE", "CHAIN", "MULTI_PATH", "SELECTION", "TREE",
           "PHRASE_POOL", "BASELINE_METHOD", "POLICY_OPTIONS", "spec", "names", "quick_check_names", "build",
           "default", "resolve_factory", "markdown_table", "one_per_node", "top_down", "three_per_node",
           "traversal_uniforms"]

#: The families of methods: how a method drafts and what layout its torch rule reads.
BASELINE = "baseline"        #: no draft: one target forward and one draw from p per token
CHAIN = "chain"              #: one draft path (a chain, or point masses), path-layout rule on path 0
MULTI_PATH = "multi-path"    #: K draft paths, one path-layout rule over all of them
SELECTION = "selection"      #: K draft paths, a one-step multi-draft selection rule applied top down
TREE = "tree"                #: a draft tree, sample-and-follow on any tree
PHRASE_POOL = "phrase pool"  #: point-mass phrases from a pool that learns across decode calls
FAMILIES = (BASELINE, CHAIN, MULTI_PATH, SELECTION, TREE, PHRASE_POOL)


def one_per_node(draft_length: int, num_paths: int) -> int:
    """Uniforms of a rule that reads at most one per node on a root-to-leaf walk: L + 1 (token,
    block, gbv, nss, sample-and-follow)."""
    return draft_length + 1


def top_down(draft_length: int, num_paths: int) -> int:
    """Uniforms of a top-down multi-draft rule that reads K + 1 per level, then the bonus draw:
    L (K + 1) + 1 (rrs, rrsw, spectr, khisti's tournament)."""
    return draft_length * (num_paths + 1) + 1


def three_per_node(draft_length: int, num_paths: int) -> int:
    """Uniforms of a top-down selection rule that reads at most 3 per level, then the bonus draw:
    3 L + 1 (optimal_is, global_resolution, spechub, hu_greedy)."""
    return 3 * draft_length + 1


def traversal_uniforms(draft_length: int, num_paths: int) -> int:
    """Uniforms of traversal verification, which may visit every node of K paths leaves up: K L + 2."""
    return num_paths * draft_length + 2


@dataclass(frozen=True)
class Param:
    """One method parameter: its keyword, its default, the bench's short key (``L=4``) with the
    values it takes there, a line of doc, and `bench`: the value `verispec bench` uses when the
    key is not given (None: `default`)."""

    name: str
    default: Any
    key: str | None = None
    doc: str = ""
    minimum: int = 1
    maximum: int | None = None
    per: int = 1
    choices: tuple[str, ...] = ()
    bench: Any = None

    def from_key(self, value: str):
        """The parameter's value from the bench's ``key=value`` text: one of `choices`, or an int in
        [minimum, maximum] divided by `per` (``c=50`` -> threshold 0.5). None when out of range."""
        if self.choices:
            return value if value in self.choices else None
        if not value.isdigit() or int(value) < self.minimum or (self.maximum is not None and int(value) > self.maximum):
            return None
        return int(value) / self.per if self.per != 1 else int(value)


@dataclass(frozen=True)
class MethodSpec:
    """One registered method.

    Attributes:
        name: the method's name (the CLI's and the bench's).
        doc: one line: drafter + verifier, and the source.
        params: its parameters, in order.
        family: one of `FAMILIES` (how it drafts; the layout its torch rule reads).
        needs_draft: True when drafting runs the draft model.
        uniforms: ``uniforms(L, K) -> int``, the most uniforms one row of its torch rule reads for
            draft length (or tree depth) L and K paths; None for a phrase pool, whose trie sets it
            (`verispec.empirical.verifiers.pointmass.point_mass_tree_uniforms`).
        reference: ``"module:attr"`` of the numpy factory (it pairs the reference drafter and
            rule), or None (no reference twin).
        torch: ``"module:attr"`` of the torch factory, or None (reference only).
        torch_rule: ``"module:attr"`` of the torch rule: a path-layout rule function for the chain
            and multi-path families (`verispec.empirical.verifiers.rule_table.RULES`), else the
            engine verifier's class; None where a parameter picks it (adaptive's `verifier`) or
            the method has no torch twin.
        torch_drafter: ``"module:attr"`` of the torch drafter's class (None: the torch factory's own).
        torch_fixed: keyword arguments the torch factory always gets (e.g. the rule's name).
        torch_only: parameter names only the torch twin takes (engine options, see module doc).
        no_twin: why a torch method has no reference twin (empty when it has one).
        quick_check: False for a method whose exact law costs minutes on the default instances
            (`verispec check` without --method skips it; name it to check it).
        lossy: True for a rule lossy by design (its Method carries ``lossy=True``); `verispec
            check` without --method skips it, and reports it "lossy" with its TV when named.
        note: how the method simplifies its paper's (shown beside its name in bench tables).
    """

    name: str
    doc: str
    params: tuple[Param, ...]
    family: str = CHAIN
    needs_draft: bool = True
    uniforms: Callable[[int, int], int] | None = one_per_node
    reference: str | None = None
    torch: str | None = None
    torch_rule: str | None = None
    torch_drafter: str | None = None
    torch_fixed: tuple[tuple[str, Any], ...] = ()
    torch_only: tuple[str, ...] = ()
    no_twin: str = ""
    quick_check: bool = True
    lossy: bool = False
    note: str = ""

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"family: expected one of {', '.join(FAMILIES)}, got {self.family!r}")

    def defaults(self, backend: str) -> dict:
        """{parameter: default} of the parameters `backend` ("reference" or "torch") takes."""
        return {p.name: p.default for p in self.params if backend == "torch" or p.name not in self.torch_only}

    @property
    def keeps_pool(self) -> bool:
        """True for a phrase-pool method: its torch twin takes a `pool` (`PhrasePool`) that learns
        across decode calls, which the bench keeps per method and temperature across prompts."""
        return self.family == PHRASE_POOL

    @property
    def keys(self) -> dict:
        """{short key: parameter name} (the bench's ``name:L=4,K=3`` form)."""
        return {p.key: p.name for p in self.params if p.key}

    @property
    def fixed_paths(self) -> int | None:
        """The number of draft paths the torch twin always drafts (spechub's hub pair: 2), or None."""
        return dict(self.torch_fixed).get("num_paths")


L = Param("draft_length", 4, "L", "draft tokens per path (the draft length L)")
K = Param("num_paths", 2, "K", "draft paths (num_paths K)")
T_DRAFT = Param("draft_temperature", None, None, "temperature the drafts are drawn at (default: the target's)")
S = Param("truncation", None, "s", "tokens of the truncated selection LP (None: the full vocabulary)")
N_BUDGET = Param("node_budget", 50, "n", "draft tokens per tree (node budget)")
THRESHOLD = Param("gain_threshold", 0.0, None, "OPT-Tree stops adding layers when E[A] gains <= gain_threshold")
DEPTH = Param("max_depth", 10, None, "the deepest layer of a tree")
PRUNE = Param("prune", True, None, "skip draft rows no chosen node can descend from")
WIDTH = Param("width", None, "width", "expand only the `width` largest-W nodes of each layer, so a draft forward runs "
              "at most that many rows (None: every node that can matter)")
NGRAM = Param("max_ngram", 3, None, "the longest context suffix n-gram looked up")
CONFIDENCE = Param("confidence_threshold", 0.4, "c", "stop the chain after a token of draft probability below it "
                   "(c: percent)",
                   minimum=0, maximum=100, per=100)
VERIFIER = Param("verifier", "token", "v", "the chain's verifier: token or block", choices=("token", "block"))
CAP = Param("max_draft_length", None, "M", "the length cap's ceiling (None: 4 L)")
SCHEDULE = Param("schedule", "heuristic", "sched", "the length cap's schedule: heuristic or constant",
                 choices=("heuristic", "constant"))
GUESSES = Param("guess_length", 0, "g", "prompt-lookup guesses the draft model checks per forward")

#: The cost policy (`verispec.reference.policy`, torch: `verispec.empirical.speedups.policy`): a
#: drafting choice, so a torch-only option of every method with a draft length or node budget.
POLICY = Param("policy", "fixed", "pol", "the draft length / node budget: the method's own (fixed) or chosen per "
               "iteration for expected tokens per second under measured costs (auto)", choices=("fixed", "auto"))
POLICY_AUTO = replace(POLICY, bench="auto")
COSTS = Param("costs", None, None, "the measured CostModel policy auto prices iterations with (the bench measures it)")
CALIBRATION = Param("calibration_weight", 4, "cw", "policy auto: prior weight, in tokens, of the draft's q(x) as "
                    "its acceptance estimate", minimum=0)
MEMORY = Param("memory", None, None, "policy auto: a PolicyMemory carrying its statistics across decode calls "
               "(the bench keeps one per method and temperature)")
LEAVES = Param("leaves", "off", "lv", "policy auto, at T = 0: below the chain, the draft's runner-up token at each "
               "depth as a leaf where it pays under the costs, the tree followed greedily (on), or none (off)",
               choices=("off", "on"))
_POLICY = (POLICY, COSTS, CALIBRATION, MEMORY)
_POLICY_AUTO = (POLICY_AUTO, COSTS, CALIBRATION, MEMORY)
#: The names of the policy's parameters (`verispec.empirical.methods.get` applies them to any method
#: that declares them; the last, leaves, only the adaptive chain declares).
_POLICY_NAMES = tuple(p.name for p in _POLICY)
POLICY_OPTIONS = _POLICY_NAMES + (LEAVES.name,)

POOL = Param("pool", None, None, "a PhrasePool read and filled by every decode (None: a fresh pool per call)")
WINDOW = Param("window", 4, "W", "Jacobi window columns in every forward (0: none)", minimum=0)
CANDIDATES = Param("num_candidates", 3, "C", "newest pool phrases tried per lookup")
_POOL_STATE = ("no reference twin: its phrase pool learns across decode calls, state a stateless reference "
               "Method cannot hold; verispec.reference.ouroboros checks the same rule on a pool snapshot")

_REF = "verispec.reference.methods"
_TORCH = "verispec.empirical.methods"
_RULES = "verispec.empirical.verifiers"
_DRAFTERS = "verispec.empirical.drafters"
_PATHS = f"{_DRAFTERS}:PathsDrafter"
_SAMPLE_AND_FOLLOW = f"{_RULES}.nodes:SampleAndFollow"
_POINT_MASS_TREE = f"{_RULES}.nodes:PointMassTree"
_PHRASES = f"{_DRAFTERS}.phrases.phrase_drafters"
_TOP_DOWN = f"{_RULES}.multistep:TopDownSelection"


def _path(name: str, doc: str, rule: str, multi: bool, iid: bool = True,
          uniforms: Callable[[int, int], int] = one_per_node) -> MethodSpec:
    """A chain (K = 1) or multi-path method: `PathsDrafter` + the path-layout torch rule `rule`."""
    params = ((L, K, T_DRAFT) if multi else (L, T_DRAFT)) + _POLICY
    return MethodSpec(name, doc, params, MULTI_PATH if multi else CHAIN, uniforms=uniforms,
                      reference=f"{_REF}:{name}", torch=f"{_TORCH}:paths_method", torch_rule=f"{_RULES}.{rule}",
                      torch_drafter=_PATHS,
                      torch_fixed=(("name", name), ("iid", iid)) + (() if multi else (("num_paths", 1),)),
                      torch_only=("draft_temperature",) + _POLICY_NAMES)


def _selection(name: str, doc: str, params: tuple, drafter: str = _PATHS, fixed: tuple = (),
               uniforms: Callable[[int, int], int] = three_per_node) -> MethodSpec:
    """A multi-draft selection method: `drafter` + its one-step rule top down (`TopDownSelection`)."""
    return MethodSpec(name, doc, params + _POLICY, SELECTION, uniforms=uniforms, reference=f"{_REF}:{name}",
                      torch=f"{_TORCH}:selection_method", torch_rule=_TOP_DOWN, torch_drafter=drafter,
                      torch_fixed=(("name", name),) + fixed, torch_only=("draft_temperature",) + _POLICY_NAMES)


def _tree(name: str, doc: str, shape: str, branching_doc: str, torch_only: tuple, note: str = "",
          policy: tuple = _POLICY) -> MethodSpec:
    """A draft-tree method: `TreeDrafter` of tree `shape` + sample-and-follow; `branching_doc`: the
    `branching` parameter's doc ("" for a shape without one: opt_tree, whose layers take a width);
    `policy`: the cost policy's parameters (`_POLICY_AUTO`: the bench runs it "auto")."""
    # opt_tree's shape takes no branching; its layers take a width, a static shape's are fixed
    shape_params = (Param("branching", 2, None, branching_doc),) if branching_doc else (WIDTH,)
    params = (N_BUDGET, THRESHOLD, DEPTH) + shape_params + (T_DRAFT, PRUNE) + policy
    torch = f"{_TORCH}:{'tree_method' if branching_doc else 'opt_tree_method'}"
    return MethodSpec(name, doc, params, TREE, reference=f"{_REF}:{name}", torch=torch,
                      torch_rule=_SAMPLE_AND_FOLLOW, torch_drafter=f"{_DRAFTERS}:TreeDrafter",
                      torch_fixed=(("name", name), ("kind", shape)), torch_only=torch_only + _POLICY_NAMES,
                      note=note)


_STATIC = ("gain_threshold", "draft_temperature", "prune")
_KARY = "children per node of the k-ary tree"

_ENTRIES = (
    MethodSpec("target_only", "no draft: one target forward and one draw from p per token (the baseline)", (),
               BASELINE, needs_draft=False, reference=f"{_REF}:target_only",
               torch="verispec.empirical.torch_method:target_only_method", torch_rule=_SAMPLE_AND_FOLLOW,
               torch_drafter=f"{_DRAFTERS}:RootOnly"),
    _path("token", "a chain + token-level rejection sampling (Leviathan et al., arXiv 2211.17192)",
          "token:token_rule", False),
    _path("block", "a chain + block verification (Sun et al., arXiv 2403.10444, Algorithm 2)", "block:block_rule", False),
    _path("gbv", "K i.i.d. paths + greedy multi-path block verification (Thomas & Pal, arXiv 2602.16961)",
          "gbv:gbv_rule", True),
    _path("nss", "K i.i.d. paths + naive selection: Y ~ p, kept if drafted (SpecInfer, arXiv 2305.09781)",
          "multidraft:nss_rule", True),
    _path("rrs", "K i.i.d. paths + recursive rejection sampling (SpecInfer, arXiv 2305.09781, Algorithm 2)",
          "multidraft:rrs_rule", True, uniforms=top_down),
    _path("rrsw", "K paths without replacement + recursive rejection (Jeon et al., arXiv 2402.14160)",
          "multidraft:rrsw_rule", True, False, uniforms=top_down),
    _path("spectr", "K i.i.d. paths + SpecTr's K-SEQ draft selection (Sun et al., arXiv 2310.15141, Algorithm 3)",
          "multidraft:spectr_rule", True, uniforms=top_down),
    _path("traversal", "K i.i.d. paths + traversal verification, leaves up (Weng et al., arXiv 2505.12398)",
          "traversal:traversal_rule", True, uniforms=traversal_uniforms),
    _tree("opt_tree", "OPT-Tree's adaptive draft tree + sample-and-follow (Wang et al., arXiv 2406.17276)",
          "opt_tree", "", ("draft_temperature", "prune"), policy=_POLICY_AUTO),
    _tree("kary", "a static k-ary draft tree + sample-and-follow (a baseline for OPT-Tree)", "kary", _KARY, _STATIC),
    _tree("eagle", "an EAGLE-style static rank-prior tree + sample-and-follow (after Li et al., arXiv 2401.15077)",
          "eagle", _KARY, _STATIC, note="EAGLE-style, fixed priors"),
    _tree("chain_tree", "a chain as a draft tree + sample-and-follow (a baseline for OPT-Tree)", "chain", _KARY, _STATIC),
    MethodSpec("point_mass", "the draft model's greedy chain as point masses + token verification",
               (L,), reference=f"{_REF}:point_mass", torch=f"{_TORCH}:paths_method",
               torch_rule=f"{_RULES}.token:token_rule", torch_drafter=_PATHS,
               torch_fixed=(("name", "point_mass"), ("iid", True), ("num_paths", 1), ("draft_temperature", 0.0))),
    MethodSpec("prompt_lookup", "n-gram prompt-lookup point masses + token verification (prompt lookup decoding, Saxena 2023)",
               (L, NGRAM), needs_draft=False, reference=f"{_REF}:prompt_lookup", torch=f"{_TORCH}:prompt_lookup",
               torch_rule=f"{_RULES}.token:token_rule", torch_drafter=f"{_DRAFTERS}:PromptLookupDrafter"),
    _selection("khisti", "K i.i.d. paths + importance-sampling selection, top down (Khisti et al., arXiv 2410.18234, "
               "Theorem 1)", (L, K, T_DRAFT, S), uniforms=top_down),
    _selection("optimal_is", "K i.i.d. paths + the optimal one-step selection LP, top down (Hu et al., arXiv 2502.18779)",
               (L, K, T_DRAFT, S)),
    _selection("global_resolution", "K i.i.d. paths + the alpha*-optimal selection at any vocabulary, no LP, top down "
               "(after Global Resolution, Thomas & Pal, arXiv 2511.15898)", (L, K, T_DRAFT),
               fixed=(("truncation", None),)),
    _selection("spechub", "a hub pair of 2 paths + SpecHub's verification (Sun et al., arXiv 2411.05289)", (L, T_DRAFT),
               f"{_DRAFTERS}:HubPairsDrafter", (("num_paths", 2), ("truncation", None))),
    _selection("hu_greedy", "top K-1 tokens of q + one sampled off them, verified at its transport optimum (Hu et al., "
               "arXiv 2502.18779)", (L, K, T_DRAFT), f"{_DRAFTERS}:GreedyDraftDrafter", (("truncation", None),)),
    MethodSpec("adaptive", "a confidence-stopped chain + token or block verification (transformers' heuristic)",
               (L, CAP, CONFIDENCE, SCHEDULE, T_DRAFT, VERIFIER, GUESSES) + _POLICY_AUTO + (LEAVES,),
               reference="verispec.reference.adaptive:adaptive_method", torch="verispec.empirical.drafters.adaptive:adaptive_method",
               torch_drafter=f"{_DRAFTERS}.adaptive:AdaptiveChainDrafter",
               torch_only=("max_draft_length", "schedule", "draft_temperature", "guess_length") + POLICY_OPTIONS),
    MethodSpec("hybrid", "a prompt-lookup phrase when the context has one, else the adaptive chain",
               (L, CAP, CONFIDENCE, SCHEDULE, Param("lookup_length", 10, None, "tokens of a lookup phrase"), NGRAM,
                T_DRAFT, VERIFIER, GUESSES) + _POLICY_AUTO,
               reference="verispec.reference.adaptive:hybrid_method", torch="verispec.empirical.drafters.adaptive:hybrid_method",
               torch_drafter=f"{_DRAFTERS}.adaptive:HybridDrafter", quick_check=False,
               torch_only=("max_draft_length", "schedule", "draft_temperature", "guess_length") + _POLICY_NAMES),
    MethodSpec("typical", "a chain + Medusa's typical acceptance, p(x) > min(eps, delta e^-H(p)); lossy (Cai et al., "
               "arXiv 2401.10774)", (L, Param("epsilon", 0.09, None, "eps: the hard probability threshold"),
                                     Param("delta", 0.3, None, "delta: the entropy-scaled threshold")),
               reference=f"{_REF}:typical", lossy=True),
    MethodSpec("static_ensemble", "a chain + speculative sampling against w p + (1 - w) q; lossy (DIVERSE, "
               "arXiv 2604.07622)", (L, Param("ensemble_weight", 0.5, None, "w: the target's weight in the ensemble")),
               reference=f"{_REF}:static_ensemble", lossy=True),
    MethodSpec("fsd", "a chain accepted while a divergence D(p, q) <= T; lossy (Fuzzy SD, Holsman et al., "
               "arXiv 2502.20704)", (L, Param("divergence_threshold", 0.1, None, "T: the divergence threshold"),
                                     Param("divergence", "js", None, "D: js, kl or tv")),
               reference=f"{_REF}:fsd", lossy=True),
    MethodSpec("ouroboros", "draft-model phrases + pool suffixes, point-mass tree verification (Zhao et al., "
               "arXiv 2402.13720), one Jacobi level", (POOL, L, CANDIDATES, WINDOW), PHRASE_POOL, uniforms=None,
               torch="verispec.empirical.drafters.phrases:ouroboros_method", torch_rule=_POINT_MASS_TREE,
               torch_drafter=f"{_PHRASES}:OuroborosDrafter", no_twin=_POOL_STATE, note="simplified: 1 Jacobi level"),
    MethodSpec("ouroboros_phrase", "Ouroboros phrase by phrase: a guess set checked per draft forward, 2-D window, "
               "pool refinement (arXiv 2402.13720, Algorithm 1)",
               (POOL, L, CANDIDATES, Param("guess_set", 20, "G", "the guess set: pool phrases the draft checks per forward"),
                WINDOW, Param("output_ngrams", True, None, "also pool the verified output's n-grams"),
                Param("flat_window", False, None, "a one-level window instead of the 2-D one"),
                Param("phrase_length", 6, "n", "tokens per pool phrase (the lookahead level minus one)")),
               PHRASE_POOL, uniforms=None, torch="verispec.empirical.drafters.phrases:ouroboros_phrase_method",
               torch_rule=_POINT_MASS_TREE, torch_drafter=f"{_PHRASES}:PhraseOuroborosDrafter", no_twin=_POOL_STATE),
    MethodSpec("lookahead", "no draft model: pool phrases from a one-level Jacobi window, point-mass tree "
               "verification (after Fu et al., arXiv 2402.02057)", (POOL, CANDIDATES, WINDOW), PHRASE_POOL,
               needs_draft=False, uniforms=None, torch="verispec.empirical.drafters.phrases:lookahead_method",
               torch_rule=_POINT_MASS_TREE, torch_drafter=f"{_PHRASES}:LookaheadDrafter", no_twin=_POOL_STATE, note="simplified: 1 window level"),
)

#: Renamed parameters (issue 45: one term per idea) that `build` still takes, with a
#: DeprecationWarning: old name -> the new names (the one the method declares is used).
RENAMED_PARAMS = {"threshold": ("gain_threshold", "confidence_threshold", "divergence_threshold")}
#: Renamed bench keys, still read (with a DeprecationWarning) by a method that declares the new
#: key and not the old: the phrase pools' K (num_candidates) is now C; K is num_paths.
RENAMED_KEYS = {"K": "C"}

#: name -> MethodSpec, in the order of docs/algorithms.md.
REGISTRY: dict[str, MethodSpec] = {entry.name: entry for entry in _ENTRIES}
#: The name of the one baseline method (target-only decoding), which every other method is measured against.
BASELINE_METHOD: str = next(entry.name for entry in _ENTRIES if entry.family == BASELINE)


def names(backend: str | None = None, lossy: bool | None = None, family: str | None = None) -> list[str]:
    """Registered method names; with `backend` ("reference" or "torch"), those it implements; with
    `lossy` (True / False), only the rules declared lossy / lossless; with `family` (`FAMILIES`),
    only that family's.

    Raises:
        ValueError: an unknown backend or family.
    """
    if backend not in (None, "reference", "torch"):
        raise ValueError(f"backend: expected 'reference', 'torch' or None, got {backend!r}")
    if family is not None and family not in FAMILIES:
        raise ValueError(f"family: expected one of {', '.join(FAMILIES)} or None, got {family!r}")
    return [name for name, entry in REGISTRY.items()
            if (backend is None or getattr(entry, backend)) and (lossy is None or entry.lossy == lossy)
            and (family is None or entry.family == family)]


def quick_check_names() -> list[str]:
    """The reference methods `verispec check` runs by default: the lossless ones but those whose exact
    law costs minutes (hybrid: its lookup reads the whole prefix, so every prefix is enumerated)."""
    return [name for name in names("reference", lossy=False) if REGISTRY[name].quick_check]


def spec(name: str) -> MethodSpec:
    """The registered method `name`.

    Raises:
        TypeError: name is not a string. ValueError: an unknown name (the message lists them).
    """
    if not isinstance(name, str):
        raise TypeError(f"name: expected a method name string, got {type(name).__name__}")
    if name not in REGISTRY:
        raise ValueError(f"name: unknown method {name!r}; known: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def default(name: str, param: str):
    """The declared default of parameter `param` of method `name` (the one place it is defined:
    factories read their keyword defaults here).

    Raises:
        ValueError: an unknown method, or a parameter it does not declare.
    """
    for declared in spec(name).params:
        if declared.name == param:
            return declared.default
    raise ValueError(f"param: method {name!r} declares no parameter {param!r}")


def resolve_factory(path: str):
    """The callable named by ``"module:attr"`` (imported now)."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def build(name: str, backend: str, params: dict):
    """Method `name` built by `backend`'s factory with the registry's defaults under `params`.
    The cost policy's parameters (`POLICY_OPTIONS`) are not the factory's: the backend's `get`
    applies them to the built method (`verispec.empirical.methods.get`).

    Raises:
        ValueError: unknown name, or `backend` has no twin of it. TypeError: a parameter the
            method does not take on that backend (the message lists those it takes).
    """
    entry = spec(name)
    path = getattr(entry, backend)
    if path is None:
        raise ValueError(f"name: method {name!r} has no {backend} implementation; "
                         f"{backend} methods: {', '.join(names(backend))}")
    accepted = {k: v for k, v in entry.defaults(backend).items() if k not in POLICY_OPTIONS}
    params = renamed_params(name, params, entry.defaults(backend), stacklevel=5)
    unknown = set(params) - set(accepted)
    if unknown:
        raise TypeError(f"{', '.join(sorted(unknown))}: not a parameter of method {name!r} "
                        f"(takes {', '.join(accepted)})")
    fixed = dict(entry.torch_fixed) if backend == "torch" else {}
    return resolve_factory(path)(**fixed, **{**accepted, **params})


def renamed_params(name: str, params: dict, takes: dict, stacklevel: int = 4) -> dict:
    """`params` with each deprecated name of `RENAMED_PARAMS` that method `name` does not take
    replaced by the new one it takes (a DeprecationWarning each, `stacklevel` frames up)."""
    for old, news in RENAMED_PARAMS.items():
        new = next((n for n in news if n in takes), None)
        if old in params and old not in takes and new is not None and new not in params:
            deprecated(f"the parameter {old!r} of method {name!r}", repr(new), stacklevel)
            params = {(new if k == old else k): v for k, v in params.items()}
    return params


def markdown_table() -> str:
    """The registry as a Markdown table (docs/algorithms.md carries it; a test keeps them equal)."""
    rows = ["| method | family | drafter + verifier | parameters (bench key) = default | reference | torch |",
            "|---|---|---|---|---|---|"]
    for entry in REGISTRY.values():
        params = ", ".join(f"{p.name}{f' ({p.key})' if p.key else ''} = {p.default!r}"
                           + (" *(torch)*" if p.name in entry.torch_only else "") for p in entry.params)
        rows.append(f"| `{entry.name}` | {entry.family} | {entry.doc} | {params} | {'yes' if entry.reference else '-'} | "
                    f"{'yes' if entry.torch else '-'} |")
    return "\n".join(rows)
