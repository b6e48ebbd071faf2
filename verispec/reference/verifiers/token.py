"""Token-level speculative sampling (Leviathan, Kalman, Matias 2023, arXiv 2211.17192, Algorithm 1;
Chen et al. 2023, arXiv 2302.01318).

For i = 1..L accept X_i with probability min(1, p_i(X_i) / q_i(X_i)); at the first rejection emit
Y ~ norm(max(p_i - q_i, 0)) and stop; if all are accepted emit the bonus token Y ~ p_{L+1}.
"""

from __future__ import annotations

from ..probability import accept_probability, align, residual


def token_verify(target, draft_model, context, draft, rand) -> tuple[int, ...]:
    """Verify the first path of `draft` token by token.

    Args:
        target: LanguageModel p. draft_model: unused (q comes from `draft.proposal`, the law the
            drafter actually sampled from, so point-mass drafts verify correctly).
        context: tuple of token ids. draft: `Draft` (only path 0 is read). rand: `Randomness`.

    Returns:
        accepted draft tokens X_1..X_tau followed by one correction or bonus token.
    """
    node = ()
    while draft.counts(node):
        x = draft.tokens(node)[0]
        p, q = align(target.probs(context + node), draft.proposal(node))  # [V], [V]
        if not rand.bernoulli(accept_probability(p[x], q[x])):
            return node + (rand.categorical(residual(p, q)),)  # correction token
        node = node + (x,)
    return node + (rand.categorical(target.probs(context + node)),)  # bonus token
