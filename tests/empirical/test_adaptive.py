"""Adaptive and hybrid chain drafts: exact laws of the reference twins (with planted bugs), the
engine drafters on tiny models (T = 0 greedy equality, draft-cache sync, the cap schedule), and
the bench runners."""

from __future__ import annotations

import copy
from fractions import Fraction as F

import pytest

from verispec.reference import adaptive as ref
from verispec.reference import models
from verispec.reference.randomness import Sampler
from verispec.testing import assert_lossless, planted_drafters

QUICK = dict(families=("iid", "markov"), vocab_sizes=(2, 3))


# ----------------------------------------------------------------------------------------------
# Reference twins: exact laws
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("L", [1, 2, 3, 4])
def test_adaptive_chain_is_lossless_for_every_cap(L):
    """Every cap the schedule can pick (an iteration's cap is fixed before its draws)."""
    assert_lossless(ref.adaptive_method(L, 0.4), **QUICK)


def test_adaptive_chain_is_lossless_on_the_default_sweep():
    assert_lossless(ref.adaptive_method(3, 0.4))


@pytest.mark.parametrize("L", [1, 2, 3, 4])
def test_block_verified_adaptive_chain_is_lossless_for_every_cap(L):
    """Block verification on a chain whose length is a stopping time of its tokens: checked
    exactly (the proof of BV is for fixed lengths)."""
    assert_lossless(ref.adaptive_method(L, 0.4, verifier="block"), **QUICK)


def test_block_verified_adaptive_and_hybrid_on_the_default_sweep():
    assert_lossless(ref.adaptive_method(3, 0.4, verifier="block"))
    assert_lossless(ref.hybrid_method(2, 0.4, lookup_length=3, max_ngram=2, verifier="block"), context=(0, 1, 0))


def test_hybrid_is_lossless_on_the_default_sweep():
    # a context whose suffix recurs: the first iteration drafts a lookup phrase, later ones either
    assert_lossless(ref.hybrid_method(2, 0.4, lookup_length=3, max_ngram=2), context=(0, 1, 0))


def test_the_confidence_stop_really_stops():
    draft = models.iid([F(1, 2), F(1, 4), F(1, 4)], rational=True)
    q = draft.probs(())
    paths = [ref.adaptive_chain(3, 0.4)(draft, (), Sampler(seed)).paths[0] for seed in range(40)]
    for path in paths:  # q(x) = 1/4 < 0.4 ends the chain after x (kept); 1/2 never does
        assert all(q[t] >= 0.4 for t in path[:-1]) and (len(path) == 3 or q[path[-1]] < 0.4), path
    assert {len(path) for path in paths} == {1, 2, 3}


@pytest.mark.parametrize("verifier", ["token", "block"])
def test_planted_drop_of_the_low_confidence_token_is_caught(verifier):
    with pytest.raises(AssertionError, match="NOT lossless"):
        assert_lossless(planted_drafters.drop_low_confidence(2, 0.4, verifier), **QUICK)


@pytest.mark.parametrize("verifier", ["token", "block"])
def test_planted_stop_on_the_targets_probability_is_caught(verifier):
    target = models.iid([F(1, 2), F(1, 4), F(1, 4)], rational=True)
    draft = models.iid([F(1, 4), F(1, 4), F(1, 2)], rational=True)
    assert_lossless(ref.adaptive_method(2, 0.3, verifier=verifier), target=target, draft=draft)  # the honest stop
    with pytest.raises(AssertionError, match="NOT lossless"):
        assert_lossless(planted_drafters.stop_on_target(target, 2, 0.3, verifier), target=target, draft=draft)


