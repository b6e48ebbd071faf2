"""Bad input is rejected at the public boundary with ValueError/TypeError naming the argument
(docs/architecture.md "Bad input", docs/testing.md): NaN, inf, negative, unnormalised, wrong shape, empty,
vocabulary mismatch, out-of-range or non-int token ids, L/K/N < 1 or non-int, unknown method or
parameter, negative temperature, bad seeds, non-dict laws."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from verispec.reference import drafters, exact, methods, models
from verispec.reference.drafters import Draft
from verispec.reference.methods import Method
from verispec.reference.randomness import Sampler

F = Fraction
NAN, INF = float("nan"), float("inf")

V2 = models.iid([0.5, 0.5])
V2B = models.iid([0.25, 0.75])
V3 = models.iid([0.2, 0.3, 0.5])
TOKEN = methods.get("token", draft_length=2)
GBV = methods.get("gbv", draft_length=2, num_paths=2)


def _case(id_, call, exc, match):
    return pytest.param(call, exc, match, id=id_)


PROBS_CASES = [
    _case("nan", lambda: models.iid([0.5, NAN]), ValueError, "probs"),
    _case("inf", lambda: models.iid([INF, 0.5]), ValueError, "probs"),
    _case("negative", lambda: models.iid([1.5, -0.5]), ValueError, "probs"),
    _case("unnormalised", lambda: models.iid([0.5, 0.6]), ValueError, "probs"),
    _case("slightly-unnormalised", lambda: models.iid([0.5, 0.5 + 1e-6]), ValueError, "probs"),
    _case("exact-unnormalised", lambda: models.iid([F(1, 2), F(1, 3)]), ValueError, "probs"),
    _case("exact-negative", lambda: models.iid([F(3, 2), F(-1, 2)]), ValueError, "probs"),
    _case("2-d", lambda: models.iid([[0.5, 0.5]]), ValueError, "probs"),
    _case("2-d-array", lambda: models.iid(np.full((2, 2), 0.25)), ValueError, "probs"),
    _case("empty", lambda: models.iid([]), ValueError, "probs"),
    _case("strings", lambda: models.iid(["a", "b"]), TypeError, "probs"),
    _case("markov-initial-nan", lambda: models.markov([0.5, NAN], [[0.5, 0.5], [0.5, 0.5]]),
          ValueError, "initial"),
    _case("markov-transition-shape", lambda: models.markov([0.5, 0.5], [[0.5, 0.5]]),
          ValueError, "transition"),
    _case("markov-transition-3d", lambda: models.markov([0.5, 0.5], np.full((2, 2, 1), 0.5)),
          ValueError, "transition"),
    _case("markov-row-unnormalised", lambda: models.markov([0.5, 0.5], [[0.5, 0.5], [0.7, 0.7]]),
          ValueError, r"transition\[1\]"),
    _case("markov-row-negative", lambda: models.markov([0.5, 0.5], [[1.5, -0.5], [0.5, 0.5]]),
          ValueError, r"transition\[0\]"),
    _case("table-empty", lambda: models.table({}), ValueError, "probs_by_prefix"),
    _case("table-not-a-dict", lambda: models.table([[0.5, 0.5]]), TypeError, "probs_by_prefix"),
    _case("table-bad-key", lambda: models.table({(5,): [0.5, 0.5]}), ValueError, "probs_by_prefix key"),
    _case("table-bad-row", lambda: models.table({(): [0.5, 0.6]}), ValueError, "probs_by_prefix"),
    _case("table-default-length", lambda: models.table({(): [0.5, 0.5]}, default=[1.0]),
          ValueError, "default"),
]

MODEL_CASES = [
    _case("tree-vocab-0", lambda: models.random_tree(0, 1), ValueError, "vocab_size"),
    _case("tree-vocab-float", lambda: models.random_tree(2.5, 1), TypeError, "vocab_size"),
    _case("tree-seed-negative", lambda: models.random_tree(2, -1), ValueError, "seed"),
    _case("tree-seed-float", lambda: models.random_tree(2, 1.0), TypeError, "seed"),
    _case("tree-concentration-0", lambda: models.random_tree(2, 1, concentration=0), ValueError,
          "concentration"),
    _case("tree-concentration-nan", lambda: models.random_tree(2, 1, concentration=NAN), ValueError,
          "concentration"),
    _case("tree-denominator-0", lambda: models.random_tree(2, 1, denominator=0), ValueError, "denominator"),
    _case("markov-vocab-0", lambda: models.random_markov(0, 1), ValueError, "vocab_size"),
    _case("markov-seed-negative", lambda: models.random_markov(2, -3), ValueError, "seed"),
    _case("temperature-negative", lambda: models.temperature(V2, -1), ValueError, "temperature"),
    _case("temperature-nan", lambda: models.temperature(V2, NAN), ValueError, "temperature"),
    _case("temperature-inf", lambda: models.temperature(V2, INF), ValueError, "temperature"),
    _case("temperature-string", lambda: models.temperature(V2, "hot"), TypeError, "temperature"),
    _case("temperature-bool", lambda: models.temperature(V2, True), TypeError, "temperature"),
    _case("temperature-not-a-model", lambda: models.temperature([0.5, 0.5], 1), TypeError, "model"),
    _case("mixture-vocab-mismatch", lambda: models.mixture(V2, V3, 0.5), ValueError, "^b:"),
    _case("mixture-weight-above-1", lambda: models.mixture(V2, V2B, 1.5), ValueError, "weight"),
    _case("mixture-weight-negative", lambda: models.mixture(V2, V2B, -0.1), ValueError, "weight"),
    _case("mixture-weight-nan", lambda: models.mixture(V2, V2B, NAN), ValueError, "weight"),
    _case("mixture-a-not-a-model", lambda: models.mixture("a", V2, 0.5), TypeError, "^a:"),
    _case("mixture-b-not-a-model", lambda: models.mixture(V2, None, 0.5), TypeError, "^b:"),
]

PREFIX_CASES = [
    _case("out-of-range", lambda: V2.probs((2,)), ValueError, "prefix"),
    _case("negative-id", lambda: V2.probs((0, -1)), ValueError, "prefix"),
    _case("float-id", lambda: V2.probs((0.0,)), TypeError, "prefix"),
    _case("bool-id", lambda: V2.probs((True,)), TypeError, "prefix"),
    _case("string", lambda: V2.probs("01"), TypeError, "prefix"),
    _case("int", lambda: V2.probs(0), TypeError, "prefix"),
]

METHOD_CASES = [
    _case("unknown-name", lambda: methods.get("nope", draft_length=2), ValueError, "name"),
    _case("name-not-a-string", lambda: methods.get(3), TypeError, "name"),
    _case("compatible-unknown-name", lambda: methods.get_compatible("nope", draft_length=2), ValueError, "name"),
    _case("unknown-parameter", lambda: methods.get("token", draft_length=2, num_paths=2), TypeError, "num_paths"),
    _case("unknown-parameter-typo", lambda: methods.get("gbv", draft_len=2, num_paths=2), TypeError, "draft_len"),
    _case("opt-tree-budget-0", lambda: methods.get("opt_tree", node_budget=0), ValueError, "node_budget"),
    _case("opt-tree-threshold", lambda: methods.get("opt_tree", node_budget=2, gain_threshold=-1.0), ValueError,
          "threshold"),
    _case("opt-tree-depth-0", lambda: methods.get("opt_tree", node_budget=2, max_depth=0), ValueError,
          "max_depth"),
    _case("max-ngram-0", lambda: methods.get("prompt_lookup", draft_length=2, max_ngram=0), ValueError,
          "max_ngram"),
    _case("method-empty-name", lambda: Method("", drafters.chain(1), lambda *a: None), TypeError, "name"),
    _case("method-draft-not-callable", lambda: Method("x", 3, lambda *a: None), TypeError, "draft"),
    _case("method-verify-not-callable", lambda: Method("x", drafters.chain(1), None), TypeError, "verify"),
]

GENERATE_CASES = [
    _case("target-not-a-model", lambda: methods.generate(None, V2, TOKEN), TypeError, "target"),
    _case("draft-not-a-model", lambda: methods.generate(V2, [0.5, 0.5], TOKEN), TypeError, "draft"),
    _case("vocab-mismatch", lambda: methods.generate(V2, V3, TOKEN), ValueError, "draft"),
    _case("method-name-string", lambda: methods.generate(V2, V2B, "token"), TypeError, "method"),
    _case("context-out-of-range", lambda: methods.generate(V2, V2B, TOKEN, context=(0, 7)), ValueError, "context"),
    _case("context-float", lambda: methods.generate(V2, V2B, TOKEN, context=(0.5,)), TypeError, "context"),
    _case("context-string", lambda: methods.generate(V2, V2B, TOKEN, context="01"), TypeError, "context"),
    _case("num-tokens-0", lambda: methods.generate(V2, V2B, TOKEN, num_tokens=0), ValueError, "num_tokens"),
    _case("num-tokens-negative", lambda: methods.generate(V2, V2B, GBV, num_tokens=-2), ValueError, "num_tokens"),
    _case("num-tokens-float", lambda: methods.generate(V2, V2B, TOKEN, num_tokens=2.0), TypeError, "num_tokens"),
    _case("num-tokens-bool", lambda: methods.generate(V2, V2B, TOKEN, num_tokens=True), TypeError, "num_tokens"),
    _case("no-draft-model", lambda: methods.generate(V2, None, GBV, rng=Sampler(0)), TypeError, "draft"),
]

EXACT_CASES = [
    _case("output-target", lambda: exact.output_distribution("p", V2, TOKEN), TypeError, "target"),
    _case("output-vocab", lambda: exact.output_distribution(V2, V3, TOKEN), ValueError, "draft"),
    _case("output-method", lambda: exact.output_distribution(V2, V2B, lambda: 0), TypeError, "method"),
    _case("output-context", lambda: exact.output_distribution(V2, V2B, TOKEN, context=(2,)), ValueError, "context"),
    _case("output-context-type", lambda: exact.output_distribution(V2, V2B, TOKEN, context=(1.0,)), TypeError,
          "context"),
    _case("output-num-tokens-0", lambda: exact.output_distribution(V2, V2B, TOKEN, num_tokens=0), ValueError,
          "num_tokens"),
    _case("output-num-tokens-float", lambda: exact.output_distribution(V2, V2B, TOKEN, num_tokens=1.5),
          TypeError, "num_tokens"),
    _case("enumeration-num-tokens", lambda: exact.output_enumeration(V2, V2B, GBV, num_tokens=0), ValueError,
          "num_tokens"),
    _case("enumeration-max-branches", lambda: exact.output_enumeration(V3, models.iid([F(1, 3)] * 3), GBV,
                                                                       num_tokens=3, max_branches=5),
          RuntimeError, "max_branches"),
    _case("target-law-target", lambda: exact.target_distribution([0.5, 0.5], (), 2), TypeError, "target"),
    _case("target-law-context", lambda: exact.target_distribution(V2, (3,), 2), ValueError, "context"),
    _case("target-law-num-tokens", lambda: exact.target_distribution(V2, (), 0), ValueError, "num_tokens"),
    _case("iteration-vocab", lambda: exact.iteration_distribution(V2, V3, TOKEN), ValueError, "draft"),
    _case("iteration-context", lambda: exact.iteration_distribution(V2, V2B, TOKEN, (9,)), ValueError, "context"),
    _case("efficiency-vocab", lambda: exact.block_efficiency(V3, V2, GBV), ValueError, "draft"),
    _case("efficiency-method", lambda: exact.block_efficiency(V2, V2B, "gbv"), TypeError, "method"),
    _case("expected-context", lambda: exact.expected_accepted_length(V2, V2B, TOKEN, (0, 2)), ValueError,
          "context"),
    _case("tau-law-target", lambda: exact.accepted_length_distribution(None, V2, TOKEN), TypeError, "target"),
    _case("rates-vocab", lambda: exact.acceptance_rates(V2, V3, TOKEN), ValueError, "draft"),
    _case("tv-list", lambda: exact.total_variation([], {}), TypeError, "law_a"),
    _case("tv-none", lambda: exact.total_variation({}, None), TypeError, "law_b"),
    _case("tv-array", lambda: exact.total_variation({(0,): 1.0}, np.array([1.0])), TypeError, "law_b"),
]

DRAFTER_CASES = [
    _case("iid-L-0", lambda: drafters.iid_paths(0, 1), ValueError, "draft_length"),
    _case("iid-K-0", lambda: drafters.iid_paths(1, 0), ValueError, "num_paths"),
    _case("iid-L-float", lambda: drafters.iid_paths(1.0, 1), TypeError, "draft_length"),
    _case("iid-K-bool", lambda: drafters.iid_paths(1, True), TypeError, "num_paths"),
    _case("wor-L-0", lambda: drafters.paths_without_replacement(0, 2), ValueError, "draft_length"),
    _case("wor-K-negative", lambda: drafters.paths_without_replacement(2, -1), ValueError, "num_paths"),
    _case("chain-L-0", lambda: drafters.chain(0), ValueError, "draft_length"),
    _case("chain-L-string", lambda: drafters.chain("3"), TypeError, "draft_length"),
    _case("greedy-L-0", lambda: drafters.greedy(0), ValueError, "draft_length"),
    _case("lookup-L-0", lambda: drafters.prompt_lookup(0), ValueError, "draft_length"),
    _case("lookup-ngram-0", lambda: drafters.prompt_lookup(2, 0), ValueError, "max_ngram"),
    _case("opt-tree-budget-0", lambda: drafters.opt_tree(0), ValueError, "node_budget"),
    _case("opt-tree-budget-float", lambda: drafters.opt_tree(2.5), TypeError, "node_budget"),
    _case("opt-tree-threshold-nan", lambda: drafters.opt_tree(2, gain_threshold=NAN), ValueError, "threshold"),
    _case("opt-tree-depth-0", lambda: drafters.opt_tree(2, max_depth=0), ValueError, "max_depth"),
    _case("opt-tree-width-0", lambda: drafters.opt_tree(2, width=0), ValueError, "width"),
    _case("opt-tree-width-float", lambda: drafters.opt_tree(2, width=1.5), TypeError, "width"),
    _case("point-mass-fn", lambda: drafters.point_mass(3), TypeError, "fn"),
    _case("point-mass-L-0", lambda: drafters.point_mass(lambda c: (), draft_length=0), ValueError, "draft_length"),
    _case("point-mass-no-vocab", lambda: drafters.point_mass(lambda c: (0,))(None, (), Sampler(0)), ValueError,
          "vocab_size"),
    _case("from-paths-empty", lambda: Draft.from_paths([], lambda node: None), ValueError, "paths"),
    _case("iid-no-model", lambda: drafters.iid_paths(1, 1)(None, (), Sampler(0)), TypeError, "draft"),
    _case("wor-no-model", lambda: drafters.paths_without_replacement(1, 2)([0.5, 0.5], (), Sampler(0)),
          TypeError, "draft"),
    _case("opt-tree-no-model", lambda: drafters.opt_tree(2)(None, (), Sampler(0)), TypeError, "draft"),
    _case("greedy-no-model", lambda: drafters.greedy(2)(None, (), Sampler(0)), TypeError, "draft"),
    _case("iid-context-out-of-range", lambda: drafters.iid_paths(2, 2)(V2, (9,), Sampler(0)).paths, ValueError,
          "prefix"),
]

SAMPLER_CASES = [
    _case("seed-float", lambda: Sampler(1.5), TypeError, "seed"),
    _case("seed-string", lambda: Sampler("42"), TypeError, "seed"),
    _case("seed-list", lambda: Sampler([1, 2]), TypeError, "seed"),
    _case("seed-random-state", lambda: Sampler(np.random.RandomState(0)), TypeError, "seed"),
]


@pytest.mark.parametrize("call, exc, match", PROBS_CASES + MODEL_CASES + PREFIX_CASES + METHOD_CASES
                         + GENERATE_CASES + EXACT_CASES + DRAFTER_CASES + SAMPLER_CASES)
def test_rejected_with_named_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.parametrize("name", methods.names())
@pytest.mark.parametrize("value, exc", [(0, ValueError), (-1, ValueError), (1.5, TypeError), ("2", TypeError)])
def test_every_method_rejects_bad_draft_length(name, value, exc):
    if not methods.parameters(name):  # target_only: nothing to draft
        return
    if "node_budget" in methods.parameters(name):  # trees: the node budget plays L
        with pytest.raises(exc, match="node_budget"):
            methods.get(name, node_budget=value)
        return
    params = {"draft_length": value}
    if "num_paths" in methods.parameters(name):
        params["num_paths"] = 2
    with pytest.raises(exc, match="draft_length"):
        methods.get(name, **params)


@pytest.mark.parametrize("name", [n for n in methods.names() if "num_paths" in methods.parameters(n)])
@pytest.mark.parametrize("value, exc", [(0, ValueError), (-2, ValueError), (2.0, TypeError), (None, TypeError)])
def test_every_multi_path_method_rejects_bad_num_paths(name, value, exc):
    with pytest.raises(exc, match="num_paths"):
        methods.get(name, draft_length=2, num_paths=value)
    with pytest.raises(exc, match="num_paths"):
        methods.get_compatible(name, draft_length=2, num_paths=value)


def test_get_compatible_ignores_parameters_a_method_does_not_take():
    assert methods.get_compatible("token", draft_length=2, num_paths=3).params == {"draft_length": 2}
    tree = methods.get_compatible("opt_tree", draft_length=2, num_paths=3)
    assert tree.params["node_budget"] == 6 and tree.params["max_depth"] == 2


def _method_emitting(output):
    return Method("bad", drafters.chain(1), lambda target, draft_model, context, draft, rand: output)


@pytest.mark.parametrize("output, match", [
    ((), "emitted no token"),
    ((5,), "tokens emitted by 'bad'"),
    (("x",), "tokens emitted by 'bad'"),
])
def test_step_rejects_invalid_verifier_output(output, match):
    with pytest.raises((ValueError, TypeError), match=match):
        methods.generate(V2, V2B, _method_emitting(output), num_tokens=1, rng=Sampler(0))


def test_step_rejects_an_accepted_prefix_that_was_not_drafted():
    """A verifier that 'accepts' a path of length 2 from a chain of length 1 is caught."""
    with pytest.raises(ValueError, match="not a drafted path"):
        methods.generate(V2, V2B, _method_emitting((0, 0, 1)), num_tokens=3, rng=Sampler(0))


def test_step_rejects_a_drafter_that_returns_no_draft():
    broken = Method("broken", lambda draft_model, context, rand: [(0,)], lambda *args: (0,))
    with pytest.raises(TypeError, match="draft"):
        methods.generate(V2, V2B, broken, num_tokens=1, rng=Sampler(0))


# ------------------------------------------------------------------ known gaps (package bugs)


@pytest.mark.parametrize("entry", ["generate", "exact"])
def test_prompt_lookup_without_a_draft_model(entry):
    target = models.iid([F(1, 2), F(1, 2)])
    method = methods.get("prompt_lookup", draft_length=2)
    if entry == "generate":
        assert len(methods.generate(target, None, method, (0, 1, 0), 3, rng=Sampler(0))) == 3
    else:
        law = exact.output_distribution(target, None, method, (0, 1, 0), 3)
        assert law == exact.target_distribution(target, (0, 1, 0), 3)


def test_scalar_probs_named():
    with pytest.raises(TypeError, match="probs"):
        models.iid(0.5)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("concentration", [-1.0, 0.0, NAN])
def test_random_markov_concentration_named(concentration):
    with pytest.raises(ValueError, match="concentration"):
        models.random_markov(3, 0, concentration=concentration)


def test_sampler_negative_seed_named():
    with pytest.raises(ValueError, match="seed"):
        Sampler(-1)


def test_mixture_non_numeric_weight_named():
    with pytest.raises(TypeError, match="weight"):
        models.mixture(V2, V2B, "half")
