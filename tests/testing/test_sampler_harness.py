"""assert_sampler_lossless: the black-box G-test harness for batched samplers.

Statistical design (docs/testing.md, "Black-box samplers"):

* Default-suite runs use tv = 0.05 (n = 6,841 at V = 2 and 11,296 at V = 3 for N = 4 tokens, 8 instances):
  every planted bug below is further than that from the target law on the first instances, so
  they are caught in well under a second each; alpha = 1e-6 for the whole run (Bonferroni over the
  instances), power 0.9 at the stated TV (+ pooled mass).
* The full-power run (tv = 0.01: n = 176,939 at V = 2, 294,094 at V = 3) is marked slow.
* False-alarm rate: the harness's p-values of a correct sampler must be uniform. Over 120 seeds
  (one Markov V = 3 instance, N = 3, tv = 0.1 so n = 1,815 and each run is cheap) the number of
  p-values below 0.05 must be at most 14 (binomial(120, 0.05) exceeds 14 with probability 0.001)
  and a KS test of uniformity must not reject at 1e-3. The seeds are fixed: reproducible.
* Planted bugs in a batched torch sampler: the correction token drawn from p instead of the
  residual; u = 0 (every draft token accepted); the bonus token drawn from q; and, through the
  HF-style adapter, a temperature applied to the target logits only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from verispec.reference import models
from verispec.reference.contract import RuleContractError
from verispec.testing import (LosslessnessError, gtest, SamplerContractError, SamplerLosslessnessError,
                              assert_sampler_lossless, reference_sampler)
from verispec.testing.strategies import Instance

from ..scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
FAST = dict(tv=0.05, vocab_sizes=(2, 3), families=("iid", "markov"), temperatures=(1, 0.5))


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny tensors: torch's thread hand-offs dominate on a shared CPU, so run single-threaded."""
    try:
        import torch
    except ImportError:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _load(path):
    return load_script(str(path))


def _example(name):
    return _load(ROOT / "examples" / f"{name}.py")


def _torch_sampler(bug=None):
    """A batched torch speculative sampler (canonical harness signature) with an optional bug."""
    import torch

    def sampler(draft_ids, draft_probs, target_probs, generator):
        batch, L = draft_ids.shape
        rows = torch.arange(batch)
        p_x = target_probs[:, :L].gather(-1, draft_ids[..., None])[..., 0]  # [batch, L]
        q_x = draft_probs.gather(-1, draft_ids[..., None])[..., 0]  # [batch, L]
        u = torch.rand((batch, L), generator=generator, dtype=torch.float64)  # [batch, L]
        if bug == "u_zero":
            u = torch.zeros_like(u)
        accepted = u * q_x < p_x  # [batch, L]
        tau = torch.where(accepted.all(-1), L, (~accepted).int().argmax(-1))  # [batch]
        p_last = target_probs[rows, tau]  # [batch, V]
        q_last = torch.where((tau < L)[:, None], draft_probs[rows, tau.clamp(max=L - 1)], 0.0)  # [batch, V]
        residual = p_last if bug == "residual_from_p" else (p_last - q_last).clamp_min(0)  # [batch, V]
        if bug == "bonus_from_q":
            residual = torch.where((tau == L)[:, None], draft_probs[:, -1], residual)
        last = torch.multinomial(residual, 1, generator=generator)[:, 0]  # [batch]
        out = torch.where(torch.arange(L)[None, :] < tau[:, None], draft_ids, -1)  # [batch, L]
        out = torch.cat([out, torch.full((batch, 1), -1)], dim=1)  # [batch, L + 1]
        out[rows, tau] = last
        return out

    sampler.__qualname__ = f"torch_sampler(bug={bug!r})"
    return sampler


# --------------------------------------------------------------------------------------------------
# correct samplers pass; planted bugs fail

def test_reference_sampler_passes_and_reports_n_and_power():
    report = assert_sampler_lossless(reference_sampler, **FAST)
    assert len(report.results) == 8
    for r in report.results:
        assert r.p_value > r.alpha and not r.impossible
        assert r.n == gtest.g_test_sample_size(r.cells - 1, 0.05, 1e-6 / 8, 0.9)  # the documented rule
        assert r.detectable_tv <= 0.0525  # pooling can only lower df, which raises the power
        assert r.alpha == pytest.approx(1e-6 / 8)
    text = str(report)
    assert f"{report.results[0].n:,}" in text and "power 0.9 at TV 0.05" in text


