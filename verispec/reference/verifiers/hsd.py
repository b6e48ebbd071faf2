"""Hierarchical speculative decoding, HSD (Zhou et al. 2026, "Overcoming Joint Intractability with
Lossless Hierarchical Speculative Decoding", arXiv 2601.05724), single draft, as implemented in
its public code: ZhouYuxuanYX/Hierarchical-Speculative-Decoding at commit b8575e2,
`transformers/generation/utils.py::_speculative_sampling` with backward=True (the README's
"HSD (clever)" runs, multidraft=1). The paper's text was not reachable from here; this is a
transcription of that function, written here, and it is what "HSD" means in verispec.

On ONE drafted chain X_1..X_L ~ q, with joint ratios r_i = P(X^i) / Q(X^i) (P, Q the joint
target and draft probabilities of the prefix X^i, r_0 = 1), the code computes for i = 0..L-1

    M_i = max(1, r_1, ..., r_i)        (`previous_max`: running maximum of the joint ratio)
    d_i(x) = (P(X^i) / M_i) p(x | X^i) - Q(X^i) q(x | X^i)
    s_i = 1 - plus_i / max(plus_i, minus_i),  plus_i = sum max(d_i, 0), minus_i = sum max(-d_i, 0)

and verifies:

1. accept the whole chain with probability min(1, r_L) (`probability_ratio[-1]`); then the bonus
   token is drawn from p(. | X^L);
2. otherwise "step back" from the end: n = the LAST i in 0..L-1 with eta_i >= s_i (0 if every
   position steps back); emit X_1..X_n and a correction drawn from norm(max(d_n, 0)).

Steps (2) are block verification's (arXiv 2403.10444); step (1) accepts more than BV's capped
weight, uncompensated, so the rule is NOT lossless (see `hsd_rule`).
"""

from __future__ import annotations

from ..probability import positive_mass, residual
from .block import path_distributions


def _joint_prefixes(ps, qs, path):
    """P(X^i), Q(X^i) for i = 0..L (joint target and draft probabilities of the prefixes)."""
    one = ps[0][0] * 0 + 1  # 1 in the models' number system (int / int would give a float)
    P, Q = [one], [one]
    for i, x in enumerate(path):
        P.append(P[-1] * ps[i][x])
        Q.append(Q[-1] * qs[i][x])
    return P, Q


def capped_weights(P, Q):
    """w_i = r_i / max(1, r_1, ..., r_i) with r_i = P(X^i) / Q(X^i): the code's `new_p_previous`
    divided by Q(X^i) (joint target scaled by the running maximum of the joint ratio)."""
    weights, running = [], 1
    for Pi, Qi in zip(P, Q):
        r = Pi / Qi
        running = max(running, r)
        weights.append(r / running)
    return weights


def step_back_probability(p, q, w):
    """s_i = 1 - plus_i / max(plus_i, minus_i) of the code, with d_i = Q(X^i) (w_i p - q); the
    common factor Q(X^i) > 0 cancels. 1 when both masses are 0."""
    plus, minus = positive_mass(w * p, q), positive_mass(q, w * p)
    denominator = max(plus, minus)
    return 1 if denominator == 0 else 1 - plus / denominator


def hsd_rule(ps, qs, path, rand, uncapped_last: bool = True) -> tuple[int, ...]:
    """HSD on one path.

    What it is, exactly: w_i = r_i / M_i = min(1, w_{i-1} p_i(X_i) / q_i(X_i)) is block
    verification's weight (arXiv 2403.10444), and plus_i / minus_i = Z_i / (Z_i + 1 - w_i) is BV's
    h_i, so the step-back steps are BV's. The ONLY difference is the first step: BV accepts the
    whole chain with h_L = w_L = r_L / M_L, HSD with min(1, r_L) >= w_L, strictly larger whenever
    some earlier prefix had r_i > max(1, r_L). That extra acceptance is not compensated anywhere,
    so the rule is not lossless (exact counterexamples in tests/theory/test_new_verifiers.py) and
    its E[tau] can exceed the single-path LP optimum that BV attains.

    Args:
        ps: L + 1 target distributions [V] (ps[i] = p(. | X^i)); qs: L draft distributions [V].
        path: X_1..X_L. rand: `Randomness`.
        uncapped_last: accept the whole chain with probability min(1, P(X^L) / Q(X^L)) as the
            public code does (True); False uses the capped weight w_L like every other position,
            which makes the rule block verification step for step.

    Returns:
        the emitted tokens: accepted draft prefix followed by one more token.
    """
    L = len(path)
    P, Q = _joint_prefixes(ps, qs, path)
    w = capped_weights(P, Q)
    if rand.bernoulli(min(1, P[L] / Q[L]) if uncapped_last else w[L]):
        return tuple(path) + (rand.categorical(ps[L]),)  # bonus token
    n = 0  # the code's stop position when every position steps back
    for i in range(L - 1, -1, -1):
        if not rand.bernoulli(step_back_probability(ps[i], qs[i], w[i])):
            n = i
            break
    return tuple(path[:n]) + (rand.categorical(residual(ps[n], qs[n], w[n])),)


def hsd_verify(target, draft_model, context, draft, rand) -> tuple[int, ...]:
    """HSD as in the public code, on the first path of `draft` (q read from `draft.proposal`)."""
    path = draft.paths[0]
    ps, qs = path_distributions(target, context, path, draft.proposal)
    return hsd_rule(ps, qs, path, rand)


def hsd_capped_verify(target, draft_model, context, draft, rand) -> tuple[int, ...]:
    """HSD with the last acceptance capped like the others: block verification, step for step."""
    path = draft.paths[0]
    ps, qs = path_distributions(target, context, path, draft.proposal)
    return hsd_rule(ps, qs, path, rand, uncapped_last=False)
