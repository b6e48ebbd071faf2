"""`assert_engine_lossless`, the tiny pair, the exact laws behind it, and `verispec check-engine transformers`.

Exact first: the expected acceptance counters of the dynamic program equal an independent recursion
over `verispec.reference.exact.iteration_distribution` on V = 3 reference models (to 1e-12), on both
schedules and for sampled and greedy drafts; the per-position G statistics sum to the joint one (the
chain rule, no pooling); the sample size meets its own power condition.

Statistics: every check here runs at alpha = 1e-3 (the default of `EngineCheckSettings`), so a
correct engine fails a given test with probability <= 1e-3. Power: the planted bugs are far beyond
the stated TV. An in-process speculative sampler written from the exact conditionals passes at
tv = 0.2 (N = 3 tokens); with the acceptance uniform hard-coded to 0 (vllm-ascend #13730) its law sits
at TV ~0.35 from the target (the draft's law at every drafted position) and its accepted-token count
differs from the exact expectation by far more than 10 standard deviations.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec import cli  # noqa: E402
from verispec.reference import drafters, exact, methods, models  # noqa: E402
from verispec.reference.verifiers import token_verify  # noqa: E402
from verispec.testing import gtest  # noqa: E402
from verispec.testing.engine import (EngineCheckSettings, EngineContractError, EngineCounters,  # noqa: E402
                                     EngineLosslessnessError, EngineSample, PairLaw, SpeculationClaim,
                                     assert_engine_lossless, exact_generate)
from verispec.testing.engine_law import expected_acceptance  # noqa: E402
from verispec.testing.engine_stats import has_power, engine_sample_size, joint_counts, position_reports  # noqa: E402
from verispec.testing.tiny_pair import TinyPairConfig, build_tiny_pair, load_tiny_pair  # noqa: E402

SMALL = EngineCheckSettings(tv=0.2, num_tokens=3)  # alpha 1e-3, power 0.9 at TV 0.2, N = 3


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return build_tiny_pair(str(tmp_path_factory.mktemp("pair")))


@pytest.fixture(scope="module")
def law(pair):
    return PairLaw(pair, SMALL)


# --------------------------------------------------------------------------------------------------
# the pair and its exact law


def test_the_pair_is_rebuilt_identically_from_its_seed(pair, tmp_path):
    from safetensors.numpy import load_file

    again = build_tiny_pair(str(tmp_path / "again"))
    other = build_tiny_pair(str(tmp_path / "other"), TinyPairConfig(seed=1))
    for path in ("target", "draft"):
        a = load_file(f"{pair.folder}/{path}/model.safetensors")
        b = load_file(f"{again.folder}/{path}/model.safetensors")
        c = load_file(f"{other.folder}/{path}/model.safetensors")
        assert all(np.array_equal(a[k], b[k]) for k in a)
        assert not np.array_equal(a["lm_head.weight"], c["lm_head.weight"])
    assert load_tiny_pair(pair.folder) == pair
    with pytest.raises(ValueError, match="draft_noise"):
        TinyPairConfig(draft_noise=-1)
    with pytest.raises(TypeError, match="vocab_size"):
        TinyPairConfig(vocab_size=3.5)


def test_the_exact_law_is_the_float32_models_own_to_1e5(pair, law):
    """The joint law of N tokens against the product of conditionals read from the float32
    checkpoint by plain transformers calls (independent of `ConditionalTable`); float32 rounding of
    logits near 20 allows a relative 1e-5."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(pair.target_path).eval()
    V, prompt, N = pair.vocab_size, list(SMALL.prompt), SMALL.num_tokens
    assert law.probs.shape == (V ** N,) and abs(law.probs.sum() - 1) < 1e-12
    for code in np.random.default_rng(0).choice(V ** N, 5, p=law.probs):
        seq = [int(t) for t in np.unravel_index(code, (V,) * N)]
        with torch.no_grad():
            logp = model(torch.tensor([prompt + seq])).logits[0, len(prompt) - 1:-1].log_softmax(-1)
        assert abs(float(logp[range(N), seq].sum().exp()) - law.probs[code]) < 1e-5 * law.probs[code] + 1e-9