def test_torch_sampler_passes():
    pytest.importorskip("torch")
    report = assert_sampler_lossless(_torch_sampler(), backend="torch", **FAST)
    assert min(r.p_value for r in report.results) > 1e-6 / 8


@pytest.mark.parametrize("bug", ["residual_from_p", "u_zero", "bonus_from_q"])
def test_planted_bugs_in_a_torch_sampler_are_caught(bug):
    pytest.importorskip("torch")
    with pytest.raises(SamplerLosslessnessError) as info:
        assert_sampler_lossless(_torch_sampler(bug), backend="torch", **FAST)
    err = info.value
    assert isinstance(err, LosslessnessError)
    assert err.result.p_value <= err.result.alpha
    assert "NOT lossless" in str(err) and f"bug={bug!r}" in str(err)


def test_impossible_outcome_fails_at_once():
    """A sampler that emits a token of target probability 0 fails with p = 0, whatever n."""
    target = models.iid([0.5, 0.5, 0.0])
    draft = models.iid([0.4, 0.3, 0.3])

    def always_accept(draft_ids, draft_probs, target_probs, generator):
        return np.concatenate([draft_ids, generator.integers(0, 2, (len(draft_ids), 1))], axis=1)

    with pytest.raises(SamplerLosslessnessError, match="target probability 0") as info:
        assert_sampler_lossless(always_accept, target=target, draft=draft, draft_length=1, num_tokens=2,
                                num_samples=200)
    assert info.value.result.impossible


def test_false_alarm_rate_over_seeds():
    """The p-values of a correct sampler are uniform (see the module docstring for the bounds)."""
    target, draft = models.random_markov(3, 11), models.random_markov(3, 12)
    pvalues = np.array([
        assert_sampler_lossless(reference_sampler, target=target, draft=draft, num_tokens=3, tv=0.1,
                                seed=seed).results[0].p_value
        for seed in range(120)])
    assert np.count_nonzero(pvalues < 0.05) <= 14
    assert stats.kstest(pvalues, "uniform").pvalue > 1e-3


# --------------------------------------------------------------------------------------------------
# example adapters

def test_vllm_style_example_passes_and_its_planted_bug_is_caught():
    pytest.importorskip("torch")
    example = _example("vllm_style_sampler")
    assert_sampler_lossless(example.as_harness_sampler(example.rejection_sample), backend="torch", **FAST)

    def lossy(draft_ids, draft_probs, target_probs, bonus_ids, generator):  # reject against q only
        return example.rejection_sample(draft_ids, draft_probs, draft_probs, bonus_ids, generator)

    with pytest.raises(SamplerLosslessnessError):
        assert_sampler_lossless(example.as_harness_sampler(lossy), backend="torch", **FAST)


