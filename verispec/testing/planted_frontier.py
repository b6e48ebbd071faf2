"""Planted bugs of the newer verifiers (registered in `verispec.testing.planted.BUGS`).

Each is one real mistake, small and honest:

- `traversal_leaf_order`: traversal verification whose next leaf is the one whose prefix appeared
  first among the paths, not the next leaf in depth-first order, with every descendant's weight
  recomputed from the updated parent — the GBV authors' public `TreeVerifier.traversal_verify`
  (ported in examples/gbv_traversal_port.py). Needs L >= 2 (at L = 1 every leaf is a child of
  the root and both orders agree).
- `hsd_uncapped_last`: block verification whose whole-chain acceptance is min(1, P(X^L)/Q(X^L))
  instead of the capped weight w_L — the public HSD code (arXiv 2601.05724; see
  `verispec.reference.verifiers.hsd`). Needs L >= 2 (at L = 1 both are min(1, p/q)).
- `is_verified_against_q`: importance-sampling multi-draft verification (arXiv 2410.18234) that
  runs single-draft speculative sampling of the selected token against q instead of q_I, the law
  of the selected token (the selection skews it).
- `spechub_stale_hub_target`: SpecHub (arXiv 2411.05289) whose second hub test reads p(a) instead of
  the residual p2(a) left by the first, so the hub token is over-accepted.
- `spectr_unscaled_residual`: SpecTr's K-SEQ (arXiv 2310.15141) whose residual after K rejections
  is norm(max(p - min(q, p / rho), 0)), the one-draft residual, without the factor
  (1 - (1 - beta)^K) / beta that accounts for K chances to accept; rho itself is right.
- `hu_greedy_soft_q`: greedy draft sampling (Hu et al. 2025, arXiv 2502.18779) verified against the
  draft model's q instead of q_last, the law the one sampled draft was drawn from (q renormalised
  off the greedy drafts): the soft-q mistake of greedy drafts, in its multi-draft form.
- `block_point_mass_scalar_q`: block verification of point-mass (q = 1) drafts whose residual mass
  is computed against a scalar q = 1 for every token: only the whole phrase or nothing is
  accepted. It is lossy and accepts far less than token verification (the vLLM PR #40819
  report; see docs/multi_draft_verifiers.md). Needs L >= 2.
"""

from __future__ import annotations

import numpy as np

from ..reference import drafters
from ..reference.methods import Method
from ..reference.models import check_positive_int
from ..reference.probability import accept_probability, align, as_float, is_symbolic, residual
from ..reference.verifiers.block import block_output, last_stop, path_distributions, path_weights, stop_probability
from ..reference.verifiers.hsd import hsd_rule
from ..reference.verifiers.hu_greedy import hu_greedy_step
from ..reference.verifiers.importance import optimal_selection
from ..reference.verifiers.multidraft import spectr_rho, top_down
from ..reference.verifiers.spechub import hub_pairs, hub_proposals


def _multi(name, verify, draft_length, num_paths, drafter=drafters.iid_paths) -> Method:
    L = check_positive_int(draft_length, "draft_length")
    K = check_positive_int(num_paths, "num_paths")
    return Method(f"planted.{name}", drafter(L, K), verify, {"draft_length": L, "num_paths": K},
                  model_state_only=True)


# --------------------------------------------------------------------------------------------------
# leaf order is not depth-first


def _first_appearance_traversal(target, draft_model, context, draft, rand):
    paths = draft.paths
    nodes = list(dict.fromkeys(path[:i] for path in paths for i in range(len(path) + 1)))  # [n]
    children = {u: list(dict.fromkeys(path[len(u)] for path in paths
                                      if path[:len(u)] == u and len(path) > len(u))) for u in nodes}
    p = {u: target.probs(context + u) for u in nodes}
    q = {u: draft.proposal(u) for u in nodes if children[u]}
    weight = {(): 1}

    def recompute(below):  # weights of every node strictly below `below`, in node order
        for u in nodes:
            if len(u) > len(below) and u[:len(below)] == below and u in alive:
                weight[u] = accept_probability(p[u[:-1]][u[-1]], q[u[:-1]][u[-1]], weight[u[:-1]])

    alive = set(nodes)
    recompute(())
    leaves = [u for u in nodes if not children[u]]
    while True:
        leaf = min(leaves, key=nodes.index)  # BUG: first appearance, not depth-first order
        if leaf == () or rand.bernoulli(weight[leaf]):
            return leaf + (rand.categorical(p[leaf]),)
        parent = leaf[:-1]
        leaves.remove(leaf)
        alive.discard(leaf)
        children[parent].remove(leaf[-1])
        if not children[parent]:
            leaves.append(parent)
        excess = np.maximum(weight[parent] * p[parent] - q[parent], 0 * q[parent])  # [V]
        mass = excess.sum()
        if mass > 0:  # as the public code: weight 0 and target kept when nothing is left
            p[parent], weight[parent] = excess / mass, mass / (mass + 1 - weight[parent])
        else:
            weight[parent] = 0
        rest = q[parent].copy()
        rest[leaf[-1]] = 0
        q[parent] = rest / rest.sum() if rest.sum() > 0 else rest
        recompute(parent)