class _Table:
    """A reference LanguageModel as a table (`probs(prefixes)`), optionally its argmax point mass."""

    def __init__(self, model, greedy=False):
        self.model, self.greedy = model, greedy

    def probs(self, prefixes):
        rows = [np.asarray(self.model.probs(tuple(p)), dtype=float) for p in prefixes]
        return np.array([np.eye(len(r))[np.argmax(r)] if self.greedy else r for r in rows])


def _recursion(target, draft, claim, N):
    """(E[X], E[X^2], E[drafts]) by recursion over the exact law of each iteration (reference)."""
    def method(ell):
        if claim.greedy_draft:
            return methods.Method("greedy", drafters.greedy(ell), token_verify)
        return methods.token(ell)

    def rec(s):
        ell = claim.length_at(len(s), N)
        if len(s) >= N:
            return np.zeros(3)
        if ell == 0:
            return sum(p * rec(s + (y,)) for y, p in enumerate(target.probs(s)))
        out = np.zeros(3)
        for block, p in exact.iteration_distribution(target, draft, method(ell), s).items():
            a, r = len(block) - 1, rec(s + block)
            out += p * np.array([a + r[0], a * a + 2 * a * r[0] + r[1], 1 + r[2]])
        return out

    if not claim.first_token_from_target:
        return rec(())
    return sum(p * rec((x,)) for x, p in enumerate(target.probs(())))


@pytest.mark.parametrize("claim", [SpeculationClaim(2), SpeculationClaim(2, greedy_draft=True),
                                   SpeculationClaim(2, first_token_from_target=True),
                                   SpeculationClaim(2, greedy_draft=True, first_token_from_target=True),
                                   SpeculationClaim(2, draft_capped=True), SpeculationClaim(3, draft_capped=True)])
def test_expected_acceptance_equals_an_independent_recursion(claim):
    target, draft = models.random_tree(3, seed=0), models.random_tree(3, seed=1)
    for N in (3, 5):
        got = expected_acceptance(_Table(target), _Table(draft, claim.greedy_draft), claim, N, prune=0)
        want = _recursion(target, draft, claim, N)
        assert got.pruned_mass == 0
        assert np.allclose([got.accepted, got.accepted_sq, got.drafts], want, atol=1e-12, rtol=0)
        assert got.draft_tokens <= claim.draft_length * got.drafts + 1e-12


def test_one_iteration_per_position_acceptance_is_the_references():
    """N = L + 1 from an empty prefix with a capped draft: the first iteration's per-position
    acceptance P(tau >= j) is `exact.accepted_length_distribution`'s."""
    target, draft = models.random_tree(3, seed=2), models.random_tree(3, seed=3)
    got = expected_acceptance(_Table(target), _Table(draft), SpeculationClaim(2, draft_capped=True), 2, prune=0)
    law = exact.accepted_length_distribution(target, draft, methods.token(1), ())
    assert abs(got.per_position[0] - law.get(1, 0)) < 1e-12 and got.drafts == 1


# --------------------------------------------------------------------------------------------------
# the statistics


def test_the_sample_size_meets_its_power_condition_and_equals_the_g_tests_without_pooling():
    probs = np.random.default_rng(0).dirichlet(np.full(60, 1.0)) * 0.5 + 1 / 120  # every cell >= 1/120
    n = engine_sample_size(probs, 0.1, 1e-3, 0.9)
    assert has_power(probs, n, 0.1, 1e-3, 0.9, gtest.MIN_EXPECTED)
    if gtest.pooled_mass(probs, n) == 0:  # no cell pooled at that n: the plain G-test sample size
        assert n == gtest.g_test_sample_size(59, 0.1, 1e-3, 0.9)
    with pytest.raises(ValueError, match="tv"):
        engine_sample_size(np.r_[0.5, np.full(10 ** 5, 0.5e-5)], 0.001, 1e-3, 0.9)  # TV ~0.002 at n = 1e8