def test_block_verification_emits_more_than_token_verification_of_the_same_chain():
    """The reason to offer it: E[tau] of one iteration, exact (Fractions), block >= token on
    instance of the sweep's models at V = 3, T = 1, and > on some (Sun et al. 2024, arXiv
    2403.10444, prove the domination for fixed-length chains; here it is checked)."""
    from verispec.reference import exact
    from verispec.testing import sweep

    gains = []
    for instance in sweep(vocab_sizes=(3,), families=("iid", "markov"), temperatures=(1,)):
        laws = [exact.expected_accepted_length(instance.target, instance.draft,
                                               ref.adaptive_method(3, 0.4, verifier=v)) for v in ("token", "block")]
        assert laws[1] >= laws[0], instance
        gains.append(laws[1] - laws[0])
    assert max(gains) > 0


def test_reference_rejects_bad_parameters():
    with pytest.raises(ValueError, match="threshold"):
        ref.adaptive_chain(2, 1.5)
    with pytest.raises((TypeError, ValueError), match="draft_length"):
        ref.hybrid(0)
    for bad in ("tree", None, 1):
        with pytest.raises(ValueError, match="verifier"):
            ref.adaptive_method(2, verifier=bad)
        with pytest.raises(ValueError, match="verifier"):
            ref.hybrid_method(2, verifier=bad)


# ----------------------------------------------------------------------------------------------
# Engine drafters on tiny models
# ----------------------------------------------------------------------------------------------

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec.empirical import engine, methods  # noqa: E402
from verispec.empirical.drafters import adaptive  # noqa: E402

from .test_decode_tiny import tiny  # noqa: E402

PROMPTS = [torch.tensor([5, 6, 7, 8, 9, 10, 11, 12, 5, 6, 7]), torch.tensor([1, 2, 3, 1, 2]),
           torch.tensor([40, 41, 42, 43, 44, 45])]


@pytest.fixture(scope="module")
def pair():
    return tiny(64, 0, head_scale=4.0), tiny(64, 0, noise=0.1, head_scale=4.0)


@pytest.mark.parametrize("storage", ["padded", "packed"])
@pytest.mark.parametrize("name, params", [("adaptive", {"draft_length": 3}),
                                          ("adaptive", {"confidence_threshold": 0.0}),
                                          ("hybrid", {"draft_length": 3, "lookup_length": 6}),
                                          ("adaptive", {"draft_length": 3, "verifier": "block"})])
def test_greedy_output_is_target_only_greedy(pair, storage, name, params):
    target, draft = pair
    reference = engine.decode(target, None, PROMPTS, engine.target_only_method(), 24)
    result = engine.decode(target, draft, PROMPTS, methods.get(name, **params), 24, storage=storage)
    assert result.tokens.tolist() == reference.tokens.tolist()


def _run_identical(target, name, **params):
    twin = copy.deepcopy(target)  # an identical draft: every model-drafted token is the target's argmax
    method = methods.get(name, confidence_threshold=0.0, schedule="constant", **params)
    stats = engine.decode(target, twin, PROMPTS[:1], method, 30, storage="sequence").stats
    return stats.accepted_lengths, stats.logs


def test_draft_cache_stays_in_sync(pair):
    """With an identical draft at T = 0 every draft-model chain is accepted whole, which needs the
    draft cache to hold exactly the emitted tokens, those emitted during lookup phrases included."""
    tau, logs = _run_identical(pair[0], "adaptive", draft_length=3)
    assert tau[:-1].tolist() == logs["chain_lengths"][:-1].tolist()  # the last may pass N
    tau, logs = _run_identical(pair[0], "hybrid", draft_length=3, lookup_length=4)
    model = ~logs["lookup"][:-1]
    assert bool(logs["lookup"].any()) and bool(model.any())  # both kinds of drafts ran
    assert tau[:-1][model].tolist() == logs["chain_lengths"][:-1][model].tolist()


