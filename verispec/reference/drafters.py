"""Drafters: how draft trees are sampled. A drafter is `drafter(draft_model, context, rand) -> Draft`.

A `Draft` is a token tree below the context. Nodes are token tuples relative to the context
(root = ()). It is expanded lazily: a node's next tokens are drawn the first time a verifier asks
for them. The draws of different nodes are independent given the tree above them, so drawing them
in the order a verifier reads them — and never drawing the parts it never reads — leaves the joint
law of everything the verifier sees unchanged. Under the exact enumerator this prunes the choice
tree enormously (a top-down verifier never pays for subtrees it rejected).

Drafters (docs/algorithms.md): `chain(L)`, `iid_paths(L, K)`, `paths_without_replacement(L, K)`,
`greedy_draft_paths(L, K)` (Hu et al.'s greedy draft sampling), `node_by_node` (per-node drafting),
`opt_tree(node_budget, gain_threshold, max_depth)`, static trees `ranked_tree(rank_paths)`,
point-mass drafters `point_mass(fn)`,
`greedy(L)` and `prompt_lookup(L, max_ngram)`. The i.i.d. draws of one node (`draw_counts`) are
in `verispec.reference.draws`, and importable from here.
"""

from __future__ import annotations

import heapq
import itertools
from fractions import Fraction
from typing import Callable, Sequence

import numpy as np

from .audit import plumbing
from .contract import RuleContractError
from .deprecation import renamed_keywords
from .draws import draw_counts, token_id
from .models import LanguageModel, check_positive_int, check_prefix
from .probability import argmax, one_hot

Node = tuple  # tuple[int, ...], relative to the context


