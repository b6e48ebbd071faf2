"""Verification of greedy draft sampling (Hu et al. 2025, "Towards Optimal Multi-draft Speculative
Decoding", arXiv 2502.18779, ICLR 2025).

The drafts at a node are k - 1 greedy tokens G (the top of q, chosen deterministically) and ONE
token x drawn from q_last = q renormalised off G (`drafters.greedy_draft`). The paper proposes this
draft sampler with a verifier that reaches the optimal acceptance of its draft law. That optimum
follows from the transport dual (arXiv 2502.18779; SpecTr, arXiv 2310.15141):
alpha* = min over token sets H of p(H) + P(some draft outside H). Any H missing a greedy token
costs >= 1, so H contains G and the minimum is

    alpha*(G) = p(G) + sum_{y not in G} min(p(y), q_last(y))          (`closed_forms.greedy_draft_acceptance`)

The rule below reaches it: speculative sampling of x against q_last, whose residual keeps all of
p on G (q_last is zero there), so a correction that lands on a greedy token is a drafted child.

    1. accept x with probability min(1, p(x) / q_last(x))                -> emit x
    2. else Y ~ norm(max(p - q_last, 0))                               -> Y in G: a draft, accepted;
                                                                          else the correction token

Lossless: P(Y = y) = min(p(y), q_last(y)) + max(p(y) - q_last(y), 0) = p(y). Accepted with
probability sum_y min(p, q_last) + p(G) = alpha*(G). Applied top-down (`multidraft.top_down`): a
chain node (one path, no greedy token) is token-level speculative sampling against q.

Provenance: the paper's body (its pseudo-code) was not available to us, only its abstract, summaries
("greedy draft sampling ... only the last draft random ... a verification algorithm that perfectly
achieves its theoretical bound") and its public ICLR 2025 reviews. The reviews place the optimal
acceptance as the dual of the transport LP (the paper's Eq. 7) recast as subset selection (Eq. 8),
its efficient computation for drafts with and without replacement in Theorems 3 and 4, and the
greedy sampler and its verification in Section 5 (5.1 and 5.2 by one reviewer's reading). This rule
is derived from the dual above and checked exactly (docs/multi_draft_verifiers.md, "hu_greedy").
"""

from __future__ import annotations

from ..probability import accept_probability, residual
from .multidraft import top_down


def hu_greedy_step(p, q_last, drafts, rand) -> int:
    """One verification step of greedy draft sampling at a node.

    Args:
        p: target distribution [V]. q_last: the law the LAST draft was drawn from [V] (the node's
            proposal; zero on the greedy drafts). drafts: (g_1, .., g_{k-1}, x) in path order:
            the greedy tokens, then the sampled token x. rand: `Randomness`.

    Returns:
        the emitted token: x, a greedy draft (reached through the residual), or the correction.
    """
    x = drafts[-1]  # the one random draft; drafts[:-1] are greedy
    if rand.bernoulli(accept_probability(p[x], q_last[x])):
        return x
    return rand.categorical(residual(p, q_last))  # keeps p on the greedy drafts: they are accepted here


#: Top-down verification of `drafters.greedy_draft_paths` with `hu_greedy_step` at every node.
hu_greedy_verify = top_down(hu_greedy_step)
