"""One-step multi-draft rules, applied top-down at each node of the draft tree.

At a node with drafted next tokens x_1..x_k (one per path through it, duplicates kept), a
one-step rule emits a token Y whose law is p. If Y is a drafted child the walk enters that child
and continues; otherwise Y is the correction token and the iteration ends. At a leaf the bonus
token Y ~ p is emitted. Sources:

- nss: naive (SpecInfer paper, Miao et al. 2024, arXiv 2305.09781): Y ~ p.
- rrs: recursive rejection sampling (SpecInfer, arXiv 2305.09781, Algorithm 2).
- rrsw: rrs without replacement (Jeon et al. 2024, arXiv 2402.14160; Sequoia).
- spectr: K-SEQ (Sun et al. 2023, "SpecTr", arXiv 2310.15141, Algorithm 3).
"""

from __future__ import annotations

import functools

import numpy as np

from ..deprecation import renamed_keywords
from ..probability import accept_probability, align, as_float, is_symbolic, residual


def nss_step(p, q, drafts, rand) -> int:
    """Naive sampling: Y ~ p; it is 'accepted' exactly when it is among the drafts."""
    return rand.categorical(p)


def rrs_step(p, q, drafts, rand) -> int:
    """Recursive rejection sampling with i.i.d. drafts: p' = p; for each x_k accept with
    probability min(1, p'(x_k)/q(x_k)), else p' <- norm(max(p' - q, 0)); if none, Y ~ p'."""
    current = p
    for x in drafts:
        if rand.bernoulli(accept_probability(current[x], q[x])):
            return x
        current = residual(current, q)
    return rand.categorical(current)


def rrsw_step(p, q, drafts, rand) -> int:
    """RRS without replacement: as rrs, but after rejecting x_k also set q(x_k) = 0 and
    renormalise q (drafts are distinct draws without replacement)."""
    current, proposal = p, q
    for x in drafts:
        if rand.bernoulli(accept_probability(current[x], proposal[x])):
            return x
        current = residual(current, proposal)
        proposal = proposal.copy()
        proposal[x] = 0
        if proposal.sum() > 0:
            proposal = proposal / proposal.sum()
    return rand.categorical(current)


@renamed_keywords(num_drafts="num_paths")
def spectr_rho(p, q, num_paths: int) -> float:
    """rho in [1, K] solving 1 - (1 - beta(rho))^K = rho beta(rho), beta(rho) = sum min(q, p/rho).

    Bisection on f(rho) = 1 - (1 - beta)^K - rho beta (f(1) >= 0 >= f(K)); returns the upper end,
    where f <= 0, which is what losslessness needs: the residual stays non-negative. Memoised on
    the bytes of (p, q), since the enumerator replays the same node many times.

    Symbolic p or q (`verispec prove`): the bisection has no meaning there, so the symbolic value's
    own type computes rho (its ``spectr_rho`` hook: a solver variable constrained by its defining
    equation); the reference imports nothing of the prover. TypeError when no entry's type has one.
    """
    if is_symbolic(p) or is_symbolic(q):
        for value in (*np.asarray(p).flat, *np.asarray(q).flat):
            hook = getattr(type(value), "spectr_rho", None)
            if hook is not None:
                return hook(p, q, num_paths)
        raise TypeError("spectr_rho: p and q hold non-rational entries of no type with a spectr_rho hook")
    p, q = as_float(p), as_float(q)
    return _spectr_rho(p.tobytes(), q.tobytes(), int(num_paths))


@functools.lru_cache(maxsize=65536)
def _spectr_rho(p_bytes: bytes, q_bytes: bytes, num_paths: int, iterations: int = 200) -> float:
    p, q = np.frombuffer(p_bytes), np.frombuffer(q_bytes)
    K = num_paths

    def f(rho):
        beta = q.clip(max=p / rho).sum()
        return 1 - (1 - beta) ** K - rho * beta

    lo, hi = 1.0, float(K)
    if K == 1 or f(lo) <= 0:
        return lo
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if f(mid) <= 0:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-15:
            break
    return hi


def spectr_step(p, q, drafts, rand) -> int:
    """K-SEQ: accept x_k with probability min(1, p(x_k) / (rho q(x_k))) in order; else
    Y ~ norm(max(p - min(p/rho, q) (1 - (1 - beta)^K) / beta, 0))."""
    if not (is_symbolic(p) or is_symbolic(q)):
        p, q = as_float(p), as_float(q)  # rho is a float64 root: the step is float64 for numbers
    K = len(drafts)
    rho = spectr_rho(p, q, K)
    for x in drafts:
        if rand.bernoulli(min(1.0, p[x] / (rho * q[x]))):
            return x
    accepted = q.clip(max=p / rho)  # [V], min(p/rho, q)
    beta = accepted.sum()
    if beta <= 0:
        return rand.categorical(p)
    return rand.categorical(residual(p, accepted * (1 - (1 - beta) ** K) / beta))


def top_down(step, ordered: bool = True, counts: bool = False):
    """Lift a one-step rule `step(p, q, drafts, rand) -> token` to a tree verifier: at each node
    the rule emits a token; a drafted child is entered, any other token is the correction, and a
    leaf emits the bonus token from p.

    `ordered=False` declares that `step` reads only the set of drafted tokens (it then receives
    them in token order), so the enumerator never draws the order of exchangeable drafts;
    `counts=True` hands it {drafted token: paths through it} instead (a rule reading how many
    i.i.d. drafts there are, as the optimal selection does).
    """

    def verify(target, draft_model, context, draft, rand) -> tuple[int, ...]:
        node = ()
        while True:
            drafted = draft.counts(node)
            if not drafted:
                return node + (rand.categorical(target.probs(context + node)),)  # bonus token
            drafts = drafted if counts else draft.tokens(node) if ordered else tuple(drafted)
            p, q = align(target.probs(context + node), draft.proposal(node))  # [V], [V]
            y = step(p, q, drafts, rand)
            node = node + (y,)
            if y not in drafted:
                return node  # y was the correction token

    verify.__name__ = f"top_down_{step.__name__}"
    verify.__doc__ = f"Top-down tree verification with `{step.__name__}` at every node."
    return verify


nss_verify = top_down(nss_step, ordered=False)
rrs_verify = top_down(rrs_step)
rrsw_verify = top_down(rrsw_step)
spectr_verify = top_down(spectr_step)
