"""assert_lossless / assert_not_worse: reports, smallest counterexamples, exactness, bad input."""

import math
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from verispec.reference import drafters, exact, methods, models
from verispec.reference.probability import accept_probability, align, residual
from verispec.reference.verifiers import token_verify
from verispec.testing import (Instance, LosslessnessError, LosslessReport, NotWorseError, RuleContractError,
                              assert_lossless, assert_not_worse, planted, sweep)

ROOT = Path(__file__).resolve().parents[2]


def _token_rule(broken):
    """Token verification whose correction token is drawn from p when broken(target, node, context)."""

    def verify(target, draft_model, context, draft, rand):
        node = ()
        while draft.counts(node):
            x = draft.tokens(node)[0]
            p, q = align(target.probs(context + node), draft.proposal(node))
            if not rand.bernoulli(accept_probability(p[x], q[x])):
                corr = p if broken(target, node, context) else residual(p, q)
                return node + (rand.categorical(corr),)
            node = node + (x,)
        return node + (rand.categorical(target.probs(context + node)),)

    return verify


def _method(verify, L=1, name="rule"):
    return methods.Method(name, drafters.chain(L), verify, {"draft_length": L}, model_state_only=True)


# ------------------------------------------------------------------------------------------------
# the report

def test_report_names_models_context_laws_and_tv():
    with pytest.raises(LosslessnessError) as info:
        assert_lossless(planted.residual_p(1))
    text = str(info.value)
    for needle in ("NOT lossless", "smallest counterexample", "target     = models.iid([Fraction(",
                   "draft      = models.iid([Fraction(", "context    = ()", "num_tokens = 1",
                   "V = 2, N = 1", "TV(method law, target law) = ", "exact rational arithmetic",
                   "method law", "target law", "difference", "(0,)", "(1,)"):
        assert needle in text, needle
    err = info.value
    assert err.exact and isinstance(err.tv, Fraction) and err.tv > 0
    assert f"{err.tv} = {float(err.tv):.6g}" in text
    # the reported models are the instance (copy-pasteable reprs): re-evaluating gives the same TV
    inst = err.instance
    law = exact.output_distribution(inst.target, inst.draft, planted.residual_p(1), inst.context, inst.num_tokens)
    assert exact.total_variation(law, exact.target_distribution(inst.target, (), 1)) == err.tv
    rebuilt = eval(repr(inst.target), {"models": models, "Fraction": Fraction})
    assert list(rebuilt.probs(())) == list(inst.target.probs(()))


def test_float_report_says_float64():
    with pytest.raises(LosslessnessError) as info:
        assert_lossless(planted.residual_p(1), exact=False, temperatures=(1,))
    assert "float64 arithmetic" in str(info.value) and not info.value.exact


def test_smallest_counterexample_rule_broken_only_for_three_tokens():
    rule = _method(_token_rule(lambda target, node, ctx: target.vocab_size >= 3))
    assert_lossless(rule, vocab_sizes=(2,))
    with pytest.raises(LosslessnessError) as info:
        assert_lossless(rule, vocab_sizes=(4, 3, 2))
    inst = info.value.instance
    assert (inst.vocab_size, inst.num_tokens, inst.complexity) == (3, 1, 0)  # V=3, N=1, iid at T=1
    assert "V = 3, N = 1" in str(info.value) and "iid pair, T=1" in str(info.value)


def test_smallest_counterexample_rule_broken_only_after_the_first_token():
    # correct on the first iteration (empty prefix), wrong on every later one: the smallest N is 2
    rule = _method(_token_rule(lambda target, node, ctx: len(ctx) >= 1), L=1)
    rule = methods.Method("late", rule.draft, rule.verify, rule.params)  # reads the prefix: no memo
    with pytest.raises(LosslessnessError) as info:
        assert_lossless(rule)
    err = info.value
    assert err.instance.num_tokens == 2 and err.instance.vocab_size == 2 and err.instance.complexity == 0
    assert "already differ at num_tokens=2 (checked up to 3)" in str(err)
    assert all(len(k) == 2 for k in err.law)


def test_smallest_counterexample_prefers_simpler_models():
    # broken only for prefix-dependent targets: reported on the Markov pair, not the random tree
    with pytest.raises(LosslessnessError) as info:
        assert_lossless(planted.bonus_off_by_one(2))
    assert "markov pair, T=1" in info.value.instance.label
    assert info.value.instance.num_tokens == 3


