"""A researcher's own verification rule, checked for losslessness in three lines.

Run: python examples/my_rule.py
"""

from verispec.reference import drafters, methods
from verispec.testing import assert_lossless


def my_verify(target, draft_model, context, draft, rand):
    """Token-level speculative sampling, written from scratch."""
    node = ()
    while draft.counts(node):                        # walk the drafted chain
        x = draft.tokens(node)[0]                    # the drafted token
        p = target.probs(context + node)             # target p(. | prefix)
        q = draft.proposal(node)                     # the q it was drawn from
        if rand.bernoulli(min(1, p[x] / q[x])):      # accept with prob min(1, p/q)
            node += (x,)
            continue
        residual = [max(pi - qi, 0) for pi, qi in zip(p, q)]
        total = sum(residual)
        return node + (rand.categorical([r / total for r in residual]),)  # correction
    return node + (rand.categorical(target.probs(context + node)),)       # bonus


mine = methods.Method("mine", draft=drafters.chain(draft_length=2), verify=my_verify)

if __name__ == "__main__":
    report = assert_lossless(mine)   # raises AssertionError with the smallest counterexample
    print(f"OK: {report}")