@plumbing
class Draft:
    """A (lazily expanded) draft tree.

    Args:
        num_paths: K, the number of root-to-leaf paths the drafter starts with.
        expand: `expand(node, k) -> (drafted, proposal)` for the k paths through `node`:
            `drafted` is either a tuple with the next token of each path in path order (may be
            shorter than k: the remaining paths are dropped), or a dict {token: count} with counts
            summing to k, meaning the paths' tokens are exchangeable (i.i.d.) — their order is then
            drawn only if a verifier asks for it. `proposal` [V] is the law they were drawn from
            (the q of the rules). An empty `drafted` makes `node` a leaf.
        rand: the `Randomness` that draws orders of exchangeable tokens (uniform over the distinct
            arrangements of the multiset, which is their exact conditional law given the counts).

    Deterministic trees (children chosen by a rule, e.g. the top-k children of EAGLE / SGLang
    trees, OPT-Tree): their children were not drawn from any q, so `expand` returns
    ``proposal=None`` for a non-leaf node ("no proposal": `proposal` then raises a
    RuleContractError, and such trees are verified by rules that sample the target and follow the
    tree, e.g. `verifiers.sample_and_follow`), or a one-hot point mass when the node has one child
    (a greedy chain: token verification with q = one-hot is lossless). Passing the soft q of the
    draft model for a deterministic node is wrong, since the rules' ratios p/q and residuals assume
    the children were drawn from q; the exact engine detects a verifier that reads such a proposal
    (a q with two or more tokens of positive probability while the node's children are the same on
    every branch) and raises RuleContractError.
    """

    def __init__(self, num_paths: int, expand: Callable[[Node, int], tuple], rand=None):
        self._expand = expand
        self._rand = rand
        self._drafted: dict[Node, tuple] = {}  # what expand returned, to compare across branches
        self._read: set = set()  # nodes whose proposal a verifier read
        self._num: dict[Node, int] = {(): num_paths}
        self._counts: dict[Node, dict[int, int]] = {}
        self._order: dict[Node, tuple[int, ...]] = {}
        self._proposal: dict[Node, np.ndarray | None] = {}

    def _ensure(self, node: Node) -> None:
        if node in self._counts:
            return
        if node not in self._num:
            raise KeyError(f"node {node} is not in the draft")
        k = self._num[node]
        drafted, proposal = self._expand(node, k)
        if isinstance(drafted, dict):
            counts = {token_id(t): int(c) for t, c in sorted(drafted.items()) if c > 0}
            if sum(counts.values()) != k:
                raise ValueError(f"expand returned counts for {sum(counts.values())} paths, not {k}, at {node}")
        else:
            order = tuple(token_id(t) for t in drafted)
            if len(order) > k:
                raise ValueError(f"expand returned {len(order)} tokens for {k} paths at node {node}")
            counts = {}
            for t in order:
                counts[t] = counts.get(t, 0) + 1
            self._order[node] = order
        self._counts[node] = counts
        self._proposal[node] = proposal
        self._drafted[node] = self._order[node] if node in self._order else tuple(counts.items())
        for t, c in counts.items():
            self._num[node + (t,)] = c

    def counts(self, node: Node = ()) -> dict[int, int]:
        """{drafted child token: number of paths through it} (token order; draws no order)."""
        self._ensure(node)
        return self._counts[node]

    def child_set(self, node: Node = ()) -> tuple[int, ...]:
        """The distinct drafted children of `node` in token-id order (draws no order)."""
        return tuple(self.counts(node))

    def tokens(self, node: Node = ()) -> tuple[int, ...]:
        """The drafted next token of every path through `node`, in path order (duplicates kept);
        () at a leaf. These are x_1..x_k of the one-step multi-draft rules."""
        counts = self.counts(node)
        if node not in self._order:
            multiset = [t for t, c in counts.items() for _ in range(c)]
            arrangements = sorted(set(itertools.permutations(multiset)))
            if len(arrangements) == 1:
                self._order[node] = arrangements[0]
            else:
                exact = self._proposal[node] is not None and self._proposal[node].dtype == object
                n = len(arrangements)
                uniform = np.array([Fraction(1, n)] * n, dtype=object) if exact else np.full(n, 1.0 / n)
                self._order[node] = arrangements[self._rand.categorical(uniform)]
        return self._order[node]

    def children(self, node: Node = ()) -> tuple[int, ...]:
        """The distinct drafted children of `node`, in order of first appearance among the paths."""
        return tuple(dict.fromkeys(self.tokens(node)))

    def proposal(self, node: Node = ()) -> np.ndarray:
        """q(. | context + node) -> [V]: the law the children of `node` were drawn from.

        Raises:
            ValueError: `node` is a leaf.
            RuleContractError: `node` has children but no proposal (a deterministic tree).
        """
        self._ensure(node)
        if self._proposal[node] is None:
            if self._counts[node]:
                raise RuleContractError(
                    f"draft: node {node} was drafted deterministically (children {self.child_set(node)}, "
                    "no proposal): a rule reading q here assumes they were drawn from q; verify a "
                    "deterministic tree by sampling the target and following it (sample_and_follow)")
            raise ValueError(f"node {node} is a leaf: it has no proposal distribution")
        self._read.add(node)
        return self._proposal[node]

    def expansions(self):
        """({node: what expand drafted there} for every expanded node, {node: proposal [V]} for
        every node whose proposal a verifier read): the exact engine compares them across branches
        to detect a soft q on a deterministic node."""
        return self._drafted, {node: self._proposal[node] for node in self._read}

    def num_paths(self, node: Node = ()) -> int:
        """How many draft paths pass through `node` (0 if it is not in the draft)."""
        return self._num.get(node, 0)

    def contains(self, node: Node) -> bool:
        """True when `node` is a node of the draft tree (expanding ancestors as needed)."""
        for depth in range(len(node)):
            if node[depth] not in self.counts(node[:depth]):
                return False
        return True

    @property
    def paths(self) -> tuple[tuple[int, ...], ...]:
        """Every root-to-leaf path, one per draft path in path order (duplicates kept)."""
        ends: dict[int, Node] = {}
        stack = [((), list(range(self._num[()])))]
        while stack:
            node, ids = stack.pop()
            tokens = self.tokens(node)
            if not tokens:
                for path_id in ids:
                    ends[path_id] = node
            groups: dict[int, list[int]] = {}
            for path_id, t in zip(ids, tokens):
                groups.setdefault(t, []).append(path_id)
            stack += [(node + (t,), group) for t, group in groups.items()]
        return tuple(ends[i] for i in sorted(ends))

    @property
    def depth(self) -> int:
        """The length of the longest path."""
        return max((len(p) for p in self.paths), default=0)

    @classmethod
    def from_paths(cls, paths, proposal: Callable[[Node], np.ndarray]) -> "Draft":
        """A fixed draft from explicit paths (e.g. drafted by another backend).

        Args:
            paths: K root-to-leaf token tuples (duplicates allowed, equal lengths not required).
            proposal: node -> the q [V] its children were drawn from.
        """
        paths = [tuple(int(t) for t in path) for path in paths]

        def expand(node, k):
            through = [path for path in paths if path[:len(node)] == node and len(path) > len(node)]
            if not through:
                return (), None
            return tuple(path[len(node)] for path in through), proposal(node)

        if not paths:
            raise ValueError("paths: a draft needs at least one path")
        return cls(len(paths), expand)