def test_the_per_position_g_statistics_sum_to_the_joint_one(law):
    """The chain rule of the likelihood ratio: without pooling, sum_i G_i = G_joint."""
    tokens = exact_generate(law)(SMALL.prompt, 500, SMALL.num_tokens, seed=3)
    joint = joint_counts(tokens, law.target.vocab_size)
    positions = position_reports(joint, law.probs, law.conditionals, np.random.default_rng(0), min_expected=0)
    seen = joint > 0
    g_joint = 2 * float((joint[seen] * np.log(joint[seen] / (500 * law.probs[seen]))).sum())
    assert abs(sum(r.statistic for r in positions) - g_joint) < 1e-6 * g_joint


# --------------------------------------------------------------------------------------------------
# assert_engine_lossless on in-process engines


def _draw(probs, rng):
    """One token per row from probs [rows, V] (inverse CDF)."""
    cdf = np.cumsum(probs, axis=1)
    return np.minimum((cdf < rng.random(len(probs))[:, None] * cdf[:, -1:]).sum(1), probs.shape[1] - 1)


def _speculative_engine(law, accept=lambda p_x, q_x, u: u * q_x < p_x, L=2):
    """Token-level speculative sampling written from the exact conditionals (numpy, all rows at
    once), with counters; `accept` is the acceptance test (planted bugs replace it)."""
    target, draft = law.target, law.draft(False)

    def generate(prompt_ids, num_samples, num_tokens, seed):
        rng, rows = np.random.default_rng(seed), [()] * num_samples
        counts = np.zeros(2 + L, dtype=np.int64)
        while any(len(s) < num_tokens for s in rows):
            active = [i for i, s in enumerate(rows) if len(s) < num_tokens]
            drafts, qs = [()] * len(active), []
            for _ in range(L):
                qs.append(draft.probs([rows[i] + d for i, d in zip(active, drafts)]))  # [A, V]
                drafts = [d + (int(x),) for d, x in zip(drafts, _draw(qs[-1], rng))]
            ps = [target.probs([rows[i] + d[:j] for i, d in zip(active, drafts)]) for j in range(L + 1)]
            for a, (i, d) in enumerate(zip(active, drafts)):
                emitted = ()
                for j, x in enumerate(d):
                    if not accept(ps[j][a, x], qs[j][a, x], rng.random()):
                        emitted += (int(_draw(np.maximum(ps[j][a] - qs[j][a], 0)[None], rng)[0]),)
                        break
                    emitted, counts[2 + j] = emitted + (x,), counts[2 + j] + 1
                else:
                    emitted += (int(_draw(ps[L][a][None], rng)[0]),)
                rows[i] = rows[i] + emitted
            counts[:2] += (len(active), L * len(active))
        per_position = tuple(int(c) for c in counts[2:])
        tokens = np.array([s[:num_tokens] for s in rows], dtype=np.int64)
        return EngineSample(tokens, EngineCounters(int(counts[0]), int(counts[1]), sum(per_position), per_position))

    return generate


def test_an_exact_engine_passes_with_its_report(pair, law):
    report = assert_engine_lossless(exact_generate(law), pair, SMALL, law=law, label="exact")
    assert report.passed and report.acceptance is None and len(report.positions) == 3
    assert report.detectable_tv + report.pooled_mass <= 0.2 and "exact: PASS" in str(report)
    record = json.loads(json.dumps(report.as_dict()))
    assert record["passed"] and record["settings"]["tv"] == 0.2


def test_a_speculative_sampler_passes_with_consistent_acceptance(pair, law):
    report = assert_engine_lossless(_speculative_engine(law), pair, SMALL, claim=SpeculationClaim(2), law=law)
    assert report.passed and report.acceptance.consistent
    assert "accepted at draft position 1..L" in str(report)


def test_always_accept_is_caught_with_its_acceptance_signature(pair, law):
    """vllm-ascend #13730 transcribed: u = 0, so every draft token of positive p is accepted."""
    with pytest.raises(EngineLosslessnessError) as caught:
        assert_engine_lossless(_speculative_engine(law, accept=lambda p_x, q_x, u: p_x > 0), pair, SMALL,
                               claim=SpeculationClaim(2), law=law, label="u = 0")
    report = caught.value.report
    assert not report.passed and not report.acceptance.consistent and report.acceptance.z > 10
    assert report.acceptance.observed.accepted_tokens > 0.95 * report.acceptance.observed.draft_tokens
    assert "u = 0: NOT lossless" in str(caught.value) and "DIFFERS" in str(caught.value)