def test_chains_stop_at_the_tokens_still_needed(pair):
    """7 tokens with an identical draft and a cap of 20: one chain of 6 (+ the bonus token), 6
    draft forwards after the prefill, not 20: drafting past max_new_tokens is cut (hybrid too)."""
    twin = copy.deepcopy(pair[0])
    greedy = engine.decode(pair[0], None, PROMPTS[0], engine.target_only_method(), 7).tokens
    for name in ("adaptive", "hybrid"):
        method = methods.get(name, draft_length=20, confidence_threshold=0.0, schedule="constant")
        result = engine.decode(pair[0], twin, PROMPTS[:1], method, 7, storage="sequence")
        assert torch.equal(result.tokens, greedy), name
        if name == "adaptive" or not bool(result.stats.logs["lookup"][0]):
            assert result.stats.logs["chain_lengths"].tolist() == [6], name
            assert result.stats.draft_forwards == 1 + 6 and result.stats.target_forwards == 1, name


def _check_sync(monkeypatch, pair, storage):
    """Before every draft: the draft cache's committed tokens + its pending tokens are exactly
    the row's context (count), and the pending tokens are the context's last ones."""
    inner, checked = adaptive.HybridDrafter.draft, []

    def draft(self, rows):
        count = self.pending_count
        assert (self.kv.pos + count).tolist() == rows.ctx_len.tolist()
        for b in range(count.shape[0]):
            c, end = int(count[b]), int(rows.ctx_len[b])
            assert self.pending[b, :c].tolist() == rows.ctx[b, end - c:end].tolist()
        checked.append(int(count.max()))
        return inner(self, rows)

    monkeypatch.setattr(adaptive.HybridDrafter, "draft", draft)
    target, draft_model = pair
    method = methods.get("hybrid", draft_length=3, lookup_length=4)
    engine.decode(target, draft_model, PROMPTS, method, 30, 1.0, uniforms=2, storage=storage)
    return checked


@pytest.mark.parametrize("storage", ["padded", "packed"])
def test_draft_cache_holds_every_emitted_token(pair, monkeypatch, storage):
    checked = _check_sync(monkeypatch, pair, storage)
    assert max(checked) > 2  # some rows caught up after lookup iterations (more than 2 pending)


def test_planted_lost_lookup_tokens_are_caught(pair, monkeypatch):
    """Planted: tokens emitted while the draft model was idle never reach its cache."""
    inner = adaptive.AdaptiveChainDrafter._commit_and_queue

    def forgetful(self, tree, verdict, ran):
        inner(self, tree, verdict, ran)
        if not ran:  # keep only the new token pending
            self.pending, self.pending_count = verdict.token.unsqueeze(1).repeat(1, 2), torch.ones_like(verdict.token)

    monkeypatch.setattr(adaptive.AdaptiveChainDrafter, "_commit_and_queue", forgetful)
    with pytest.raises(AssertionError):
        _check_sync(monkeypatch, pair, "padded")


def test_cap_follows_the_heuristic_schedule(pair):
    target, draft = pair
    stats = engine.decode(target, draft, PROMPTS[:1], methods.get("adaptive", draft_length=2, max_draft_length=5,
                                                                  confidence_threshold=0.0), 40, 1.0, uniforms=5,
                          storage="sequence").stats
    caps, drafted, tau = stats.logs["caps"].tolist(), stats.logs["chain_lengths"].tolist(), stats.accepted_lengths
    assert caps[0] == 2 and len(set(caps)) > 1
    for t in range(len(caps) - 1):
        grown = caps[t] + 2 if int(tau[t]) >= drafted[t] else caps[t] - 1
        assert caps[t + 1] == min(max(grown, 1), 5), t


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="threshold"):
        methods.get("adaptive", confidence_threshold=-0.1)
    with pytest.raises(ValueError, match="schedule"):
        methods.get("hybrid", schedule="linear")
    with pytest.raises(ValueError, match="max_draft_length"):
        methods.get("adaptive", draft_length=4, max_draft_length=2)
    with pytest.raises(TypeError, match="num_paths"):
        methods.get("hybrid", num_paths=2)
    with pytest.raises(ValueError, match="verifier"):
        methods.get("adaptive", verifier="gbv")