@plumbing
class Drafter:
    """A named drafting strategy: `drafter(draft_model, context, rand) -> Draft`."""

    def __init__(self, name: str, build: Callable, **params):
        self.name = name
        self.params = params
        self._build = build

    def __call__(self, draft_model, context, rand) -> Draft:
        return self._build(draft_model, tuple(context), rand)

    def __getattr__(self, item):
        params = self.__dict__.get("params", {})
        if item in params:
            return params[item]
        raise AttributeError(item)

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"drafters.{self.name}({args})"


def require_draft_model(draft_model, who: str) -> LanguageModel:
    """`draft_model` itself, checked: drafters that sample from q need a LanguageModel (prompt
    lookup does not), so each names itself (`who`) in the error.

    Raises:
        TypeError: `draft_model` is not a LanguageModel.
    """
    if not isinstance(draft_model, LanguageModel):
        raise TypeError(f"draft: {who} needs a draft LanguageModel, got {type(draft_model).__name__}")
    return draft_model


def iid_paths(draft_length: int, num_paths: int) -> Drafter:
    """K i.i.d. autoregressive paths of length L from the draft model q (duplicates kept).

    Used by gbv, nss, rrs, spectr and traversal (Miao et al. 2024, arXiv 2305.09781; Sun et al.
    2023, arXiv 2310.15141; Thomas & Pal 2026, arXiv 2602.16961).

    Raises:
        TypeError / ValueError: draft_length or num_paths not an int >= 1.
    """
    return node_by_node("iid_paths", draft_length, num_paths, lambda q, k, rand: (draw_counts(q, k, rand), q))


def node_by_node(name: str, draft_length: int, num_paths: int, draft_node: Callable, **params) -> Drafter:
    """K paths of length L drafted one node at a time: at every node above depth L,
    `draft_node(q, k, rand) -> (drafted, proposal)` drafts the next tokens of the k paths through
    it from the draft model's q [V] there (`drafted` and `proposal` as `Draft`'s expand returns).
    `params` are recorded on the Drafter beside draft_length and num_paths.

    Raises:
        TypeError / ValueError: draft_length or num_paths not an int >= 1; no draft LanguageModel.
    """
    L = check_positive_int(draft_length, "draft_length")
    K = check_positive_int(num_paths, "num_paths")

    def build(draft_model, context, rand):
        draft_model = require_draft_model(draft_model, name)

        def expand(node, k):
            if len(node) == L:
                return (), None
            return draft_node(draft_model.probs(context + node), k, rand)

        return Draft(K, expand, rand)

    return Drafter(name, build, draft_length=L, num_paths=K, **params)


