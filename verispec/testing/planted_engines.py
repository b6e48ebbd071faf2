"""Planted bugs transcribed from serving engines' issue trackers (`verispec.testing.planted.ENGINES`).

Each is one real mistake in a real engine, kept small and rational so that `verispec prove` runs it
symbolically:

- `block_tokenwise_accept` (vllm-ascend issue #7807, fixed by PR #7808): the "block verify" path
  keeps block verification's structure (the accepted prefix ends at the LAST position whose test
  passes) but runs the token-wise test min(1, p/q) at each position instead of block
  verification's stop probabilities h_i, and draws the correction token from the token-level
  residual norm(max(p - q, 0)) instead of block verification's norm(max(w_tau p - q, 0)). Lossless
  at L = 1 (it is then token verification); lossy from L = 2.
- `tempered_draft_raw_q` (transformers issue #47932, candidate generators returning a q they did
  not sample from): draft tokens are drawn from the processed draft law (here the draft at
  temperature 1/2, q^2 / sum q^2), while the verifier is handed the unprocessed q for the ratio
  p/q and the residual. Lossy at V = 2, L = 1.

Block verification: Sun et al. 2024 (arXiv 2403.10444); token verification: Leviathan et al. 2023
(arXiv 2211.17192).
"""

from __future__ import annotations

from fractions import Fraction

from ..reference import drafters
from ..reference.methods import Method
from ..reference.models import check_positive_int
from ..reference.probability import accept_probability, align, residual
from ..reference.verifiers.block import path_distributions
from ._internal.chains import processed_chain

__all__ = ["BUGS", "MIN_DRAFT_LENGTH", "block_tokenwise_accept", "tempered_draft_raw_q", "tempered_proposal"]


def _chain_method(name, verify, draft_length, drafter=None, **extra) -> Method:
    L = check_positive_int(draft_length, "draft_length")
    return Method(f"planted.{name}", drafter or drafters.chain(L), verify, {"draft_length": L, **extra},
                  model_state_only=True)


# --------------------------------------------------------------------------------------------------
# vllm-ascend #7807: block verification with the token-wise test and the token-level residual


def _block_tokenwise_rule(ps, qs, path, rand) -> tuple:
    """tau = the last position i whose test passes, each test Bernoulli(min(1, p_i(X_i) / q_i(X_i)))
    (BUG: block verification's test is h_i, built from the weights w_i); then X^tau followed by a
    bonus token ~ p (tau = L) or a correction ~ norm(max(p - q, 0)) at X^tau (BUG: not w_tau p)."""
    L = len(path)
    tau = 0
    for i in range(L, 0, -1):  # from the end: the first success is the last passing position
        if rand.bernoulli(accept_probability(ps[i - 1][path[i - 1]], qs[i - 1][path[i - 1]])):
            tau = i
            break
    if tau == L:
        return tuple(path) + (rand.categorical(ps[L]),)
    return tuple(path[:tau]) + (rand.categorical(residual(ps[tau], qs[tau])),)


def _block_tokenwise_verify(target, draft_model, context, draft, rand):
    path = draft.paths[0]
    ps, qs = path_distributions(target, context, path, draft.proposal)
    return _block_tokenwise_rule(ps, qs, path, rand)


def block_tokenwise_accept(draft_length: int) -> Method:
    """Block verification (arXiv 2403.10444) whose per-position test is the token-wise
    min(1, p/q) and whose correction is the token-level residual (vllm-ascend issue #7807: "uses
    the same acceptance criteria as the token-wise algorithm and does not adjust the distribution";
    fixed by PR #7808).

    The engine's kernel compared the running weight min(1, w p/q) with a running PRODUCT of
    uniforms, whose law has log terms; this transcription keeps the two mistakes the issue names
    (token-wise test per position, token-level residual) with one independent test per position, as
    block verification draws them, so its law is rational. Lossless at L = 1; needs L >= 2.
    """
    return _chain_method("block_tokenwise_accept", _block_tokenwise_verify, draft_length)


# --------------------------------------------------------------------------------------------------
# transformers #47932: drafts drawn from the processed q, the verifier handed the raw q


def tempered_proposal(q, power: int = 2):
    """The draft law at temperature 1 / power, q^power / sum q^power -> [V] (exact for Fractions)."""
    powered = q ** power  # [V]
    return powered / powered.sum()


def _raw_q_verify(target, draft_model, context, draft, rand):
    """Token verification whose q is the draft model's raw conditional (BUG: the tokens were drawn
    from `draft.proposal`, the processed law)."""
    node = ()
    while draft.counts(node):
        x = draft.tokens(node)[0]
        p, q = align(target.probs(context + node), draft_model.probs(context + node))  # [V], [V]
        if not rand.bernoulli(accept_probability(p[x], q[x])):
            return node + (rand.categorical(residual(p, q)),)
        node = node + (x,)
    return node + (rand.categorical(target.probs(context + node)),)


def tempered_draft_raw_q(draft_length: int, power: int = 2) -> Method:
    """Draft tokens drawn from the draft at temperature 1 / power (a logits processor applied to the
    draft), verified with the unprocessed q in p/q and the residual (transformers issue #47932:
    "candidate generators return a q they did not sample from, breaking losslessness with
    do_sample=True"). Lossy at V = 2, L = 1 whenever q is not uniform or one-hot."""
    power = check_positive_int(power, "power", minimum=2)
    return _chain_method("tempered_draft_raw_q", _raw_q_verify, draft_length,
                         drafter=processed_chain("tempered_chain", draft_length, lambda q: tempered_proposal(q, power),
                                                  temperature=Fraction(1, power)), power=power)


#: {name: factory(draft_length) -> Method}: bugs transcribed from engines' issue trackers.
BUGS = {"block_tokenwise_accept": block_tokenwise_accept, "tempered_draft_raw_q": tempered_draft_raw_q}

#: {bug name: smallest draft length at which it is lossy} (1 when absent).
MIN_DRAFT_LENGTH = {"block_tokenwise_accept": 2}