def test_contract_errors_are_not_verdicts(pair, law):
    def shaped(value):
        return lambda prompt_ids, num_samples, num_tokens, seed: value(num_samples, num_tokens)

    def crash(prompt_ids, num_samples, num_tokens, seed):
        raise RuntimeError("engine down")

    bad = {"shape": shaped(lambda n, N: np.zeros((n, N + 1), dtype=np.int64)),
           "dtype": shaped(lambda n, N: np.zeros((n, N))),
           "range": shaped(lambda n, N: np.full((n, N), 32)), "raised": crash}
    for problem, generate in bad.items():
        with pytest.raises(EngineContractError) as caught:
            assert_engine_lossless(generate, pair, SMALL, law=law)
        assert not isinstance(caught.value, AssertionError), problem
    with pytest.raises(ValueError, match="alpha"):
        EngineCheckSettings(alpha=1.5)
    with pytest.raises(ValueError, match="temperature"):
        EngineCheckSettings(temperature=-1)


# --------------------------------------------------------------------------------------------------
# transformers' own assisted generation, end to end


def test_transformers_assisted_generation_and_its_control_pass(pair, law):
    from verispec.integrations.engines import TransformersEngine

    for speculative in (True, False):
        engine = TransformersEngine(pair, speculative=speculative)
        report = assert_engine_lossless(engine.generate, pair, SMALL, claim=engine.claim, law=law)
        assert report.passed
        assert (report.acceptance is not None and report.acceptance.consistent) if speculative else \
            report.acceptance is None