def root_only() -> Drafter:
    """The empty draft tree (the root alone): the verifier emits one token from p. Reads no model."""
    return Drafter("root_only", lambda draft_model, context, rand: fixed_tree({}), draft_length=0)


def chain(draft_length: int) -> Drafter:
    """One autoregressive path X_1..X_L ~ q (Leviathan et al. 2023, arXiv 2211.17192)."""
    drafter = iid_paths(draft_length, 1)
    drafter.name = "chain"
    drafter.params = {"draft_length": drafter.params["draft_length"]}
    return drafter


def paths_without_replacement(draft_length: int, num_paths: int) -> Drafter:
    """K paths whose first tokens are K distinct draws from q without replacement (Gumbel-top-K,
    realised as successive draws from q renormalised over the unused tokens); below the root
    every path continues as its own autoregressive chain. Fewer than K paths when q has fewer
    than K tokens of positive probability. Used by rrsw (Jeon et al. 2024, arXiv 2402.14160).
    """
    L = check_positive_int(draft_length, "draft_length")
    K = check_positive_int(num_paths, "num_paths")

    def build(draft_model, context, rand):
        draft_model = require_draft_model(draft_model, "paths_without_replacement")

        def expand(node, k):
            if len(node) == L:
                return (), None
            q = draft_model.probs(context + node)  # [V]
            remaining = q.copy()
            tokens = []
            for _ in range(k):
                if not np.any(remaining > 0):
                    break
                t = rand.categorical(remaining / remaining.sum())
                tokens.append(t)
                remaining[t] = 0
            return tuple(tokens), q

        return Draft(K, expand)

    return Drafter("paths_without_replacement", build, draft_length=L, num_paths=K)


@renamed_keywords(num_drafts="num_paths")
def greedy_draft(q: np.ndarray, num_paths: int, rand) -> tuple[tuple[int, ...], np.ndarray]:
    """Greedy draft sampling at one node (Hu et al. 2025, arXiv 2502.18779): the k - 1 most likely
    tokens of q, chosen deterministically, then ONE token drawn from q renormalised over the rest.

    Ties go to the lower token id; only tokens with q > 0 are drafted, so when q has m <= k - 1
    such tokens the top m - 1 are greedy and the last is drawn from the remaining one (fewer than
    k drafts, as `paths_without_replacement` drafts fewer when q runs out).

    Args:
        q: draft distribution [V] (float64, Fraction or symbolic). num_paths: k >= 1.
        rand: `Randomness` (one categorical draw).

    Returns:
        (drafts in path order: the greedy tokens by rank, then the sampled token; q_last [V]: the
        law the sampled token was drawn from, zero on the greedy tokens).
    """
    order = sorted((t for t in range(len(q)) if q[t] > 0), key=lambda t: (-q[t], t))
    greedy = order[:min(num_paths - 1, len(order) - 1)]
    rest = q.copy()  # [V]
    rest[greedy] = q[0] * 0
    # one positive token left: an exact point mass, so no division is needed (nor, under `prove`,
    # a symbolic q(x) / q(x))
    q_last = rest / rest.sum() if len(order) - len(greedy) > 1 else one_hot(order[-1], len(q), q.dtype == object)
    return tuple(greedy) + (rand.categorical(q_last),), q_last


def greedy_draft_paths(draft_length: int, num_paths: int) -> Drafter:
    """K paths of length L whose first tokens are Hu et al.'s greedy drafts (`greedy_draft`: the
    top K - 1 tokens of q plus one token drawn from q over the rest; arXiv 2502.18779). The
    paper defines the drafts of one position; here every node drafts `greedy_draft` with the paths
    through it, so below the root (one path per node) each path continues as its own chain from q.

    Each node's proposal is the law its sampled child was drawn from (`greedy_draft`'s q_last; q
    itself on a chain), so the rules' ratios p / q read the right law; the greedy children carry
    no law of their own (they are the first k - 1 children in path order).

    Raises:
        TypeError / ValueError: draft_length or num_paths not an int >= 1; no draft LanguageModel.
    """
    return node_by_node("greedy_draft_paths", draft_length, num_paths, greedy_draft)  # drafts, q_last [V]