def traversal_leaf_order(draft_length: int, num_paths: int = 3) -> Method:
    """Traversal verification (arXiv 2505.12398) on K i.i.d. paths that takes the next leaf in
    order of first appearance of its prefix among the paths, not depth-first, and recomputes every
    descendant's weight from the updated parent (the GBV authors' `traversal_verify`). Paths ab, cd,
    ae: rejecting cd and then c updates the root and recomputes a from it, dropping a's own update
    from rejecting ab; the rule over-accepts. Needs L >= 2 and K >= 3."""
    return _multi("traversal_leaf_order", _first_appearance_traversal, draft_length, num_paths)


# --------------------------------------------------------------------------------------------------
# HSD's uncapped whole-chain acceptance


def _hsd_verify(target, draft_model, context, draft, rand):
    path = draft.paths[0]
    ps, qs = path_distributions(target, context, path, draft.proposal)
    return hsd_rule(ps, qs, path, rand, uncapped_last=True)


def hsd_uncapped_last(draft_length: int) -> Method:
    """Block verification (arXiv 2403.10444) that accepts the whole chain with the UNCAPPED joint
    ratio min(1, P(X^L) / Q(X^L)) instead of w_L = P(X^L) / (Q(X^L) max(1, r_1..r_L)) — exactly
    the public HSD code (arXiv 2601.05724). Needs L >= 2."""
    L = check_positive_int(draft_length, "draft_length")
    return Method("planted.hsd_uncapped_last", drafters.chain(L), _hsd_verify, {"draft_length": L},
                  model_state_only=True)


# --------------------------------------------------------------------------------------------------
# importance sampling verified against q


def _is_against_q(target, draft_model, context, draft, rand):
    node = ()
    while True:
        counts = draft.counts(node)
        if not counts:
            return node + (rand.categorical(target.probs(context + node)),)
        p, q = align(target.probs(context + node), draft.proposal(node))  # [V], [V]
        drafted = tuple(sorted(counts))
        select, _ = optimal_selection(p, q, sum(counts.values()))
        y = drafted[rand.categorical(select[drafted])]
        if not rand.bernoulli(accept_probability(p[y], q[y])):  # BUG: q, not the selection law q_I
            y = rand.categorical(residual(p, q))
        node = node + (y,)
        if y not in counts:
            return node


def is_verified_against_q(draft_length: int, num_paths: int = 2) -> Method:
    """Importance-sampling multi-draft verification (Khisti et al., arXiv 2410.18234) whose
    single-draft step tests the selected token against the draft law q instead of q_I, the law of
    the SELECTED token (selection among K drafts skews it towards the preferred tokens)."""
    return _multi("is_verified_against_q", _is_against_q, draft_length, num_paths)


# --------------------------------------------------------------------------------------------------
# SpecHub's second hub test reads a stale target


def _spechub_stale_step(p, q, drafts, rand):
    if len(drafts) == 1:
        x = drafts[0]
        return x if rand.bernoulli(accept_probability(p[x], q[x])) else rand.categorical(residual(p, q))
    first, second = drafts
    a, q_ia, q_ai = hub_proposals(q)
    zero = q[0] * 0
    hub_second = second == a
    if hub_second and rand.bernoulli(accept_probability(p[first], q_ia[first])):
        return first
    p1 = np.maximum(p - q_ia, zero)  # [V]
    p1[a] = p[a]
    r_ia = np.maximum(q_ia - p, zero)
    r_ia[a] = zero
    if not hub_second and rand.bernoulli(accept_probability(p1[second], q_ai[second])):
        return second
    p2 = np.maximum(p1 - q_ai, zero)  # [V]
    r_ai = np.maximum(q_ai - p1, zero)
    r_ai[a] = zero
    if not hub_second and rand.bernoulli(accept_probability(p[a], r_ai.sum())):
        return a
    p2[a] = max(p[a] - r_ai.sum(), zero)
    if hub_second and rand.bernoulli(accept_probability(p[a], r_ia.sum())):  # BUG: p(a), not p2(a)
        return a
    p2[a] = max(p2[a] - r_ia.sum(), zero)
    return rand.categorical(p2 / p2.sum() if p2.sum() > 0 else p)


def spechub_stale_hub_target(draft_length: int) -> Method:
    """SpecHub (arXiv 2411.05289) whose hub test for the pair (i, a) compares against p(a) instead
    of the residual left after the (a, i) pairs took their share of a: the hub is over-accepted."""
    L = check_positive_int(draft_length, "draft_length")
    return Method("planted.spechub_stale_hub_target", hub_pairs(L), top_down(_spechub_stale_step),
                  {"draft_length": L, "num_paths": 2}, model_state_only=True)


# --------------------------------------------------------------------------------------------------
# greedy draft sampling verified against the draft model's q