def test_sweep_is_ordered_and_deterministic():
    insts = sweep(vocab_sizes=(3, 2), temperatures=(1, 0, 0.5), num_tokens=3)
    keys = [i.sort_key() for i in insts]
    assert keys == sorted(keys) and len(insts) == 2 * 3 * 3
    assert [i.vocab_size for i in insts[:9]] == [2] * 9
    assert [repr(i.target) for i in insts] == [repr(i.target) for i in sweep((2, 3), (1, 0, 0.5), 3)]
    assert repr(sweep(seed=1)[0].target) != repr(insts[0].target)
    assert all(i.exact for i in insts if "T=0.5" not in i.label)
    assert not any(i.exact for i in sweep(exact=False))


# ------------------------------------------------------------------------------------------------
# passing, exactness, tolerance

def test_explicit_instance_passes_exactly():
    t = models.iid([Fraction(2, 3), Fraction(1, 3)])
    d = models.iid([Fraction(1, 3), Fraction(2, 3)])
    report = assert_lossless(methods.token(2), target=t, draft=d)
    assert isinstance(report, LosslessReport)
    assert (report.num_instances, report.num_exact, report.max_num_tokens) == (1, 1, 4)
    assert "lossless on 1 instances" in str(report)


def test_explicit_instance_failure_reports_that_instance():
    t = models.markov([0.5, 0.5], [[0.9, 0.1], [0.2, 0.8]])
    d = models.iid([0.5, 0.5])
    with pytest.raises(LosslessnessError) as info:
        assert_lossless(planted.bonus_off_by_one(1), target=t, draft=d, context=(1,), num_tokens=3)
    err = info.value
    assert "the given instance" in str(err) and "context    = (1,)" in str(err)
    assert err.instance.num_tokens == 2 and err.instance.target is t


def test_default_num_tokens_is_draft_length_plus_two():
    assert assert_lossless(methods.token(3), families=("iid",), temperatures=(1,)).max_num_tokens == 5
    no_params = methods.Method("bare", drafters.chain(1), token_verify)
    assert assert_lossless(no_params, families=("iid",), temperatures=(1,)).max_num_tokens == 3
    opaque = methods.Method("opaque", lambda dm, c, r: drafters.chain(1)(dm, c, r), token_verify)
    with pytest.raises(ValueError, match="num_tokens: .*declares no draft depth"):  # no silent N = 4
        assert_lossless(opaque, families=("iid",), temperatures=(1,))


def test_exact_true_rejects_float_rules_and_float_temperatures():
    with pytest.raises(LosslessnessError, match="not exact rational"):
        assert_lossless(methods.spectr(1, 2), exact=True, temperatures=(1,))
    with pytest.raises(ValueError, match="temperatures"):
        assert_lossless(methods.token(1), exact=True)  # default temperatures include 0.5
    with pytest.raises(ValueError, match="exact"):
        assert_lossless(methods.token(1), target=models.iid([0.5, 0.5]), draft=models.iid([0.5, 0.5]),
                        exact=True)


def _nudged_verify(eps):
    def verify(target, draft_model, context, draft, rand):
        x = draft.tokens(())[0]
        p, q = align(target.probs(context), draft.proposal(()))
        if not rand.bernoulli(min(1.0, float(p[x] / q[x]) * (1 - eps))):
            return (rand.categorical(residual(p, q)),)
        return (x, rand.categorical(target.probs(context + (x,))))

    return verify


def test_tolerance_applies_to_float_laws_only():
    nudged = _method(_nudged_verify(1e-9))
    kwargs = dict(families=("iid",), temperatures=(1,), exact=False)
    assert assert_lossless(nudged, tol=1e-6, **kwargs).max_tv < 1e-6
    with pytest.raises(LosslessnessError):
        assert_lossless(nudged, **kwargs)  # default tol 1e-12


def test_a_crashing_rule_is_reported_with_its_instance():
    def crash(target, draft_model, context, draft, rand):
        if target.vocab_size == 3:
            raise ZeroDivisionError("boom")
        return token_verify(target, draft_model, context, draft, rand)

    with pytest.raises(RuleContractError, match="raised ZeroDivisionError: boom") as info:
        assert_lossless(_method(crash))  # a contract error, not a lossless verdict
    assert not isinstance(info.value, LosslessnessError)
    assert info.value.instance.vocab_size == 3 and isinstance(info.value.__cause__, ZeroDivisionError)