def fixed_tree(children: dict) -> Draft:
    """A deterministic Draft from {node: [child tokens in order]}; one path per leaf. Its nodes have
    no proposal: the children were chosen, not drawn (see `Draft`)."""

    def leaves(node):
        kids = children.get(node, [])
        return 1 if not kids else sum(leaves(node + (t,)) for t in kids)

    def expand(node, k):
        kids = children.get(node, [])
        if not kids:
            return (), None
        return tuple(t for t in kids for _ in range(leaves(node + (t,)))), None

    return Draft(leaves(()), expand)


@renamed_keywords(threshold="gain_threshold")
def opt_tree_structure(q_of: Callable[[Node], np.ndarray], node_budget: int, gain_threshold: float,
                       max_depth: int, width: int | None = None) -> dict[Node, list[int]]:
    """OPT-Tree's layer-wise construction (Wang et al. 2024, arXiv 2406.17276, Algorithm 1).

    Node weight W(u) = product of draft probabilities on u's root path. Layer 1 = the top-n root
    children by q; each next layer = the global top-n of W(parent) * q(child | parent) over the
    top-n children of every node of the previous layer. After each layer E[A] = sum of the n
    largest W seen so far; stop when its gain is <= gain_threshold or at max_depth. The tree is the n
    largest-W nodes (ties: shallower first, so it is a subtree). Zero-probability children are
    never drafted.

    `width` (None: no cap) expands only the `width` largest-W nodes of each layer (ties by node):
    the others stay in the tree as leaves, and each layer's draft forward runs at most `width`
    rows. This is EAGLE-2's expansion step (Li et al. 2024, arXiv 2406.16858, Section 4.1: the
    top-k nodes of a layer by value are expanded), kept inside OPT-Tree's budget and stop; with
    width = 1 the tree is the draft's greedy chain with each layer's runner-up tokens as leaves.

    Exact draft probabilities (Fractions, or the prover's symbolic reals) are compared exactly:
    W is an exact product and every ranking is by exact comparisons (float64 products could tie or
    swap where the exact values do not), so `verispec prove` can run the construction symbolically.
    Float input is ranked in float64, as before.

    Returns:
        {node: [child tokens]} ordered by W descending (ties by token id).
    """
    n = node_budget
    width = None if width is None else check_positive_int(width, "width")
    weights: dict[Node, object] = {}
    layer: list[Node] = [()]
    parent_w = {(): 1}
    expected = 0
    for _depth in range(max_depth):
        candidates = []
        for u in layer if width is None else layer[:width]:  # the layer is sorted by W, descending
            q = np.asarray(q_of(u))  # [V]
            if q.dtype != object:  # float input: rank in float64 (exact input keeps its numbers)
                q = q.astype(np.float64)
            top = sorted((t for t in range(len(q)) if q[t] > 0), key=lambda t: (-q[t], t))[:n]
            candidates += [(parent_w[u] * q[t], u + (t,)) for t in top]
        candidates.sort(key=lambda c: (-c[0], c[1]))
        layer = [node for _, node in candidates[:n]]
        if not layer:
            break
        parent_w = {node: w for w, node in candidates[:n]}
        weights.update(parent_w)
        best = heapq.nlargest(n, weights.values())
        gain = sum(best) - expected
        expected = sum(best)
        if gain <= gain_threshold:
            break
    chosen = sorted(weights, key=lambda u: (-weights[u], len(u), u))[:n]
    chosen_set = set(chosen)
    children: dict[Node, list[int]] = {}
    for u in sorted(chosen, key=lambda u: (-weights[u], u)):
        assert u[:-1] == () or u[:-1] in chosen_set  # W shrinks along paths: a subtree
        children.setdefault(u[:-1], []).append(u[-1])
    return children