def test_check_engine_command(tmp_path, capsys):
    out = tmp_path / "engine.json"
    assert cli.main(["check-engine", "transformers", "--modes", "control", "--tv", "0.3",
                     "--num-tokens", "3", "--pair-dir", str(tmp_path / "pair"), "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["status"] == 0 and record["reports"][0]["passed"] and record["engine"] == "transformers"
    assert "check-engine transformers: PASS" in capsys.readouterr().out
    assert cli.main(["check-engine", "transformers", "--modes", "greedy"]) == 2  # a vLLM mode
    with pytest.raises(SystemExit):
        cli.main(["check-engine", "sglang"])
    with pytest.raises(SystemExit):
        cli.main(["check-engine", "transformers", "--temperature", "0"])


def _planted_generate_candidates(top_k):
    """transformers #47932 planted in the real candidate generator: the assistant samples its
    candidates from top-k-processed logits, and the generator returns the RAW logits as q (what
    DFlash/MTP candidate generators did), so the verifier's p/q and residual use a law the
    candidates were not drawn from."""
    import copy

    import torch
    from transformers.generation.logits_process import LogitsProcessorList, TopKLogitsWarper

    def generate_candidates(self, generation_args):
        args = dict(generation_args)
        args["logits_processor"] = LogitsProcessorList([*args["logits_processor"], TopKLogitsWarper(top_k)])
        args["generation_config"] = copy.deepcopy(args["generation_config"])
        args["generation_config"].output_logits = True
        out = self.assistant_model.generate(**args, **self.assistant_kwargs)
        self.assistant_kwargs["cache"] = out.cache
        return out.sequences, torch.stack(out.logits, dim=1)  # BUG: raw logits, not the law sampled from

    return generate_candidates


def test_transformers_47932_planted_in_the_candidate_generator_is_caught(pair, monkeypatch):
    """At T = 2 (flatter laws: top-2 filtering drops more of q) with n = 600 requests of N = 3 tokens,
    one run measured G = 133 (df 9) against the 1e-3 critical value 27.9, and the same engine
    without the plant G = 12.5 (p = 0.19); the noncentrality grows with n, so the catch is not luck."""
    from transformers.generation import candidate_generator

    from verispec.integrations.engines import TransformersEngine

    settings = EngineCheckSettings(num_tokens=3, temperature=2.0, num_samples=600)
    monkeypatch.setattr(candidate_generator.AssistedCandidateGenerator, "_generate_candidates",
                        _planted_generate_candidates(top_k=2))
    engine = TransformersEngine(pair, temperature=2.0)
    with pytest.raises(EngineLosslessnessError, match="NOT lossless"):
        assert_engine_lossless(engine.generate, pair, settings, claim=engine.claim, label="transformers #47932")


def test_the_example_wrapper_keeps_the_contract(pair):
    from tests.scripts import load_script

    example = load_script("examples/check_my_engine.py")
    tokens = example.wrap_assisted_generation(pair.target_path, pair.draft_path)(SMALL.prompt, 3, 4, seed=0)
    assert tokens.shape == (3, 4) and tokens.dtype.kind == "i" and ((0 <= tokens) & (tokens < 32)).all()


def test_the_benchmark_scripts_run_end_to_end(tmp_path):
    """At a tiny size (the committed results come from the documented commands)."""
    from tests.scripts import load_script

    out = tmp_path / "false_alarm.json"
    load_script("benchmarks/engine_false_alarm.py").main(["--runs", "2", "--tv", "0.4", "--num-tokens", "2",
                                                          "--output", str(out)])
    record = json.loads(out.read_text())
    assert record["summary"]["runs"] == 2 and len(record["records"]) == 2 and "0.05" in record["summary"]["joint_rates"]
    with pytest.raises(ValueError, match="output: .*fresh"):  # another configuration: refused, the file kept
        load_script("benchmarks/engine_false_alarm.py").main(["--runs", "2", "--tv", "0.3", "--num-tokens", "2",
                                                              "--output", str(out)])
    assert json.loads(out.read_text()) == record
    load_script("benchmarks/bench_engines.py").main(["--engine", "transformers", "--tv", "0.4", "--modes", "control",
                                                     "--num-tokens", "2", "--out-dir", str(tmp_path)])
    record = json.loads((tmp_path / "check_engine_transformers.json").read_text())
    assert record["exit_status"] == 0 and record["reports"][0]["passed"] and "load_before" in record


def test_an_engine_that_fails_to_start_or_crashes_is_exit_status_3(monkeypatch, tmp_path):
    """A crash is not a verdict (vLLM #46069 crashed every CPU speculative run at start-up)."""
    from verispec.integrations import check_engine, check_sampler
    from verispec.testing import SamplerContractError

    class Broken:
        def __init__(self, *args, **kwargs):
            raise TypeError("rejection_sample() missing 1 required positional argument")

    monkeypatch.setitem(check_engine.ENGINES, "transformers", Broken)
    assert cli.main(["check-engine", "transformers", "--modes", "control", "--num-tokens", "2", "--tv", "0.4",
                     "--pair-dir", str(tmp_path / "pair")]) == 3

    def crash(*args, **kwargs):
        raise SamplerContractError("the function raised RuntimeError: kernel crashed")

    monkeypatch.setattr(check_sampler.hf, "check_speculative_sampling", crash)
    assert cli.main(["check-sampler", "transformers", "--mode", "standard"]) == 3


def test_a_missing_engine_library_is_exit_status_2_in_one_line(monkeypatch, tmp_path, capsys):
    """An ImportError on the way (torch, transformers or vLLM not installed) is the engine missing
    (`IntegrationError`, exit status 2), not this mode's crash (3) and not a traceback."""
    from verispec.integrations import check_engine

    class Missing:
        def __init__(self, *args, **kwargs):
            raise ImportError("No module named 'vllm'")

    monkeypatch.setitem(check_engine.ENGINES, "transformers", Missing)
    assert cli.main(["check-engine", "transformers", "--modes", "control", "--num-tokens", "2", "--tv", "0.4",
                     "--pair-dir", str(tmp_path / "pair")]) == 2
    err = capsys.readouterr().err  # after transformers' progress bars (building the pair)
    assert err.endswith("\n") and "Traceback" not in err, err
    assert err.splitlines()[-1].startswith("verispec check-engine: transformers: No module named 'vllm'"), err
