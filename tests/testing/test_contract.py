"""RuleContractError: a broken rule is a contract error (with its branch), never a lossless verdict;
no silent default N for a method that declares no draft depth."""

from fractions import Fraction

import pytest

from verispec.reference import drafters, exact, methods, models
from verispec.reference.contract import ROUNDING_PROBABILITY, RuleContractError
from verispec.reference.randomness import Sampler
from verispec.reference.verifiers import token_verify
from verispec.testing import LosslessnessError, assert_lossless, default_num_tokens, planted

P = models.iid([Fraction(2, 3), Fraction(1, 3)])
Q = models.iid([Fraction(1, 3), Fraction(2, 3)])


def _chain(verify, L=1, **params):
    return methods.Method("rule", drafters.chain(L), verify, params)


def _after_first(out):
    """A verify that runs token verification, then replaces its output by `out(emitted)` whenever
    the first drafted token was accepted (so the broken branch has probability < 1)."""

    def verify(target, draft_model, context, draft, rand):
        emitted = token_verify(target, draft_model, context, draft, rand)
        return out(emitted) if len(emitted) > 1 else emitted

    return verify


MALFORMED = [
    ("no token", lambda emitted: (), "no correction/bonus token"),
    ("outside the vocabulary", lambda emitted: emitted[:-1] + (7,), "outside the vocabulary"),
    ("not a token", lambda emitted: None, "expected a tuple of token ids"),
    ("path not drafted", lambda emitted: emitted + (0, 1), "not a drafted path"),
]