def ranked_tree(rank_paths) -> Drafter:
    """A static draft tree given by rank paths (EAGLE / SGLang-style fixed shapes, k-ary trees).

    The rank path (r_1, .., r_d) is the node reached by taking the r_1-th most likely child of the
    root under the draft model q (rank 0 = the argmax; ties go to the lower token id), then the
    r_2-th most likely child of that, and so on. A rank past the tokens of positive probability
    is no node (nor are its descendants). The children are chosen, not drawn: the nodes carry no
    proposal (see `Draft`), so the tree is verified by `verifiers.sample_and_follow`. The torch
    twin is `verispec.empirical.drafters.tree.TreeDrafter` with a static shape.

    Args:
        rank_paths: iterable of rank tuples, closed under taking parents (every prefix of a
            listed path is listed).

    Raises:
        ValueError: an empty path, a negative rank, or a path whose parent is not listed.
    """
    paths = [tuple(int(r) for r in u) for u in rank_paths]
    listed = set(paths)
    for u in paths:
        if not u or min(u) < 0:
            raise ValueError(f"rank_paths: every path must be a non-empty tuple of ranks >= 0, got {u}")
        if len(u) > 1 and u[:-1] not in listed:
            raise ValueError(f"rank_paths: the parent {u[:-1]} of {u} is not listed")
    shape: dict[tuple, list[int]] = {}
    for u in sorted(listed, key=lambda u: (len(u), u)):
        shape.setdefault(u[:-1], []).append(u[-1])

    def build(draft_model, context, rand):
        draft_model = require_draft_model(draft_model, "ranked_tree")
        children: dict[Node, list[int]] = {}

        def grow(ranks: tuple, node: Node) -> None:
            if ranks not in shape:
                return
            q = np.asarray(draft_model.probs(context + node), dtype=np.float64)  # [V]
            order = sorted((t for t in range(len(q)) if q[t] > 0), key=lambda t: (-q[t], t))
            kids = [(r, order[r]) for r in shape[ranks] if r < len(order)]
            if kids:
                children[node] = [t for _, t in kids]
            for r, t in kids:
                grow(ranks + (r,), node + (t,))

        grow((), ())
        return fixed_tree(children)

    return Drafter("ranked_tree", build, rank_paths=tuple(sorted(listed, key=lambda u: (len(u), u))))


def check_threshold(gain_threshold) -> float:
    """Validate OPT-Tree's E[A]-gain threshold delta (a number >= 0); returns it as a float.

    Raises:
        ValueError: not a number, negative or NaN.
    """
    if isinstance(gain_threshold, bool) or not isinstance(gain_threshold, (int, float)) or not gain_threshold >= 0:
        raise ValueError(f"gain_threshold: must be a number >= 0, got {gain_threshold!r}")
    return float(gain_threshold)


@renamed_keywords(threshold="gain_threshold")
def opt_tree(node_budget: int, gain_threshold: float = 0.0, max_depth: int | None = None,
             width: int | None = None) -> Drafter:
    """OPT-Tree adaptive draft tree (deterministic given the draft model); see `opt_tree_structure`.

    Args:
        node_budget: n >= 1, the number of draft tokens (tree nodes besides the root).
        gain_threshold: delta >= 0, stop growing when E[A] gains <= delta from a new layer.
        max_depth: >= 1 (default: node_budget).
        width: >= 1, the most nodes of a layer that are expanded (None: every node).

    Raises:
        TypeError / ValueError: node_budget, max_depth or width not an int >= 1; gain_threshold
        not a number >= 0.
    """
    n = check_positive_int(node_budget, "node_budget")
    check_threshold(gain_threshold)
    depth = n if max_depth is None else check_positive_int(max_depth, "max_depth")
    width = None if width is None else check_positive_int(width, "width")

    def build(draft_model, context, rand):
        draft_model = require_draft_model(draft_model, "opt_tree")

        def q_of(node):
            return draft_model.probs(context + node)

        return fixed_tree(opt_tree_structure(q_of, n, float(gain_threshold), depth, width))

    return Drafter("opt_tree", build, node_budget=n, gain_threshold=gain_threshold, max_depth=depth, width=width)


