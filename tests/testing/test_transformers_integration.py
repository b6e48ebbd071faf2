"""The installed transformers' `_speculative_sampling` through the chain harness (verispec.integrations).

Statistical design: every check here runs `assert_sampler_lossless` with alpha = 1e-6 for the
whole run (Bonferroni over its instances) and power 0.9 against every law at TV >= 0.2 (+ pooled
mass): n = 443 rows at V = 2 and 732 at V = 3 for N = 4 tokens, so the default suite stays fast.
The standard mode passes (false alarm <= 1e-6); DIVERSE ensemble verification (w = 0.5) is at TV
~0.75 from the target on the first instance, far beyond 0.2. The full check at TV 0.05 is
`verispec check-sampler transformers` (marked slow here).
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
pytest.importorskip("torch")

from verispec import cli  # noqa: E402
from verispec.integrations import transformers as hf  # noqa: E402

SMALL = dict(tv=0.2, families=("markov",), vocab_sizes=(2, 3), temperatures=(1, 0))  # alpha 1e-6, power 0.9


def test_standard_mode_passes():
    verdict = hf.check_speculative_sampling("standard", **SMALL)
    assert verdict.lossless and verdict.tv is None and verdict.alpha == 1e-6 and verdict.power == 0.9
    assert len(verdict.report.results) == 4 and verdict.n > 0


def test_diverse_ensemble_mode_is_reported_lossy_with_its_tv():
    if not hf.supports_ensemble():
        pytest.skip(f"the installed {hf.FUNCTION} has no {hf.ENSEMBLE_ARGUMENT}")
    verdict = hf.check_speculative_sampling("diverse", 0.5, **SMALL)
    assert not verdict.lossless and verdict.tv > 0.2
    assert "is LOSSY (declared lossy by the sampler)" in verdict.message and "NOT lossless" not in verdict.message


def test_diverse_measured_tv_sits_beside_the_reference_rules_exact_tv():
    """The exact TV is the reference static ensemble's on the rejected instance, recomputed here. The
    measured TV differs from it by at most TV(empirical, exact law): mean <= 1/2 sqrt(81 / 443) = 0.21
    at V = 3, N = 4 (n = 443 rows at the first instance, V = 2: 0.095), and it exceeds its mean by
    t = 0.15 with probability <= exp(-2 n t^2) = 2e-9 (McDiarmid): |measured - exact| <= 0.36."""
    if not hf.supports_ensemble():
        pytest.skip(f"the installed {hf.FUNCTION} has no {hf.ENSEMBLE_ARGUMENT}")
    from verispec.reference import exact, methods

    verdict = hf.check_speculative_sampling("diverse", 0.5, **SMALL)
    inst = verdict.report.results[-1].instance
    law = exact.output_distribution(inst.target, inst.draft, methods.static_ensemble(2, 0.5), inst.context,
                                    inst.num_tokens)
    expected = float(exact.total_variation(law, exact.target_distribution(inst.target, inst.context, inst.num_tokens)))
    assert verdict.exact_tv == expected and expected > 0.2
    assert abs(verdict.tv - verdict.exact_tv) <= 0.36
    assert hf.check_speculative_sampling("standard", **SMALL).exact_tv is None


def test_a_renamed_function_gives_a_clear_error(monkeypatch, capsys):
    from transformers.generation import utils

    monkeypatch.delattr(utils, "_speculative_sampling")
    with pytest.raises(hf.IntegrationError, match="transformers.generation.utils._speculative_sampling was not found"):
        hf.speculative_sampling_function()
    assert cli.main(["check-sampler", "transformers"]) == 2  # IntegrationError's exit status
    err = capsys.readouterr().err
    assert err.startswith("verispec check-sampler: transformers.generation.utils._speculative_sampling was not "
                          "found") and err.count("\n") == 1, err


def test_an_ensemble_weight_needs_the_argument():
    def old(candidate_input_ids, candidate_logits, candidate_length, new_logits):
        raise AssertionError("never called")

    assert not hf.supports_ensemble(old)
    with pytest.raises(hf.IntegrationError, match=hf.ENSEMBLE_ARGUMENT):
        hf.as_harness_sampler(0.5, function=old)
    with pytest.raises(ValueError, match="assistant_ensemble_weight"):
        hf.as_harness_sampler(1.5)
    with pytest.raises(ValueError, match="mode"):
        hf.check_speculative_sampling("greedy")


def test_check_sampler_command_prints_alpha_power_n_and_the_tv(capsys):
    assert cli.main(["check-sampler", "transformers", "--tv", "0.2"]) == 0
    out = capsys.readouterr().out
    assert "standard: PASS" in out and "alpha = 1e-06" in out and "power 0.9 at TV 0.2" in out and "n = " in out
    if hf.supports_ensemble():
        assert "LOSSY" in out and "measured TV" in out and "exact TV of the same rule on this instance" in out


def test_check_sampler_rejects_bad_arguments():
    with pytest.raises(SystemExit):
        cli.main(["check-sampler", "transformers", "--tv", "2"])
    with pytest.raises(SystemExit):
        cli.main(["check-sampler", "sglang"])
    assert cli.main(["check-sampler", "transformers", "--mode", "module"]) == 2  # a mode of vllm, not transformers


@pytest.mark.slow
def test_standard_mode_passes_at_tv_005():
    """The documented check: the default sweep (18 instances) at alpha 1e-6, power 0.9 at TV 0.05."""
    assert hf.check_speculative_sampling("standard", tv=0.05).lossless
