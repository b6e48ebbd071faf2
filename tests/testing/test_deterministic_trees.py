"""Drafts of deterministic trees (top-k EAGLE/SGLang-style trees, greedy chains): no proposal, or a
one-hot point mass for a single child; a soft q read by the verifier there is a contract error."""

from fractions import Fraction

import numpy as np
import pytest

from verispec.reference import drafters, methods, models
from verispec.reference.contract import RuleContractError
from verispec.reference.drafters import Draft
from verispec.reference.probability import one_hot
from verispec.reference.verifiers import sample_and_follow, token_verify
from verispec.testing import LosslessnessError, assert_lossless

CHEAP = dict(families=("iid", "markov"), vocab_sizes=(2, 3, 4))


def _top_k(q, k):
    return sorted(range(len(q)), key=lambda t: (-q[t], t))[:k]


def top_k_tree(width: int, depth: int, proposal: str):
    """An EAGLE-style static tree: the top-`width` draft tokens at the root, then a greedy chain
    below each, to `depth`. proposal: "none", "soft" (the draft model's q: wrong) or "one_hot"
    (the point mass, for single-child nodes)."""

    def build(draft_model, context, rand):
        def expand(node, k):
            if len(node) == depth:
                return (), None
            q = draft_model.probs(context + node)  # [V]
            kids = _top_k(q, width if node == () else 1)
            paths = tuple(t for t in kids for _ in range(k // len(kids)))
            if proposal == "soft":
                return paths, q
            if proposal == "one_hot" and len(kids) == 1:
                return paths, one_hot(kids[0], len(q), exact=q.dtype == object)
            return paths, None

        return Draft(width, expand)

    build.draft_length = depth
    return build


def test_a_deterministic_tree_without_proposal_is_lossless_with_sample_and_follow():
    method = methods.Method("eagle_style", top_k_tree(2, 2, "none"), sample_and_follow, model_state_only=True)
    report = assert_lossless(method, **CHEAP)
    assert report.num_exact > 0 and report.max_num_tokens == 4  # N from the declared depth 2


def test_reading_the_proposal_of_a_deterministic_node_is_a_contract_error():
    method = methods.Method("eagle_token", top_k_tree(2, 2, "none"), token_verify)
    with pytest.raises(RuleContractError, match=r"drafted deterministically .*no proposal"):
        assert_lossless(method, **CHEAP)


def test_a_soft_q_on_a_deterministic_tree_is_detected():
    """The EAGLE-style tree with the draft model's soft q as proposal, verified by a rule that
    reads it (token verification of the first path): the ratios assume children drawn from q."""
    method = methods.Method("eagle_soft_q", top_k_tree(2, 2, "soft"), token_verify)
    with pytest.raises(RuleContractError) as info:
        assert_lossless(method, **CHEAP)
    text = str(info.value)
    assert "are the same on every branch" in text and "proposal=None" in text
    assert not isinstance(info.value, LosslessnessError)


def test_the_soft_q_check_only_fires_when_the_verifier_reads_it():
    # sample_and_follow never reads q: the same soft-q tree is lossless
    method = methods.Method("eagle_soft_saf", top_k_tree(2, 2, "soft"), sample_and_follow)
    assert assert_lossless(method, **CHEAP).num_instances > 0


def test_a_greedy_chain_with_a_point_mass_is_lossless_and_with_soft_q_is_not():
    good = methods.Method("greedy_one_hot", top_k_tree(1, 2, "one_hot"), token_verify)
    assert_lossless(good, **CHEAP)
    # transformers #32867 written as a Draft: greedy children, soft q handed to token verification
    bad = methods.Method("greedy_soft_q", top_k_tree(1, 2, "soft"), token_verify)
    with pytest.raises(RuleContractError, match="same on every branch"):
        assert_lossless(bad, **CHEAP)


def test_sampled_drafts_are_not_flagged():
    # K i.i.d. paths and paths without replacement draw their children: their q is honest
    for method in (methods.token(2), methods.rrsw(2, 2), methods.traversal(1, 2)):
        assert_lossless(method, **CHEAP)


def test_a_soft_q_with_a_single_token_of_support_is_a_point_mass():
    # q one-hot: the deterministic child is exactly what q draws; not a contract error
    t = models.iid([Fraction(1, 2), Fraction(1, 2)])
    d = models.iid([Fraction(1), Fraction(0)])
    method = methods.Method("greedy_soft_q", top_k_tree(1, 2, "soft"), token_verify)
    assert_lossless(method, target=t, draft=d)


def test_opt_tree_drafts_have_no_proposal():
    draft = drafters.opt_tree(3, max_depth=2)(models.iid(np.array([0.6, 0.4])), (), None)
    assert draft.counts(()) == {0: 1, 1: 1}
    with pytest.raises(RuleContractError, match="drafted deterministically"):
        draft.proposal(())
    with pytest.raises(ValueError, match="leaf"):
        draft.proposal((1,))


def test_a_proposal_read_only_for_some_children_is_not_called_deterministic():
    """The check compares the node's children over every branch, not only the branches where q was
    read: token verification that reads q from the Draft only when token 0 was drafted."""

    def verify(target, draft_model, context, draft, rand):
        x = draft.tokens(())[0]
        q = draft.proposal(()) if x == 0 else draft_model.probs(context)  # the same law, read apart
        p = target.probs(context)
        if rand.bernoulli(min(1, p[x] / q[x])):
            return (x, rand.categorical(target.probs(context + (x,))))
        residual = np.maximum(p - q, 0)  # [V]
        return (rand.categorical(residual / residual.sum()),)

    assert_lossless(methods.Method("conditional_read", drafters.chain(1), verify), **CHEAP)