def phrase_draft(phrase: tuple[int, ...], vocab_size: int) -> Draft:
    """A `Draft` chain along `phrase` whose proposals are point masses (q = one-hot [V], exact):
    the deterministic draft of greedy, prompt-lookup and phrase drafters, shared so that every
    point-mass drafter builds the same tree.

    Args:
        phrase: token ids; vocab_size: V >= 1.
    """

    def expand(node, k):
        i = len(node)
        if i >= len(phrase):
            return (), None
        return (phrase[i],), one_hot(phrase[i], vocab_size, exact=True)

    return Draft(1, expand)


def point_mass(fn: Callable[[tuple], Sequence[int]], draft_length: int | None = None,
               vocab_size: int | None = None) -> Drafter:
    """Point-mass drafts: `fn(context) -> phrase` (n-gram / prompt lookup, lookahead, Ouroboros).

    q is one-hot on each drafted token, so token verification accepts x with probability p(x) and
    otherwise resamples from p with x removed — lossless at any temperature (docs/algorithms.md,
    "Drafting without a draft distribution"). An empty phrase drafts nothing (one token per call).

    Args:
        fn: context tuple -> sequence of token ids (truncated to draft_length when given).
        vocab_size: V, needed when there is no draft model to read it from.
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a callable context -> phrase, got {type(fn).__name__}")
    L = None if draft_length is None else check_positive_int(draft_length, "draft_length")

    def build(draft_model, context, rand):
        V = vocab_size if vocab_size is not None else getattr(draft_model, "vocab_size", None)
        if V is None:
            raise ValueError("vocab_size: point_mass needs vocab_size when no draft model is given")
        phrase = check_prefix(tuple(fn(context)), V, "phrase returned by fn")
        return phrase_draft(phrase[:L] if L is not None else phrase, V)

    return Drafter("point_mass", build, fn=fn, draft_length=L)


def greedy(draft_length: int) -> Drafter:
    """The draft model's greedy phrase (argmax chain) as a point-mass draft.

    The right way to verify greedy drafts at T > 0: q is the point mass actually sampled from, not
    the soft draft distribution (the soft-q mistake is transformers issue #32867).
    """
    L = check_positive_int(draft_length, "draft_length")

    def build(draft_model, context, rand):
        draft_model = require_draft_model(draft_model, "greedy")
        phrase: tuple[int, ...] = ()
        for _ in range(L):
            phrase += (argmax(draft_model.probs(context + phrase)),)
        return phrase_draft(phrase, draft_model.vocab_size)

    return Drafter("greedy", build, draft_length=L)


def lookup_phrase(sequence: Sequence[int], draft_length: int, max_ngram: int = 2) -> tuple[int, ...]:
    """Prompt lookup: find the latest earlier occurrence of the longest suffix n-gram
    (n = max_ngram .. 1) and return up to `draft_length` tokens that followed it; () if none."""
    seq = tuple(sequence)
    for n in range(min(max_ngram, len(seq) - 1), 0, -1):
        suffix = seq[-n:]
        for start in range(len(seq) - n - 1, -1, -1):
            if seq[start:start + n] == suffix:
                return seq[start + n:start + n + draft_length]
    return ()


def prompt_lookup(draft_length: int, max_ngram: int = 2) -> Drafter:
    """n-gram prompt-lookup drafts (point mass) from the context itself; no draft model needed."""
    L = check_positive_int(draft_length, "draft_length")
    N = check_positive_int(max_ngram, "max_ngram")
    drafter = point_mass(lambda context: lookup_phrase(context, L, N), draft_length=L)
    drafter.name = "prompt_lookup"
    drafter.params = {"draft_length": L, "max_ngram": N}
    return drafter