def test_bench_runners_are_greedy_exact(tmp_path):
    from verispec import bench

    from .test_bench import PROMPTS as BENCH_PROMPTS, CharTokenizer
    import types

    pair_ = types.SimpleNamespace(target=tiny(64, 0, head_scale=4.0), draft=tiny(64, 0, noise=0.1, head_scale=4.0),
                                  tokenizer=CharTokenizer(64))
    runners = ("adaptive", "hybrid:L=2", "adaptive:L=2,M=3", "hybrid:L=2,v=block")
    cfg = bench.BenchConfig(prompts=2, max_new_tokens=12, methods=runners, temperatures=(0.0,), draft_length=3,
                            dtype="float32")
    results = bench.run_bench(cfg, str(tmp_path / "a.json"), pair=pair_, prompts=BENCH_PROMPTS, plot=False)
    rows = {r["runner"]: r for r in results["summary"]}
    assert all(rows[name]["greedy_match_rate"] == 1.0 for name in runners)
    prompt = pair_.tokenizer(BENCH_PROMPTS[0]["prompt"]).input_ids  # [1, n]
    # M: the cap's ceiling (default 4 L; the draft accepts all, so the cap climbs to it); c: the
    # confidence stop in percent (c=100 stops after every token, c=0 never); sched=constant keeps the cap at L
    # pol=fixed: the confidence stop and the length schedule (the bench's default is the cost policy)
    for label, log, longest in (("adaptive:L=2,M=3,pol=fixed", "caps", 3), ("adaptive:L=2,pol=fixed", "caps", 8),
                                ("adaptive:L=2,M=8,sched=constant,pol=fixed", "caps", 2),
                                ("adaptive:L=3,M=3,c=100,pol=fixed", "chain_lengths", 1),
                                ("adaptive:L=3,M=3,c=0,pol=fixed", "chain_lengths", 3)):
        logs = bench.run_method(bench.parse_method(label, 3, 1), pair_, prompt, cfg, 0.0, 0, {}).stats.logs[log]
        assert max(int(value.max()) for value in logs) == longest, label


def test_bench_adaptive_ceiling_is_checked():
    from verispec import bench

    assert bench.parse_method("hybrid:L=8,M=20,dq=8", 4, 1).param("max_draft_length") == 20
    assert bench.parse_method("adaptive", 4, 1).param("max_draft_length") is None  # the method's default, 4 L
    import inspect

    from verispec.empirical.drafters import adaptive

    from verispec.reference import registry

    for factory in (adaptive.adaptive_method, adaptive.hybrid_method):  # unset, c is the registry's = the factory's
        default = inspect.signature(factory).parameters["confidence_threshold"].default
        assert bench.parse_method("adaptive", 4, 1).param("confidence_threshold") is None
        assert registry.spec(factory().name).defaults("torch")["confidence_threshold"] == default
    assert bench.parse_method("adaptive:L=20,M=20,c=15", 4, 1).param("confidence_threshold") == 0.15
    assert bench.parse_method("adaptive:L=20,sched=constant", 4, 1).param("schedule") == "constant"
    assert bench.parse_method("hybrid", 4, 1).param("schedule") is None  # the registry's "heuristic"
    assert bench.parse_method("adaptive:L=20,v=block", 4, 1).param("verifier") == "block"
    assert bench.parse_method("hybrid:L=20", 4, 1).param("verifier") is None  # the registry's "token"
    for bad in ("block:M=8", "adaptive:L=8,M=4", "hf:M=8", "adaptive:M=0", "block:c=10", "adaptive:c=101",
                "block:sched=constant", "adaptive:sched=fast", "block:v=block", "adaptive:v=gbv"):
        with pytest.raises(ValueError, match="M|c \\(|sched|v \\(|bad parameter"):
            bench.parse_method(bad, 4, 1)


# ----------------------------------------------------------------------------------------------
# The engine drafters' law of tau equals the reference twins' exact law
# ----------------------------------------------------------------------------------------------