def test_hf_style_example_passes_and_a_one_sided_temperature_is_caught():
    torch = pytest.importorskip("torch")
    example = _example("hf_style_sampler")
    assert_sampler_lossless(example.as_harness_sampler(example.speculative_sampling, 0.7), backend="torch", **FAST)

    def target_only(candidate_ids, candidate_logits, new_logits, temperature):
        # the draft's logits are used as if T = 1 although the tokens were drawn at T
        return example.speculative_sampling(candidate_ids, candidate_logits * temperature, new_logits, temperature)

    with pytest.raises(SamplerLosslessnessError):
        assert_sampler_lossless(example.as_harness_sampler(target_only, 0.7), backend="torch", **FAST)
    state = torch.random.get_rng_state()
    assert_sampler_lossless(example.as_harness_sampler(example.speculative_sampling, 0.7), backend="torch",
                            target=models.iid([0.6, 0.4]), draft=models.iid([0.3, 0.7]), num_samples=100)
    assert torch.equal(state, torch.random.get_rng_state())  # the global RNG is left alone


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vllm_style_sampler", "hf_style_sampler"])
def test_examples_run_at_full_power(name):
    """The examples' __main__: the default sweep at alpha 1e-6, power 0.9 at TV 0.01."""
    pytest.importorskip("torch")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # tiny tensors: threads only add hand-offs
    out = subprocess.run([sys.executable, str(ROOT / "examples" / f"{name}.py")], capture_output=True,
                         text=True, timeout=900, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr
    assert "power 0.9 at TV 0.01" in out.stdout and "294,094" in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("bug", [None, "residual_from_p", "u_zero", "bonus_from_q"])
def test_full_power_default_sweep(bug):
    pytest.importorskip("torch")
    if bug is None:
        report = assert_sampler_lossless(_torch_sampler(), backend="torch")
        assert {r.n for r in report.results} == {230, 176_939, 294_094}
    else:
        with pytest.raises(SamplerLosslessnessError):
            assert_sampler_lossless(_torch_sampler(bug), backend="torch")


# --------------------------------------------------------------------------------------------------
# contract errors are not verdicts; bad arguments name the argument

def _breaking(kind):
    def fn(draft_ids, draft_probs, target_probs, generator):
        out = reference_sampler(draft_ids, draft_probs, target_probs, generator)
        if kind == "raises":
            raise RuntimeError("kernel failed")
        if kind == "shape":
            return out[:, :-1]
        if kind == "float":
            return out.astype(np.float32)
        if kind == "range":
            out[0, 0] = draft_probs.shape[-1]
        elif kind == "empty":
            out[0] = -1
        elif kind == "gap":
            out[0] = [-1, draft_ids[0, 0], -1]
        elif kind == "not_draft":
            out[0] = [(draft_ids[0, 0] + 1) % draft_probs.shape[-1], 0, -1]
        return out

    return fn


@pytest.mark.parametrize("kind, match", [
    ("raises", "raised RuntimeError"), ("shape", "shape"), ("float", "integer"), ("range", "outside"),
    ("empty", "no token"), ("gap", "placeholder"), ("not_draft", "draft_ids"),
])
def test_contract_errors(kind, match):
    with pytest.raises(SamplerContractError, match=match) as info:
        assert_sampler_lossless(_breaking(kind), target=models.iid([0.5, 0.5]), draft=models.iid([0.3, 0.7]),
                                draft_length=2, num_samples=50)
    assert not isinstance(info.value, AssertionError)
    assert isinstance(info.value, RuleContractError) and info.value.instance is not None


@pytest.mark.parametrize("kwargs, match", [
    (dict(backend="jax"), "backend"), (dict(alpha=0), "alpha"), (dict(tv=1.5), "tv"), (dict(power="high"), "power"),
    (dict(draft_length=0), "draft_length"), (dict(num_tokens=0), "num_tokens"), (dict(num_samples=0), "num_samples"),
    (dict(batch_size=0), "batch_size"), (dict(dtype=np.int64), "dtype"), (dict(seed=-1), "seed"),
    (dict(draft=models.iid([0.5, 0.5])), "target"), (dict(instances=[]), "instances"),
    (dict(instances=[1]), "instances"), (dict(vocab_sizes=(0,)), "vocab_sizes"),
    (dict(instances=[Instance(models.iid([0.5, 0.5]), None)]), "draft"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        assert_sampler_lossless(reference_sampler, **kwargs)


def test_fn_must_be_callable():
    with pytest.raises(TypeError, match="fn"):
        assert_sampler_lossless("rejection_sample")


def test_verispec_testing_does_not_import_torch():
    """torch is an optional extra: the harness imports it only for backend="torch"."""
    code = ("import sys\n"
            "import verispec.testing as t\n"
            "assert t.assert_sampler_lossless(t.reference_sampler, vocab_sizes=(2,), families=('iid',), "
            "temperatures=(1,), tv=0.2).results\n"
            "assert 'torch' not in sys.modules\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr


def test_false_alarm_script_writes_its_record(tmp_path, capsys):
    module = _load(ROOT / "benchmarks" / "sampler_false_alarm.py")
    out = tmp_path / "fa.json"
    module.main(["--runs", "10:0.3", "--output", str(out)])
    record = json.loads(out.read_text())["records"][0]
    assert record["runs"] == 10 and record["n_per_run"] == gtest.g_test_sample_size(record["cells"] - 1, 0.3)
    assert 0 <= record["rates"]["0.05"]["rate"] <= 1 and "rate below" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        module.main(["--runs", "ten:0.1"])
