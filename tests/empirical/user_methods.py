"""A researcher's own Methods, written against the reference API only (no torch), as a user's
module would hold them: `verispec bench --methods tests.empirical.user_methods:mine` runs `mine`
on real models through the adapter (tests/empirical/test_engine.py)."""

from __future__ import annotations

import numpy as np

from verispec.reference import drafters, methods


def my_token_verify(target, draft_model, context, draft, rand):
    """Token-level speculative sampling, hand-written (Leviathan et al. 2023, arXiv 2211.17192)."""
    node = ()
    while draft.counts(node):
        x = draft.tokens(node)[0]
        p, q = target.probs(context + node), draft.proposal(node)
        if rand.bernoulli(1.0 if q[x] == 0 else min(1.0, p[x] / q[x])):
            node += (x,)
            continue
        excess = np.maximum(p - q, 0.0)
        return node + (rand.categorical(excess / excess.sum() if excess.sum() > 0 else p),)
    return node + (rand.categorical(target.probs(context + node)),)


#: The user's method: a chain of 3 draft tokens and the rule above.
mine = methods.Method("mine", draft=drafters.chain(draft_length=3), verify=my_token_verify)


def peeking_verify(target, draft_model, context, draft, rand):
    """A broken rule: it reads p one token past a token that was never drafted."""
    x = draft.tokens(())[0]
    target.probs(context + ((x + 1) % target.vocab_size,))
    return (rand.categorical(target.probs(context)),)


def peeking() -> methods.Method:
    """A factory (all-default) of the broken Method."""
    return methods.Method("peeking", draft=drafters.chain(draft_length=1), verify=peeking_verify)