def _hu_greedy_soft_q(target, draft_model, context, draft, rand):
    node = ()
    while True:
        drafted = draft.counts(node)
        if not drafted:
            return node + (rand.categorical(target.probs(context + node)),)  # bonus token
        # BUG: the draft model's q, not draft.proposal(node) = q_last (q renormalised off the greedy drafts)
        p, q = align(target.probs(context + node), draft_model.probs(context + node))  # [V], [V]
        y = hu_greedy_step(p, q, draft.tokens(node), rand)
        node = node + (y,)
        if y not in drafted:
            return node


def hu_greedy_soft_q(draft_length: int, num_paths: int = 2) -> Method:
    """Greedy draft sampling (Hu et al. 2025, arXiv 2502.18779; `drafters.greedy_draft_paths`)
    whose verifier tests the sampled draft x with min(1, p(x) / q(x)) and draws the correction
    from norm(max(p - q, 0)) with the draft model's q, instead of q_last = norm(q off the greedy
    drafts), the law x was drawn from. Lossy at V = 2, K = 2: with q(o) > p(o) for the non-greedy
    token o, o comes out with probability p(o) / q(o) instead of p(o)."""
    return _multi("hu_greedy_soft_q", _hu_greedy_soft_q, draft_length, num_paths, drafters.greedy_draft_paths)


# --------------------------------------------------------------------------------------------------
# block verification of point-mass drafts with the scalar q = 1 fallback


def _block_scalar_q(target, draft_model, context, draft, rand):
    path = draft.paths[0]
    ps, qs = path_distributions(target, context, path, draft.proposal)
    L = len(path)
    w = path_weights(ps, qs, path)
    # BUG: the residual mass Z_i is computed against the scalar fallback q(x) = 1 for every x
    # (only q(X_i) = 1 is known for a point-mass draft), so Z_i = 0 and h_i = 0 for i < L.
    tau = last_stop(L, lambda i: w[L] if i == L else stop_probability(ps[i], ps[i] * 0 + 1, w[i]), rand)
    return block_output(ps, qs, path, w, tau, rand)


def block_point_mass_scalar_q(draft_length: int) -> Method:
    """Block verification (arXiv 2403.10444) of point-mass drafts (the draft model's greedy
    phrase, q = one-hot) whose residual mass Z_i = sum_x max(w_i p(x) - q(x), 0) uses the scalar
    fallback q = 1.0 for every token (drafters without probabilities supply only q(X_i) = 1; vLLM
    PR #40819's gating and vllm-ascend #7603 describe this fallback). Then h_i = 0 below L: only
    the whole phrase (probability P(X^L)) or nothing is accepted. Needs L >= 2."""
    L = check_positive_int(draft_length, "draft_length")
    return Method("planted.block_point_mass_scalar_q", drafters.greedy(L), _block_scalar_q,
                  {"draft_length": L}, model_state_only=True)


# --------------------------------------------------------------------------------------------------
# SpecTr's residual without the K-draft scale

def _spectr_unscaled_step(p, q, drafts, rand):
    if not (is_symbolic(p) or is_symbolic(q)):
        p, q = as_float(p), as_float(q)  # as spectr_step: rho is a float64 root
    rho = spectr_rho(p, q, len(drafts))
    for x in drafts:
        if rand.bernoulli(min(1, p[x] / (rho * q[x]))):
            return x
    # BUG: K-SEQ's residual is p - min(q, p/rho) (1 - (1 - beta)^K) / beta; this is the 1-draft one.
    return rand.categorical(residual(p, q.clip(max=p / rho)))


def spectr_unscaled_residual(draft_length: int, num_paths: int = 2) -> Method:
    """SpecTr K-SEQ (Sun et al. 2023, arXiv 2310.15141, Algorithm 3) on K i.i.d. paths whose
    correction token after K rejections is drawn from norm(max(p - min(q, p / rho), 0)) instead of
    norm(max(p - min(q, p / rho) (1 - (1 - beta)^K) / beta, 0)): the single-draft residual, which
    ignores that each of the K drafts had a chance. Lossy for K >= 2: at p = (1/2, 1/2), q = (1, 0),
    K = 2 (rho = 1 / (2 - sqrt 2)) the first token comes out with probability 1 - sqrt(2)/4 ~ 0.646
    instead of 1/2. Computes in float64 for numbers, like `spectr`; symbolically (rho a solver
    variable) under `verispec prove`."""
    return _multi("spectr_unscaled_residual", top_down(_spectr_unscaled_step), draft_length, num_paths)


#: {name: factory(draft_length) -> Method} of the bugs above.
BUGS = {
    "traversal_leaf_order": traversal_leaf_order,
    "hsd_uncapped_last": hsd_uncapped_last,
    "is_verified_against_q": is_verified_against_q,
    "spechub_stale_hub_target": spechub_stale_hub_target,
    "block_point_mass_scalar_q": block_point_mass_scalar_q,
    "spectr_unscaled_residual": spectr_unscaled_residual,
    "hu_greedy_soft_q": hu_greedy_soft_q,
}

#: The smallest draft length at which each bug can show (the others show at L = 1).
MIN_DRAFT_LENGTH = {"traversal_leaf_order": 2, "hsd_uncapped_last": 2, "block_point_mass_scalar_q": 2}
