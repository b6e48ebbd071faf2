"""A drafting policy that maximises expected tokens per second under measured costs, and its
reference twins.

The throughput of a speculative decoder is E[tokens per iteration] / E[seconds per iteration]
(renewal-reward). Per iteration the policy chooses how much to draft from the draft model's own
probabilities and a `verispec.reference.costs.CostModel`:

- **Chains** (`keeps_drafting`): after drafting X_1..X_d, each with an acceptance estimate
  a_i = g(q(X_i | prefix)) (the draft's probability of the token it drew, through a `Calibration`
  g; q(x) is what the draft itself believes of x), the expected tokens of stopping now are
  E_d = 1 + sum_{k<=d} prod_{i<=k} a_i (Leviathan et al. 2023, arXiv 2211.17192, eq. 1, with
  position-dependent rates) at the price C(d) = `CostModel.chain_seconds(d, n)`. Draft one more
  token iff some j >= 1 more tokens, each predicted accepted with a_d (the latest estimate),
  raise the ratio: (E_d + P_d sum_{k=1..j} a_d^k) / C(d + j) > E_d / C(d), P_d = prod a_i.
  This is SpecDec++'s stop (Huang et al. 2024, arXiv 2405.19715: stop when the predicted chance
  of a rejection is too high) with the threshold set by the measured costs instead of a
  constant, and AdaEDL's early stop (Agrawal et al. 2024, arXiv 2410.18351) with the draft's
  probability of its token in place of an entropy bound. Whether to draft on is a function of
  the drafted prefix only, so token verification stays exact (a stopping time of the chain).
- **Paths of fixed length** (`planned_length`): the length L of an iteration's K paths is chosen
  before any draw, from a running acceptance rate and the costs: every rule proved for a fixed L
  stays lossless, since L is a function of the context only.
- **Trees** (`best_budget`): OPT-Tree (Wang et al. 2024, arXiv 2406.17276) maximises E[A], the
  sum of the n largest path weights W (products of draft probabilities), at a fixed node budget
  n; here the budget is chosen per iteration as the m <= n maximising (1 + rho sum_{i<=m} W_(i)) /
  (draft seconds + target seconds of 1 + m rows) (rho: a calibration of W; EAGLE-2's dynamic
  trees, Li et al. 2024, arXiv 2406.16858, likewise re-rank by W and keep the top m). Trees are
  verified by sample-and-follow, which never reads q: any tree chosen from the draft's
  probabilities is lossless.

Twins for the exact engine (`verispec.reference.exact`, `verispec check`, `verispec prove`):
`cost_chain` / `chain_method`, `planned_method`, `budget_tree_method`; `exact_rate` computes the
exact expected tokens and seconds of one iteration and so the predicted tokens per second of a
method under a cost model on toy models. `toy_chain` is a ready `pkg.module:attr` factory for the
command line. The torch engine's policy (`verispec.empirical.speedups.policy`) runs the same
rules and learns the calibration online between iterations (fixed before each iteration's draws,
so each iteration is one of these twins).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from numbers import Real
from typing import Callable, Sequence

from .adaptive import check_verifier, VERIFIERS, chain_draft
from .costs import CostModel, ForwardCost
from .deprecation import renamed_keywords
from .drafters import Drafter, fixed_tree, opt_tree_structure, require_draft_model
from .methods import Method
from .models import check_positive_int
from .randomness import enumerate_law
from .registry import DEPTH, POLICY, THRESHOLD, WIDTH
from .verifiers import sample_and_follow

__all__ = ["Calibration", "Rate", "expected_tokens", "keeps_drafting", "planned_length", "best_budget",
           "cost_chain", "chain_method", "planned_method", "budget_tree_method", "draft_seconds", "exact_rate",
           "TOY_COSTS", "toy_chain", "POLICIES"]

#: The values of a method's ``policy`` option: the method's own draft length / node budget, or
#: chosen per iteration by this module's rules under measured costs (the registry's `POLICY` choices).
POLICIES = POLICY.choices


@dataclass(frozen=True)
class Calibration:
    """The acceptance estimate a = g(c) of a drafted token from c = q(x), the draft's probability
    of it: g is piecewise constant on `len(values)` equal bins of [0, 1] (c in [i/m, (i+1)/m) ->
    values[i]; c = 1 in the last bin), or the identity g(c) = c when `values` is None.

    Raises:
        ValueError: values not numbers in [0, 1].
    """

    values: tuple | None = None

    def __post_init__(self):
        if self.values is not None and (not self.values or any(
                isinstance(v, bool) or not isinstance(v, Real) or not 0 <= v <= 1 for v in self.values)):
            raise ValueError(f"values: expected numbers in [0, 1], got {self.values!r}")

    @classmethod
    def prior(cls, bins: int) -> "Calibration":
        """The bin centres (2i + 1) / 2m (exact Fractions): g(c) ~ c, the start of the engine's
        online calibration."""
        m = check_positive_int(bins, "bins")
        return cls(tuple(Fraction(2 * i + 1, 2 * m) for i in range(m)))

    def __call__(self, confidence):
        if self.values is None:
            return confidence
        m, i = len(self.values), 0
        while i < m - 1 and confidence >= Fraction(i + 1, m):  # comparisons only: provable
            i += 1
        return self.values[i]


def _check_costs(costs) -> CostModel:
    if not isinstance(costs, CostModel):
        raise TypeError(f"costs: expected a verispec.reference.costs.CostModel, got {type(costs).__name__}")
    return costs


def expected_tokens(acceptance: Sequence) -> object:
    """E[tokens emitted] = 1 + sum_k prod_{i<=k} a_i when drafted token k is accepted with
    probability a_k given that every earlier one was (Leviathan et al. 2023, arXiv 2211.17192,
    eq. 1, with position-dependent rates); exact for Fractions."""
    total, run = 1, 1
    for a in acceptance:
        run = run * a
        total = total + run
    return total


def keeps_drafting(acceptance: Sequence, costs: CostModel, cache_length, max_length: int) -> bool:
    """True when drafting at least one more token after the d = len(acceptance) drafted ones is
    predicted to raise E[tokens] / seconds of the iteration (module docstring): some j in
    1..max_length - d more tokens, each accepted with the latest estimate a_d, beat stopping now.
    d = 0 (nothing drafted yet) is always True."""
    d = len(acceptance)
    if d == 0:
        return max_length > 0
    if d >= max_length:
        return False
    now_tokens, now_seconds = expected_tokens(acceptance), costs.chain_seconds(d, cache_length)
    survive, gain, a = 1, 0, acceptance[-1]
    for x in acceptance:
        survive = survive * x
    for j in range(1, max_length - d + 1):
        survive = survive * a
        gain = gain + survive
        if (now_tokens + gain) * now_seconds > now_tokens * costs.chain_seconds(d + j, cache_length):
            return True
    return False


def planned_length(acceptance, num_paths: int, costs: CostModel, cache_length, max_length: int) -> int:
    """The L in 1..max_length maximising E[tokens] / `CostModel.chain_seconds(L, n, K)` for K
    paths whose tokens are each accepted with probability `acceptance` independently: E = 1 +
    sum_{k<=L} (1 - (1 - a^k)^K) (some path survives k tokens). Ties go to the shorter L."""
    best, best_value = 1, None
    tokens = 1
    for L in range(1, max_length + 1):
        tokens = tokens + 1 - (1 - acceptance ** L) ** num_paths
        value = (tokens, costs.chain_seconds(L, cache_length, num_paths))
        if best_value is None or value[0] * best_value[1] > best_value[0] * value[1]:
            best, best_value = L, value
    return best


def best_budget(weights: Sequence, costs: CostModel, cache_length, layers: int, scale=1) -> int:
    """The m in 1..len(weights) maximising (1 + scale sum_{i<=m} w_i) / `CostModel.tree_seconds`
    ([1] * layers, m, n): `weights` are the tree's node weights W in decreasing order (the top m
    of them form a subtree), `layers` the draft forwards the tree took, each priced as one row.
    Ties go to the smaller m."""
    best, best_value, total = 1, None, 0
    for m, w in enumerate(weights, start=1):
        total = total + w
        value = (1 + scale * total, costs.tree_seconds([1] * layers, m, cache_length))
        if best_value is None or value[0] * best_value[1] > best_value[0] * value[1]:
            best, best_value = m, value
    return best


# --------------------------------------------------------------------------------------------
# Reference twins
# --------------------------------------------------------------------------------------------

def cost_chain(max_length: int, costs: CostModel, calibration: Calibration | None = None) -> Drafter:
    """A draft-model chain of at most `max_length` tokens cut by `keeps_drafting` (the cache length
    is the context's length): the reference twin of ``adaptive:pol=auto`` / ``hybrid`` chains.

    Raises:
        TypeError / ValueError: max_length not an int >= 1, costs not a CostModel, calibration not
        a Calibration.
    """
    M = check_positive_int(max_length, "max_length")
    _check_costs(costs)
    g = Calibration() if calibration is None else calibration
    if not isinstance(g, Calibration):
        raise TypeError(f"calibration: expected a Calibration, got {type(g).__name__}")

    def build(draft_model, context, rand):
        model = require_draft_model(draft_model, "cost_chain")

        def leaf(node):
            rates = [g(model.probs(context + node[:i])[node[i]]) for i in range(len(node))]
            return not keeps_drafting(rates, costs, len(context), M)

        return chain_draft(model, context, rand, M, leaf)

    return Drafter("cost_chain", build, draft_length=M)


def chain_method(max_length: int, costs: CostModel, calibration: Calibration | None = None,
                 verifier: str = "token") -> Method:
    """`cost_chain` + token (default) or block verification (``verispec.reference.adaptive.VERIFIERS``).

    Raises:
        TypeError / ValueError: as `cost_chain`; a verifier not in VERIFIERS.
    """
    rule = check_verifier(verifier)
    return Method("policy_chain", cost_chain(max_length, costs, calibration), VERIFIERS[rule],
                  {"draft_length": max_length, "verifier": rule}, model_state_only=True)


def planned_method(factory: Callable[[int], Method], max_length: int, costs: CostModel, acceptance,
                   num_paths: int = 1) -> Method:
    """The method `factory(L)` at the L `planned_length` picks for the context (its cache length
    = the context's length) from `acceptance`: the reference twin of a fixed-length method under
    ``pol=auto``. `factory(L)` must return Methods whose verifier does not depend on L (every
    built-in path method: ``lambda L: methods.get("gbv", draft_length=L, num_paths=2)``).

    Raises:
        TypeError / ValueError: bad max_length / num_paths / costs; acceptance outside [0, 1].
    """
    M, K = check_positive_int(max_length, "max_length"), check_positive_int(num_paths, "num_paths")
    _check_costs(costs)
    if isinstance(acceptance, bool) or not isinstance(acceptance, Real) or not 0 <= acceptance <= 1:
        raise ValueError(f"acceptance: expected a number in [0, 1], got {acceptance!r}")
    built = {L: factory(L) for L in range(1, M + 1)}
    first = built[1]

    def draft(draft_model, context, rand):
        return built[planned_length(acceptance, K, costs, len(context), M)].draft(draft_model, context, rand)

    return Method(f"planned_{first.name}", draft, first.verify, {"draft_length": M, "num_paths": K},
                  model_state_only=True)


@renamed_keywords(threshold="gain_threshold")
def budget_tree_method(node_budget: int, costs: CostModel, scale=1, max_depth: int = DEPTH.default,
                       gain_threshold: float = THRESHOLD.default, width: int | None = WIDTH.default) -> Method:
    """OPT-Tree (`drafters.opt_tree_structure` at budget n, `width` nodes expanded per layer) cut
    to the `best_budget` top-W nodes, with sample-and-follow: the reference twin of
    ``opt_tree:pol=auto`` (layers = the tree's depth before the cut, the draft forwards the torch
    drafter spends; `scale` its calibration rho).

    Raises:
        TypeError / ValueError: node_budget / max_depth / width not ints >= 1, costs not a CostModel.
    """
    n, depth = check_positive_int(node_budget, "node_budget"), check_positive_int(max_depth, "max_depth")
    width = None if width is None else check_positive_int(width, "width")
    _check_costs(costs)

    def draft(draft_model, context, rand):
        model = require_draft_model(draft_model, "budget_tree")

        def q_of(node):
            return model.probs(context + node)

        children = opt_tree_structure(q_of, n, gain_threshold, depth, width)
        weights = _tree_weights(children, q_of)
        order = sorted(weights, key=lambda u: (-weights[u], len(u), u))  # a subtree at every cut
        layers = max(len(u) for u in order)
        m = best_budget([weights[u] for u in order], costs, len(context), layers, scale)
        kept: dict = {}
        for u in order[:m]:
            kept.setdefault(u[:-1], []).append(u[-1])
        return fixed_tree(kept)

    return Method("budget_tree", draft, sample_and_follow, {"node_budget": n, "max_depth": depth, "width": width},
                  model_state_only=True)


def _tree_weights(children: dict, q_of) -> dict:
    """{node: W = product of draft probabilities on its root path} of the tree `children`."""
    weights, stack = {}, [((), 1)]
    while stack:
        node, w = stack.pop()
        q = q_of(node) if children.get(node) else None
        for t in children.get(node, ()):
            weights[node + (t,)] = w * q[t]
            stack.append((node + (t,), w * q[t]))
    return weights


# --------------------------------------------------------------------------------------------
# Exact expected tokens and seconds per iteration
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rate:
    """One iteration's exact expectations under a cost model: tokens (E[tau] + 1), seconds, and
    their ratio tokens_per_second (the long-run rate of repeating that iteration, renewal-reward)."""

    tokens: object
    seconds: object

    @property
    def tokens_per_second(self):
        return self.tokens / self.seconds


def draft_seconds(draft, costs: CostModel, cache_length) -> object:
    """Seconds of the iteration that drafted `draft` (a fully expanded `Draft`): one draft forward
    per depth d with nodes that have children (the nodes of that depth as its rows; depth 0, the
    root, one row), then the target forward of 1 + (number of nodes) rows, plus the overhead."""
    nodes_at: dict[int, int] = {}
    parents_at: dict[int, int] = {}
    stack = [()]
    while stack:
        node = stack.pop()
        kids = draft.child_set(node)
        if kids:
            parents_at[len(node)] = parents_at.get(len(node), 0) + 1
        for t in kids:
            nodes_at[len(node) + 1] = nodes_at.get(len(node) + 1, 0) + 1
            stack.append(node + (t,))
    return costs.tree_seconds([parents_at[d] for d in sorted(parents_at)], sum(nodes_at.values()), cache_length)


def exact_rate(target, draft, method: Method, costs: CostModel, context=()) -> Rate:
    """The exact E[tokens emitted] and E[seconds] of ONE iteration of `method` from `context`
    (every random choice enumerated, the draft drawn in full as the torch engine drafts it, then
    priced by `draft_seconds` at cache length len(context)).

    Raises:
        TypeError: costs not a CostModel; as `verispec.reference.exact` for the rest.
    """
    _check_costs(costs)
    context = tuple(context)
    seen = []

    def run(rand):
        seen.clear()
        out = method.step(target, draft, context, rand, observe=seen.append)
        return len(out), draft_seconds(seen[0], costs, len(context))

    law = enumerate_law(run).law
    tokens = sum((p * k for (k, _), p in law.items()), 0)
    seconds = sum((p * s for (_, s), p in law.items()), 0)
    return Rate(tokens, seconds)


#: A toy cost model for exact checks on toy models (not a measurement): a draft forward costs
#: 1/5 of a one-row target forward whatever its rows; a target forward of r rows costs
#: 1 + (r - 1)/4; no dependence on the cache length. Exact Fractions, so `verispec prove` can
#: run `toy_chain`.
TOY_COSTS = CostModel(ForwardCost((1,), (Fraction(1, 5),), (0,)),
                      ForwardCost((1, 2), (Fraction(1), Fraction(5, 4)), (0, 0)))


def toy_chain(draft_length: int = 2) -> Method:
    """`chain_method(draft_length, TOY_COSTS)` with token verification, for the command line:
    ``verispec check --method verispec.reference.policy:toy_chain`` and ``verispec prove
    verispec.reference.policy:toy_chain --vocab-size 2 --draft-length 2``."""
    return chain_method(draft_length, TOY_COSTS)