@pytest.mark.parametrize("what, out, match", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_results_are_contract_errors_with_their_branch(what, out, match):
    rule = _chain(_after_first(out), L=1)
    with pytest.raises(RuleContractError, match=match) as info:
        assert_lossless(rule, target=P, draft=Q, num_tokens=2)
    err = info.value
    assert not isinstance(err, AssertionError) and not isinstance(err, LosslessnessError)
    # the branch: a draft token drawn and accepted, then a bonus token drawn; its probability is
    # the product of its draws' probabilities, exactly
    assert err.prefix == () and isinstance(err.probability, Fraction) and 0 < err.probability < 1
    product = Fraction(1)
    for d in err.draws:
        product *= d.probability
    assert product == err.probability
    assert [d.kind for d in err.draws][-2:] == ["bernoulli", "categorical"] and err.draws[-2].outcome is True
    assert err.instance is not None and err.instance.target is P
    text = str(err)
    for needle in ("broke the rule contract", "in the iteration from prefix ()", f"on a branch of probability {err.probability}",
                   "draw(s):", "1. categorical(", "target     = models.iid([Fraction(2, 3)", "num_tokens = 2"):
        assert needle in text, needle


def test_a_raising_rule_names_the_error_and_its_branch():
    def verify(target, draft_model, context, draft, rand):
        if draft.tokens(())[0] == 1:
            raise ZeroDivisionError("boom")
        return token_verify(target, draft_model, context, draft, rand)

    with pytest.raises(RuleContractError, match="the rule raised ZeroDivisionError: boom") as info:
        assert_lossless(_chain(verify), target=P, draft=Q, num_tokens=1)
    err = info.value
    assert err.probability == Fraction(2, 3)  # the draft drew token 1
    assert isinstance(err.__cause__, ZeroDivisionError)


def test_a_later_iteration_names_its_prefix_and_reach_probability():
    def verify(target, draft_model, context, draft, rand):
        if len(context) >= 1:
            raise KeyError("second iteration")
        return token_verify(target, draft_model, context, draft, rand)

    with pytest.raises(RuleContractError) as info:
        exact.output_distribution(P, Q, _chain(verify), (), 3)
    err = info.value
    assert len(err.prefix) >= 1 and 0 < err.prefix_probability < 1
    assert "reached with probability" in str(err)


def test_wrong_signatures_are_contract_errors_at_construction():
    with pytest.raises(RuleContractError, match=r"verify: .*called as verify\(target, draft_model, context, draft, rand\)"):
        methods.Method("two_args", drafters.chain(1), lambda target, draft: (0,))
    with pytest.raises(RuleContractError, match=r"draft: .*called as draft\(draft_model, context, rand\)"):
        methods.Method("bad_drafter", lambda draft_model: None, token_verify)
    methods.Method("varargs", drafters.chain(1), lambda *args: (0,))  # binds: accepted


def test_a_drafter_returning_no_draft_is_a_contract_error():
    rule = methods.Method("nodraft", lambda draft_model, context, rand: [(0,)], token_verify, {"draft_length": 1})
    with pytest.raises(RuleContractError, match="not a Draft"):
        assert_lossless(rule, target=P, draft=Q)


def test_more_tokens_than_the_declared_depth_is_a_contract_error():
    # declares depth 1 but drafts 2 tokens: its N would be too small to see the second iteration
    rule = methods.Method("deeper", drafters.chain(2), token_verify, {"draft_length": 1})
    with pytest.raises(RuleContractError, match="more than its declared draft depth 1"):
        assert_lossless(rule, target=P, draft=Q)


def test_contract_errors_in_sampling_too():
    with pytest.raises(RuleContractError, match="no correction/bonus token"):
        methods.generate(P, Q, _chain(lambda *args: ()), num_tokens=1, rng=Sampler(0))


def test_a_rounding_only_branch_is_reported_as_such():
    """q(0) = 0.1 + 0.2 exceeds p(0) = 0.3 by one ulp: min(1, p/q) = 1 - 2**-53 opens a rejection
    branch of probability ~1e-16 whose residual max(p - q, 0) is all zero."""

    def verify(target, draft_model, context, draft, rand):  # the README's rule, no guard
        node = ()
        while draft.counts(node):
            x = draft.tokens(node)[0]
            p, q = target.probs(context + node), draft.proposal(node)
            if rand.bernoulli(min(1, p[x] / q[x])):
                node += (x,)
                continue
            residual = [max(pi - qi, 0) for pi, qi in zip(p, q)]
            total = sum(residual)
            if total == 0:
                raise ZeroDivisionError("residual mass 0")
            return node + (rand.categorical([r / total for r in residual]),)
        return node + (rand.categorical(target.probs(context + node)),)

    target, draft = models.iid([0.3, 0.7]), models.iid([0.1 + 0.2, 0.7])
    with pytest.raises(RuleContractError) as info:
        assert_lossless(_chain(verify, L=1, draft_length=1), target=target, draft=draft)
    err = info.value
    assert err.from_rounding and 0 < float(err.probability) <= ROUNDING_PROBABILITY
    text = str(err)
    assert "exists only through float64 rounding" in text and "<- rounding" in text
    assert "torch.multinomial" in text and "rational models" in text
    assert "0.9999999999999998" in text  # the acceptance probability, not printed as "1"
    # the same rule on rational models: no such branch, and it is lossless
    assert_lossless(_chain(verify, L=1, draft_length=1), target=P, draft=Q)


def test_an_ordinary_contract_error_is_not_called_rounding():
    with pytest.raises(RuleContractError) as info:
        assert_lossless(_chain(_after_first(lambda e: ()), L=1), target=P, draft=Q, num_tokens=1)
    assert not info.value.from_rounding and "rounding" not in str(info.value)


@pytest.mark.parametrize("name", ["residual_p", "bonus_from_q", "always_accept"])
def test_lossy_but_well_formed_rules_still_raise_losslessness_error(name):
    with pytest.raises(LosslessnessError):
        assert_lossless(planted.BUGS[name](1), vocab_sizes=(2, 3))


# ------------------------------------------------------------------------------------------------
# no silent default N

def _plain_drafter(draft_model, context, rand):
    return drafters.chain(3)(draft_model, context, rand)  # a depth-3 chain, undeclared


def test_a_plain_function_drafter_without_a_depth_needs_num_tokens():
    rule = methods.Method("plain", _plain_drafter, token_verify)
    assert rule.draft_length is None
    with pytest.raises(ValueError, match="num_tokens: .* declares no draft depth"):
        assert_lossless(rule, vocab_sizes=(2,))
    with pytest.raises(ValueError, match="num_tokens"):
        default_num_tokens(rule)
    assert assert_lossless(rule, vocab_sizes=(2,), num_tokens=5, families=("iid",)).max_num_tokens == 5


def test_the_depth_comes_from_params_the_drafter_or_a_function_attribute():
    assert default_num_tokens(methods.token(3)) == 5
    assert default_num_tokens(methods.Method("bare", drafters.chain(3), token_verify)) == 5  # Drafter params
    assert default_num_tokens(methods.opt_tree(6, max_depth=3)) == 5

    def declared(draft_model, context, rand):
        return drafters.chain(3)(draft_model, context, rand)

    declared.draft_length = 3
    rule = methods.Method("declared", declared, token_verify)
    assert rule.draft_length == 3 and default_num_tokens(rule) == 5
    assert assert_lossless(rule, families=("iid",), temperatures=(1,), vocab_sizes=(2,)).max_num_tokens == 5


def test_assert_not_worse_reports_contract_errors_with_the_instance():
    from verispec.testing import assert_not_worse

    broken = _chain(_after_first(lambda e: ()), L=1)
    with pytest.raises(RuleContractError, match="no correction/bonus token") as info:
        assert_not_worse(broken, methods.token(1), target=P, draft=Q)
    assert info.value.instance is not None and info.value.instance.target is P
