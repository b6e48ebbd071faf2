"""Planted bugs: small, honest, broken verification rules that every lossless check must catch.

Each entry of `BUGS` is ``factory(draft_length) -> Method``: a chain method whose rule is token-level
speculative sampling (Leviathan et al. 2023, arXiv 2211.17192) with ONE mistake taken from a real
implementation (docs/testing.md, "A check must be able to fail"). Use them to show that your own check
can fail: parametrize a test over ``sorted(planted.LOSSY)`` and expect ``AssertionError`` from
``my_check(planted.BUGS[name](2))``.

All bugs but one are lossy. `block_replaced_by_token` is lossless (it is token verification) but
slower than block verification, which is the bug (vllm-ascend #7807): catch it with
`verispec.testing.assert_not_worse(bug, methods.block(L))` or `efficiency_gap`.

Which instances expose which bug (the default `assert_lossless` sweep covers all of them):

- ``bonus_off_by_one`` needs a target whose conditional depends on the prefix (Markov, random
  tree): an i.i.d. target hides it.
- ``temperature_ignored`` needs a TEMPERED target, ``models.temperature(base, T)`` with T != 1
  (the sweep's temperatures include 0 and 0.5); at T = 1 it is exact token verification.
- ``topk_draft_raw_q`` (top-k = 2) needs V >= 3: with two tokens top-2 filtering changes nothing.
- ``topk3_draft_raw_q`` (top-k = 3) needs V >= 4: a bug that needs size s is found only by
  instances larger than s.
- ``greedy_draft_soft_q`` needs a non-greedy draft model (T > 0): at T = 0 soft q is one-hot.
- ``u_zero`` differs from always-accept only when a drafted token has p(x) = 0.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..reference import drafters, exact, methods
from ..reference.drafters import Drafter
from ..reference.draftvocab import restrict
from ..reference.methods import Method
from ..reference.models import Tempered, check_positive_int
from ..reference.probability import accept_probability, align, residual
from ..reference.verifiers import token_verify
from . import planted_engines, planted_frontier, planted_narrow
from ._internal.chains import processed_chain

__all__ = ["BUGS", "ENGINES", "LOSSY", "LOSSLESS_BUT_SLOWER", "MIN_DRAFT_LENGTH", "efficiency_gap", "top_k_proposal"]


def _chain_method(name: str, verify: Callable, draft_length: int, drafter: Drafter | None = None,
                  **extra) -> Method:
    L = check_positive_int(draft_length, "draft_length")
    return Method(f"planted.{name}", drafter or drafters.chain(L), verify, {"draft_length": L, **extra},
                  model_state_only=True)


# --------------------------------------------------------------------------------------------------
# 1. always accept

def _always_accept_verify(target, draft_model, context, draft, rand):
    path = draft.paths[0]
    return path + (rand.categorical(target.probs(context + path)),)


def always_accept(draft_length: int) -> Method:
    """Accept every drafted token, then a bonus token ~ p.

    The degenerate verifier (what any rejection step that never fires amounts to); output law is
    the draft's for the first L tokens.
    """
    return _chain_method("always_accept", _always_accept_verify, draft_length)


# --------------------------------------------------------------------------------------------------
# Bugs 2-8: token-level speculative sampling with exactly one step replaced.

def _target_p(target, prefix):
    return target.probs(prefix)


def _drafted_q(draft, draft_model, context, node):
    return draft.proposal(node)  # the law the token was actually drawn from


def _rejection_test(p, q, x, rand):
    return rand.bernoulli(accept_probability(p[x], q[x]))


def _bonus_p(target, draft_model, context, node):
    return target.probs(context + node)


def _token_rule(p_at=_target_p, q_at=_drafted_q, accepts=_rejection_test, correction=residual,
                bonus_at=_bonus_p):
    """Token-level speculative sampling (Leviathan et al. 2023, arXiv 2211.17192); each planted
    bug replaces ONE of: the target law read, the draft law read, the acceptance test, the
    correction law, the bonus law."""

    def verify(target, draft_model, context, draft, rand):
        node = ()
        while draft.counts(node):
            x = draft.tokens(node)[0]
            p, q = align(p_at(target, context + node), q_at(draft, draft_model, context, node))  # [V], [V]
            if not accepts(p, q, x, rand):
                return node + (rand.categorical(correction(p, q)),)
            node = node + (x,)
        return node + (rand.categorical(bonus_at(target, draft_model, context, node)),)

    return verify


def residual_p(draft_length: int) -> Method:
    """After a rejection, resample the correction token from p instead of norm(max(p - q, 0)).

    The most common re-implementation slip of speculative sampling (the "modified rejection
    sampling" step of Leviathan et al. 2023 / Chen et al. 2023 is dropped): tokens with p > q get
    too much mass.
    """
    return _chain_method("residual_p", _token_rule(correction=lambda p, q: p), draft_length)


def bonus_from_q(draft_length: int) -> Method:
    """When all L drafts are accepted, draw the bonus token from the DRAFT model q(. | X^L)
    instead of the target p(. | X^L) (reusing the draft's next-token logits for the extra token)."""
    bonus = lambda target, draft_model, context, node: draft_model.probs(context + node)  # noqa: E731
    return _chain_method("bonus_from_q", _token_rule(bonus_at=bonus), draft_length)


def bonus_off_by_one(draft_length: int) -> Method:
    """The bonus token is drawn from the target's distribution at the wrong prefix,
    p(. | context + X^{L-1}) instead of p(. | context + X^L): an off-by-one in the logits index
    (the target returns L + 1 rows; taking row L - 1 for the bonus). Invisible on i.i.d. targets:
    needs a prefix-dependent target (Markov or random tree)."""
    bonus = lambda target, draft_model, context, node: target.probs(context + node[:-1])  # noqa: E731
    return _chain_method("bonus_off_by_one", _token_rule(bonus_at=bonus), draft_length)


def _soft_q(draft, draft_model, context, node):
    return draft_model.probs(context + node)  # BUG: not the law the drafter sampled from


def greedy_draft_soft_q(draft_length: int) -> Method:
    """Draft tokens are the draft model's argmax (greedy), but the acceptance ratio p(x)/q(x) and
    the residual use the soft draft distribution q instead of the point mass actually sampled from
    (transformers issue #32867, assisted generation with a greedy assistant and a sampling target).
    Needs a draft model at T > 0 (at T = 0 soft q is the point mass)."""
    return _chain_method("greedy_draft_soft_q", _token_rule(q_at=_soft_q), draft_length,
                         drafter=drafters.greedy(draft_length))


def top_k_proposal(q: np.ndarray, k: int) -> np.ndarray:
    """q restricted to its k most probable tokens (ties to the lower id) and renormalised -> [V]."""
    order = sorted(range(len(q)), key=lambda t: (-q[t], t))[:k]
    kept = q * 0
    for t in order:
        kept[t] = q[t]
    return kept / kept.sum()


def topk_draft_raw_q(draft_length: int, top_k: int = 2) -> Method:
    """Draft tokens are sampled from top-k-filtered q (logits processors applied to the draft), but
    the ratio p(x)/q(x) and the residual use the RAW q (transformers issue #47932). With top_k = 2
    the bug needs V >= 3 (for V = 2 top-2 filtering is the identity)."""
    return _chain_method("topk_draft_raw_q", _token_rule(q_at=_soft_q), draft_length,
                         drafter=processed_chain("top_k_chain", draft_length, lambda q: top_k_proposal(q, top_k), top_k=top_k),
                         top_k=top_k)


def _untempered(target):
    return target.base if isinstance(target, Tempered) else target


def temperature_ignored(draft_length: int) -> Method:
    """The target's sampling temperature is not applied to the probabilities used in verification
    (vLLM PR #10198): acceptance and residual use p at T = 1 although the target law is p_T.
    Modelled as reading ``target.base`` of a ``models.temperature`` wrapper.

    NEEDS a tempered target, ``models.temperature(base, T)`` with T != 1 (at T = 1 the wrapper
    changes nothing and the rule is exactly token verification)."""
    p_at = lambda target, prefix: _untempered(target).probs(prefix)  # noqa: E731
    return _chain_method("temperature_ignored", _token_rule(p_at=p_at), draft_length)


def u_zero(draft_length: int) -> Method:
    """The acceptance uniform is hard-coded to u = 0 (vllm-ascend issue #13730: the NPU kernel lacked
    a random generator): the log-space test ``log p(x) > log u + log q(x)`` is then always true
    unless p(x) = 0, so drafts are accepted without rejection sampling."""
    return _chain_method("u_zero", _token_rule(accepts=lambda p, q, x, rand: p[x] > 0), draft_length)


# --------------------------------------------------------------------------------------------------
# 9. block verification replaced by token verification (vllm-ascend #7807)

def block_replaced_by_token(draft_length: int) -> Method:
    """A method configured as block verification that actually runs the token-level rule
    (vllm-ascend #7807). Lossless, so `assert_lossless` passes; the bug is efficiency: its E[tau]
    is LOWER than block verification's on generic instances (block is optimal, arXiv 2403.10444).
    Catch it with `assert_not_worse(bug, methods.block(L))` or `efficiency_gap`."""
    return _chain_method("block_replaced_by_token", token_verify, draft_length)


def efficiency_gap(target, draft, draft_length: int, context=()):
    """E[tau](block) - E[tau](block_replaced_by_token) for one iteration from ``context``, exactly
    (Fractions for rational models). > 0 on generic instances, 0 at T = 0 and when q == p."""
    bug = block_replaced_by_token(draft_length)
    good = methods.block(draft_length)
    return (exact.expected_accepted_length(target, draft, good, context)
            - exact.expected_accepted_length(target, draft, bug, context))


def topk3_draft_raw_q(draft_length: int) -> Method:
    """`topk_draft_raw_q` with top_k = 3: drafts from top-3-filtered q, ratio and residual with the
    raw q (transformers issue #47932). A size bug: with V <= 3 top-3 filtering is the identity and
    the rule is exact token verification, so only instances with V >= 4 can catch it (the default
    sweep of `assert_lossless` reaches V = 6 for this reason)."""
    return topk_draft_raw_q(draft_length, top_k=3)


# --------------------------------------------------------------------------------------------------
# 11. a frequency-ranked draft vocabulary verified with the full-vocabulary q (FR-Spec)

def _lower_half_chain(draft_length: int) -> Drafter:
    chain = drafters.chain(check_positive_int(draft_length, "draft_length"))

    def build(draft_model, context, rand):
        model = drafters.require_draft_model(draft_model, "lower_half_chain")
        return chain(restrict(model, max(1, model.vocab_size // 2)), context, rand)

    return Drafter("lower_half_chain", build, draft_length=chain.params["draft_length"])


def draft_vocab_full_q(draft_length: int) -> Method:
    """FR-Spec (arXiv 2502.14856) done wrong: the chain is drafted from q restricted to the lower
    half of the vocabulary (ids < max(1, V // 2), renormalised), but the ratio p(x)/q(x) and the
    residual read the draft's full-vocabulary q (its softmax before the subset), so every drafted
    token is accepted too often. Lossy whenever q puts mass outside the subset (V = 2 already)."""
    return _chain_method("draft_vocab_full_q", _token_rule(q_at=_soft_q), draft_length,
                         drafter=_lower_half_chain(draft_length))


#: {name: factory(draft_length) -> Method}, every planted bug of docs/testing.md.
BUGS: dict[str, Callable[[int], Method]] = {
    "always_accept": always_accept,
    "residual_p": residual_p,
    "bonus_from_q": bonus_from_q,
    "bonus_off_by_one": bonus_off_by_one,
    "greedy_draft_soft_q": greedy_draft_soft_q,
    "topk_draft_raw_q": topk_draft_raw_q,
    "topk3_draft_raw_q": topk3_draft_raw_q,
    "temperature_ignored": temperature_ignored,
    "u_zero": u_zero,
    "block_replaced_by_token": block_replaced_by_token,
    "draft_vocab_full_q": draft_vocab_full_q,
}

# The newer verifiers' bugs (traversal leaf order, HSD, importance sampling, SpecHub); some need
# L >= 2 to show, listed in MIN_DRAFT_LENGTH.
BUGS.update(planted_frontier.BUGS)

#: {bug name: smallest draft length at which it is lossy} (1 when absent).
MIN_DRAFT_LENGTH: dict[str, int] = dict(planted_frontier.MIN_DRAFT_LENGTH)

#: Bugs that break losslessness (assert_lossless must raise).
LOSSY = frozenset(BUGS) - {"block_replaced_by_token"}

#: {bug name: factory of the method it must underperform in E[tau]} for the lossless-but-slower bugs.
LOSSLESS_BUT_SLOWER: dict[str, Callable[[int], Method]] = {"block_replaced_by_token": methods.block}

# Bugs that are wrong only on a narrow or measure-zero part of the simplex (a tie, a tiny draft
# probability, a point-mass draft): the default sweep passes all but `tie_half`; `verispec prove`
# refutes every one. Kept out of BUGS/LOSSY, which promise that the sweep catches them.
#: {name: factory(draft_length) -> Method}: lossy only on a narrow part of the simplex.
NARROW: dict[str, Callable[[int], Method]] = dict(planted_narrow.BUGS)

#: The NARROW bugs that the default `assert_lossless` sweep passes (only `verispec prove` refutes them).
SWEEP_PASSES = planted_narrow.SWEEP_PASSES

# Bugs transcribed from serving engines' trackers (vllm-ascend #7807, transformers #47932), kept
# rational so that `verispec prove` refutes each at its smallest size (tests/formal/test_prove_engines.py).
#: {name: factory(draft_length) -> Method}; their smallest lossy draft length in planted_engines.MIN_DRAFT_LENGTH.
ENGINES: dict[str, Callable[[int], Method]] = dict(planted_engines.BUGS)
