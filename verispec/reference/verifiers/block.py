"""Block verification (Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami, Suresh 2024,
arXiv 2403.10444, Algorithm 2), in the notation of docs/algorithms.md.

Weights w_0 = 1, w_i = min(1, w_{i-1} p_i(X_i) / q_i(X_i)). For i < L,
Z_i = sum_x max(w_i p(x | X^i) - q(x | X^i), 0) and h_i = Z_i / (Z_i + 1 - w_i) (1 if the
denominator is 0); h_L = w_L. With one uniform eta_i per position, tau = the LAST i with
eta_i <= h_i (0 if none). Y ~ p(. | X^L) if tau = L, else Y ~ norm(max(w_tau p(. | X^tau) -
q(. | X^tau), 0)). BV attains the information-agnostic LP optimum (Thomas & Pal 2026,
arXiv 2602.16961).
"""

from __future__ import annotations

from ..probability import accept_probability, align, positive_mass, residual


def stop_probability(p_next, q_next, w):
    """h_i = Z_i / (Z_i + 1 - w_i) for i < L, with Z_i the residual mass at X^i (1 if 0/0).

    h = 1 exactly when w = 1; computing Z / (Z + 1 - 1) in float64 can round to 1 - 2^-53 and
    open a spurious branch (e.g. traversal's root, whose weight is 1 by construction).
    """
    if w == 1:
        return 1
    z = positive_mass(p_next, q_next, w)
    denominator = z + (1 - w)
    return 1 if denominator == 0 else z / denominator


def block_rule(ps, qs, path, rand) -> tuple[int, ...]:
    """The block verification rule on one path.

    Args:
        ps: L + 1 target distributions [V]: ps[i] = p(. | X^i), i = 0..L.
        qs: L proposal distributions [V]: qs[i] = q(. | X^i), i = 0..L-1.
        path: the drafted tokens X_1..X_L.
        rand: `Randomness`.

    Returns:
        X_1..X_tau followed by the correction (tau < L) or bonus (tau = L) token.
    """
    L = len(path)
    w = path_weights(ps, qs, path)
    tau = last_stop(L, lambda i: w[L] if i == L else stop_probability(ps[i], qs[i], w[i]), rand)
    return block_output(ps, qs, path, w, tau, rand)


def path_weights(ps, qs, path) -> list:
    """[w_0 = 1, w_1, ..., w_L]: w_i = min(1, w_{i-1} p_i(X_i) / q_i(X_i)) (`block_rule`'s args)."""
    w = [1]
    for i in range(len(path)):
        w.append(accept_probability(ps[i][path[i]], qs[i][path[i]], w[i]))
    return w


def last_stop(L, h, rand) -> int:
    """tau = the LAST i in 1..L with eta_i <= h(i) (0 if none), drawing eta_L, eta_{L-1}, ...: the
    first success from the end is the last one, so no draw below it is made."""
    for i in range(L, 0, -1):
        if rand.bernoulli(h(i)):
            return i
    return 0


def block_output(ps, qs, path, w, tau, rand) -> tuple[int, ...]:
    """X_1..X_tau, then the bonus token ~ p(. | X^L) (tau = L) or the correction token ~
    norm(max(w_tau p(. | X^tau) - q(. | X^tau), 0))."""
    if tau == len(path):
        return tuple(path) + (rand.categorical(ps[tau]),)  # bonus token
    return tuple(path[:tau]) + (rand.categorical(residual(ps[tau], qs[tau], w[tau])),)


def path_distributions(target, context, path, proposal):
    """(ps, qs) along `path`: ps[i] = p(. | context + X^i) (i = 0..L), qs[i] = proposal(X^i)."""
    ps, qs = [], []
    for i in range(len(path)):
        p, q = align(target.probs(context + tuple(path[:i])), proposal(tuple(path[:i])))
        ps.append(p)
        qs.append(q)
    ps.append(target.probs(context + tuple(path)))
    return ps, qs


def block_verify(target, draft_model, context, draft, rand) -> tuple[int, ...]:
    """Block verification of the first path of `draft` (q read from `draft.proposal`)."""
    path = draft.paths[0]
    ps, qs = path_distributions(target, context, path, draft.proposal)
    return block_rule(ps, qs, path, rand)