def test_custom_instances():
    good = [Instance(models.iid([0.3, 0.7]), models.iid([0.6, 0.4]), (), 3),
            Instance(models.random_markov(3, 5), models.random_markov(3, 6), (2,), 2)]
    assert assert_lossless(methods.block(1), instances=good).num_instances == 2
    with pytest.raises(LosslessnessError) as info:
        assert_lossless(planted.always_accept(1), instances=list(reversed(good)))
    assert info.value.instance.vocab_size == 2  # sorted smallest first


def test_assert_not_worse_both_ways():
    results = assert_not_worse(methods.block(2), methods.token(2), families=("iid", "markov"))
    assert results and all(v >= b - 1e-12 for _, v, b in results)
    assert any(v > b + 1e-3 for _, v, b in results)
    with pytest.raises(NotWorseError) as info:
        assert_not_worse(methods.token(2), methods.block(2), families=("iid",))
    assert info.value.gap > 0 and "models.iid(" in str(info.value)


# ------------------------------------------------------------------------------------------------
# bad input

@pytest.mark.parametrize("kwargs,exc,name", [
    (dict(num_tokens=0), ValueError, "num_tokens"),
    (dict(num_tokens=2.0), TypeError, "num_tokens"),
    (dict(vocab_sizes=()), ValueError, "vocab_sizes"),
    (dict(vocab_sizes=(0,)), ValueError, "vocab_sizes"),
    (dict(vocab_sizes=("3",)), TypeError, "vocab_sizes"),
    (dict(temperatures=(-1,)), ValueError, "temperatures"),
    (dict(temperatures=(math.nan,)), ValueError, "temperatures"),
    (dict(temperatures=()), ValueError, "temperatures"),
    (dict(tol=math.nan), ValueError, "tol"),
    (dict(tol=-1.0), ValueError, "tol"),
    (dict(tol="0"), TypeError, "tol"),
    (dict(seed=-1), ValueError, "seed"),
    (dict(exact="yes"), TypeError, "exact"),
    (dict(context=(5,)), ValueError, "context"),
    (dict(context="ab"), TypeError, "context"),
    (dict(families=("zipf",)), ValueError, "families"),
    (dict(instances=[1]), TypeError, "instances"),
    (dict(instances=[]), ValueError, "instances"),
    (dict(draft=models.iid([0.5, 0.5])), ValueError, "target"),
    (dict(target=models.iid([0.5, 0.5]), draft=models.iid([0.2, 0.3, 0.5])), ValueError, "draft"),
    (dict(target=[0.5, 0.5], draft=models.iid([0.5, 0.5])), TypeError, "target"),
    (dict(target=models.iid([0.5, 0.5]), draft=models.iid([0.5, 0.5]), context=(2,)), ValueError, "context"),
])
def test_bad_arguments_are_named(kwargs, exc, name):
    with pytest.raises(exc, match=name):
        assert_lossless(methods.token(1), **kwargs)


def test_bad_method_is_named():
    with pytest.raises(TypeError, match="method"):
        assert_lossless(token_verify)
    with pytest.raises(TypeError, match="baseline"):
        assert_not_worse(methods.token(1), "block")


# ------------------------------------------------------------------------------------------------
# the README example

def test_example_my_rule_runs():
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "my_rule.py")], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("OK: ") and "lossless on" in out.stdout and "TV == 0" in out.stdout


def test_example_rule_is_caught_when_broken():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import my_rule
    finally:
        sys.path.remove(str(ROOT / "examples"))
    good = my_rule.mine

    def broken(target, draft_model, context, draft, rand):
        out = good.verify(target, draft_model, context, draft, rand)
        return out if len(out) > 1 else (0,)  # every correction token replaced by token 0

    with pytest.raises(LosslessnessError):
        assert_lossless(methods.Method("broken", good.draft, broken))


def test_assert_not_worse_bad_instances():
    with pytest.raises(TypeError, match="instances"):
        assert_not_worse(methods.block(1), methods.token(1), instances=[(1, 2)])
    with pytest.raises(ValueError, match="instances"):
        assert_not_worse(methods.block(1), methods.token(1), instances=[])