def _exact_case(name, verifier="token", draft_length=2, threshold=0.8):
    """(torch params, reference Method) at L = 2, threshold 0.8 unless given, a constant cap (one
    iteration is then the reference method), for the context-sensitive models of
    test_accepted_length_exact."""
    common = {"draft_length": draft_length, "confidence_threshold": threshold, "schedule": "constant",
              "verifier": verifier}
    if name == "adaptive":
        return common, ref.adaptive_method(draft_length, threshold, verifier=verifier)
    return ({**common, "lookup_length": 2, "max_ngram": 2},
            ref.hybrid_method(draft_length, threshold, lookup_length=2, max_ngram=2, verifier=verifier))


@pytest.fixture(scope="module")
def exact_models():
    from .test_accepted_length_exact import tiny as context_tiny

    return context_tiny(20), context_tiny(20, noise=0.3)


def check_tau_law(exact_models, name, verifier, rows=4000, draft_length=2, threshold=0.8, guess_length=0,
                   prompt=(1, 3)):
    from .test_accepted_length_exact import check_means, decode_taus, exact_tau_laws

    target, draft = exact_models
    params, method = _exact_case(name, verifier, draft_length, threshold)
    params["guess_length"] = guess_length  # the engine's guesses leave the chain's law as the reference's
    # 2 L + 2 new tokens: the second chain is never cut to the tokens still needed (the reference's
    # iteration has the whole cap L), and every row runs two iterations.
    taus = decode_taus(target, draft, name, params, rows, "padded", prompt, 7, depth=2 * draft_length)
    return check_means(taus, exact_tau_laws(target, draft, method, prompt), bound=draft_length)


@pytest.mark.parametrize("name", ["adaptive", "hybrid"])
def test_engine_tau_matches_the_reference_exact_law(exact_models, name):
    """tau_1, tau_2 of 4000 rows vs the exact laws of the reference twin (Bernstein, alpha 1e-6,
    as test_accepted_length_exact). At this threshold the stop moves E[tau_2] by 0.12 from the
    plain token chain's, above the test's 0.077 power shift (the planted test below)."""
    check_tau_law(exact_models, name, "token")


#: Block verification on the adaptive chain: L = 3 and threshold 0.3, where the exact E[tau_1],
#: E[tau_2] under block verification exceed token verification's by 0.031 and 0.053 on these
#: models (at L = 2, threshold 0.8 the stop ends almost every chain after one token and the two
#: rules differ by < 0.02); 32000 rows put the power shift (delta_min, printed on failure) below that.
BLOCK_CASE = dict(rows=32000, draft_length=3, threshold=0.3)


def test_engine_block_verified_tau_matches_the_reference_exact_law(exact_models):
    check_tau_law(exact_models, "adaptive", "block", **BLOCK_CASE)


def test_planted_ignored_confidence_is_caught(exact_models, monkeypatch):
    """Planted: the engine drafter never stops (confidence read as 1)."""
    monkeypatch.setattr(adaptive.AdaptiveChainDrafter, "_confidence",
                        lambda self, logits, tokens, q: torch.ones(tokens.shape, dtype=torch.float64))
    with pytest.raises(AssertionError):
        test_engine_tau_matches_the_reference_exact_law(exact_models, "adaptive")


def test_planted_token_rule_under_the_block_name_is_caught(exact_models, monkeypatch):
    """Planted: the engine's chain verifier ignores `verifier` and always runs token
    verification; the block law's E[tau] differs enough for the Bernstein test to see it."""
    from verispec.empirical.verifiers import nodes

    inner = nodes.PathRule.__init__
    monkeypatch.setattr(nodes.PathRule, "__init__", lambda self, name: inner(self, "token"))
    with pytest.raises(AssertionError, match="tau_"):
        check_tau_law(exact_models, "adaptive", "block", **BLOCK_CASE)
