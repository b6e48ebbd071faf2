"""A whole inference engine's speculative decoding, checked end to end: `assert_engine_lossless`.

The function-level harnesses (`assert_sampler_lossless`) check one sampler; the bugs that reach users
also live between functions: a drafter handing the verifier a q it did not sample from, a kernel
shim that drops a temperature, a scheduler that mis-orders requests. This check treats the engine as
a black box that serves verispec's tiny seeded pair (`verispec.testing.tiny_pair`) through one call::

    generate(prompt_ids, num_samples, num_tokens, seed) -> int array [num_samples, num_tokens]

(``prompt_ids`` a tuple of token ids; each row an independent request's first ``num_tokens``
generated tokens, sampled at the settings' temperature with no top-k/top-p; or an `EngineSample`
that also carries the engine's acceptance counters). It draws n rows, n chosen for a stated
false-alarm rate alpha and power at a stated total variation (`engine_stats.engine_sample_size`,
pooled mass included), and G-tests their joint law against the exact target law of the same weights
in float64 (`engine_law.target_law`). The report adds, to point at the failing piece: the TV of each
position's conditional law beside its noise level (`engine_stats.position_reports`), and, with a
`SpeculationClaim` and counters, the engine's accepted tokens per request beside the exact expectation
of the rule it claims (`engine_law.expected_acceptance`). Run the same engine without speculation as
a control: it must pass too.

A statistical check: a lossless engine fails with probability <= alpha (chi-square approximation);
one whose law is at TV >= tv from the target's fails with probability >= power. It covers the pair,
prompt, temperature and N it ran. Sources: speculative sampling, Leviathan et al. 2023
(arXiv:2211.17192, Algorithm 1); the G-test and its power, `verispec.testing.gtest`.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np

from ..reference.contract import RuleContractError
from ..reference.models import check_positive_int, check_prefix
from . import engine_stats, gtest
from ._internal.harness import check_number
from .assertions import LosslessnessError
from .engine_law import ConditionalTable, SpeculationClaim, expected_acceptance, target_law

__all__ = ["EngineCheckSettings", "EngineCounters", "EngineSample", "PairLaw", "EngineReport",
           "EngineLosslessnessError", "EngineContractError", "assert_engine_lossless", "SpeculationClaim",
           "DEFAULT_PROMPT", "exact_generate"]

#: The prompt every check starts from (token ids of the tiny pair's vocabulary).
DEFAULT_PROMPT = (2, 7, 11, 5)


@dataclass(frozen=True)
class EngineCheckSettings:
    """What `assert_engine_lossless` runs: the prompt, N tokens, the sampling temperature, the
    statistics (alpha: false-alarm rate of this check; power at TV >= tv), the seed handed to
    generate, and num_samples (default: `engine_stats.engine_sample_size`)."""

    prompt: tuple = DEFAULT_PROMPT
    num_tokens: int = 4
    temperature: float = 1.0
    tv: float = 0.05
    alpha: float = 1e-3
    power: float = gtest.POWER
    seed: int = 0
    num_samples: int | None = None

    def __post_init__(self):
        check_positive_int(self.num_tokens, "num_tokens")
        check_positive_int(self.seed, "seed", minimum=0)
        if self.num_samples is not None:
            check_positive_int(self.num_samples, "num_samples")
        for name in ("tv", "alpha", "power"):
            check_number(getattr(self, name), name, 0, 1)
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)) \
                or self.temperature < 0:
            raise ValueError(f"temperature: expected a number >= 0, got {self.temperature!r}")


@dataclass
class EngineCounters:
    """An engine's acceptance counters over one `generate` call (totals over its requests):
    iterations that verified a draft, draft tokens verified, draft tokens accepted, and (optional)
    accepted_per_position[j] = iterations that accepted at least j + 1 tokens."""

    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_per_position: tuple | None = None


@dataclass
class EngineSample:
    """What `generate` may return instead of a bare array: tokens [n, N] and the engine's counters."""

    tokens: object
    counters: EngineCounters | None = None


class PairLaw:
    """The exact float64 laws of a tiny pair at a prompt and temperature: ``target`` (a
    `ConditionalTable`), ``probs`` (the law of the first N tokens, [V^N]) and the draft's tables
    (`draft(greedy)`). Build once, reuse across checks of the same pair."""

    def __init__(self, pair, settings: EngineCheckSettings):
        self.pair, self.settings = pair, settings
        self.target = ConditionalTable(pair.target_path, settings.prompt, temperature=settings.temperature)
        check_prefix(settings.prompt, self.target.vocab_size, "prompt")
        self.probs = target_law(self.target, settings.num_tokens)  # [V^N]
        self.conditionals = [self.target.dense(i) for i in range(settings.num_tokens)]
        self._drafts: dict = {}

    def draft(self, greedy: bool) -> ConditionalTable:
        if greedy not in self._drafts:
            self._drafts[greedy] = ConditionalTable(self.pair.draft_path, self.settings.prompt,
                                                    temperature=self.settings.temperature, greedy=greedy)
        return self._drafts[greedy]

    def matches(self, settings: EngineCheckSettings) -> bool:
        s = self.settings
        return (s.prompt, s.num_tokens, s.temperature) == (settings.prompt, settings.num_tokens, settings.temperature)


def exact_generate(law: PairLaw):
    """A ``generate`` callable that samples the first N tokens straight from the exact law (an
    engine that is lossless by construction: the known-good baseline, e.g. for measuring the
    false-alarm rate). It ignores the prompt it is given (the law is that of ``law``'s prompt)."""
    V, N = law.target.vocab_size, law.settings.num_tokens
    probs = law.probs / law.probs.sum()

    def generate(prompt_ids, num_samples, num_tokens, seed):
        if num_tokens != N:
            raise ValueError(f"num_tokens: this sampler draws N = {N} tokens, got {num_tokens}")
        codes = np.random.default_rng(seed).choice(probs.size, size=num_samples, p=probs)
        return np.stack(np.unravel_index(codes, (V,) * N), axis=1)

    return generate


class EngineContractError(RuleContractError):
    """`generate` raised, or returned something that is not int [num_samples, num_tokens] of token
    ids in [0, V): a contract error (TypeError and ValueError), not a verdict on the engine's law."""


@dataclass
class EngineReport:
    """What `assert_engine_lossless` found (see `__str__`): the G-test of the joint law (n, cells,
    df after pooling, pooled mass, G, p-value at level alpha, the TV with power `power` incl. pooled
    mass, the plug-in TV), `positions` (`engine_stats.PositionReport`), `acceptance`
    (`engine_stats.AcceptanceReport` or None), wall times."""

    label: str
    settings: EngineCheckSettings
    n: int
    cells: int
    df: int
    pooled_mass: float
    statistic: float
    p_value: float
    detectable_tv: float
    empirical_tv: float
    impossible: int
    positions: list = field(default_factory=list)
    acceptance: object = None
    seconds: float = 0.0
    seconds_in_generate: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.impossible and self.p_value > self.settings.alpha

    def __str__(self) -> str:
        return "\n".join(_report_lines(self))

    def as_dict(self) -> dict:
        """A JSON-ready record: the settings, the test, the positions, the acceptance comparison."""
        record = {k: getattr(self, k) for k in ("label", "n", "cells", "df", "pooled_mass", "statistic", "p_value",
                                                 "detectable_tv", "empirical_tv", "impossible", "seconds",
                                                 "seconds_in_generate")}
        record.update(passed=self.passed, settings=asdict(self.settings),
                      tv_with_power=self.detectable_tv + self.pooled_mass,
                      positions=[asdict(r) for r in self.positions], acceptance=None)
        a = self.acceptance
        if a is not None:
            record["acceptance"] = {"claim": asdict(a.claim), "requests": a.n, "z": a.z, "p_value": a.p_value,
                                    "alpha": a.alpha, "consistent": a.consistent, "engine_totals": asdict(a.observed),
                                    "exact_per_request": asdict(a.expected)}
        return record


def _report_lines(report) -> list:
    s = report.settings
    verdict = "PASS (the G-test does not reject the target law)" if report.passed else "NOT lossless"
    lines = [f"{report.label}: {verdict}: alpha = {s.alpha:g}, power {s.power:g} at TV {s.tv:g} "
             f"(TV@power {report.detectable_tv + report.pooled_mass:.4f} incl. pooled mass "
             f"{report.pooled_mass:.4f}); n = {report.n:,} samples of N = {s.num_tokens} tokens, "
             f"T = {s.temperature:g}; G = {report.statistic:.2f}, "
             f"df = {report.df}, p = {report.p_value:.3g}; measured TV {report.empirical_tv:.4f}; "
             f"{report.seconds:.1f} s ({report.seconds_in_generate:.1f} s in generate)"]
    lines.append("  position  cond. TV  noise TV         G    df   p-value")
    lines += [f"  {r.position:>8}  {r.tv:>8.4f}  {r.null_tv:>8.4f}  {r.statistic:>8.2f}  {r.df:>4}  {r.p_value:>8.3g}"
              for r in report.positions]
    a = report.acceptance
    if a is not None:
        e, o = a.expected, a.observed
        kind = "greedy" if a.claim.greedy_draft else "sampled"
        lines.append(f"  acceptance per request (engine vs exact for the claimed rule, {kind} drafts of "
                     f"L = {a.claim.draft_length}): accepted {o.accepted_tokens / a.n:.4f} vs {e.accepted:.4f} "
                     f"(z = {a.z:.2f}, p = {a.p_value:.3g}{'' if a.consistent else ', DIFFERS'}); drafted tokens "
                     f"{o.draft_tokens / a.n:.4f} vs {e.draft_tokens:.4f}; drafts {o.drafts / a.n:.4f} vs "
                     f"{e.drafts:.4f}")
        if o.accepted_per_position is not None:
            pairs = ", ".join(f"{x / a.n:.4f} vs {y:.4f}" for x, y in zip(o.accepted_per_position, e.per_position))
            lines.append(f"  accepted at draft position 1..L per request: {pairs}")
    return lines


class EngineLosslessnessError(LosslessnessError):
    """The G-test rejected the target law (or an impossible sequence came out); ``report`` is the
    `EngineReport`."""

    def __init__(self, report: EngineReport):
        super().__init__(str(report), tv=report.empirical_tv, exact=False)
        self.report = report


def _call(generate, settings, n):
    """Run generate; returns (tokens int64 [n, N], counters or None, seconds)."""
    start = time.perf_counter()
    try:
        out = generate(tuple(settings.prompt), n, settings.num_tokens, settings.seed)
    except Exception as err:
        raise EngineContractError(f"generate raised {type(err).__name__}: {err}") from err
    seconds = time.perf_counter() - start
    counters = out.counters if isinstance(out, EngineSample) else None
    tokens = out.tokens if isinstance(out, EngineSample) else out
    if hasattr(tokens, "detach"):
        tokens = tokens.detach().cpu().numpy()
    tokens = np.asarray(tokens)
    if tokens.shape != (n, settings.num_tokens):
        raise EngineContractError(f"generate: expected shape [num_samples, num_tokens] = [{n}, {settings.num_tokens}], "
                                  f"got {list(tokens.shape)}")
    if tokens.dtype.kind not in "iu":
        raise EngineContractError(f"generate: expected integer token ids, got dtype {tokens.dtype}")
    return tokens.astype(np.int64), counters, seconds


def assert_engine_lossless(generate, pair, settings: EngineCheckSettings | None = None, *,
                           claim: SpeculationClaim | None = None, label: str = "engine",
                           law: PairLaw | None = None) -> EngineReport:
    """Check an engine's output law on the tiny `pair` against the exact target law (module docstring).

    Args:
        generate: ``(prompt_ids, num_samples, num_tokens, seed) -> int [num_samples, num_tokens]``
            (or an `EngineSample`), serving ``pair.target_path`` (with ``pair.draft_path`` as draft).
        pair: a `tiny_pair.TinyPair`. settings: an `EngineCheckSettings` (default: its defaults).
        claim: the rule the engine claims (for the acceptance comparison; needs counters).
        label: the report's name for this run. law: a `PairLaw` built for the same settings (reuse).

    Returns:
        the `EngineReport` (passed).

    Raises:
        EngineLosslessnessError (an AssertionError): the G-test rejects at level alpha.
        EngineContractError (TypeError and ValueError): generate raised or broke the contract.
        TypeError / ValueError: invalid settings (naming the field).
    """
    start = time.perf_counter()
    settings = EngineCheckSettings() if settings is None else settings
    law = law if law is not None and law.pair == pair and law.matches(settings) else PairLaw(pair, settings)
    V, N = law.target.vocab_size, settings.num_tokens
    n = settings.num_samples or engine_stats.engine_sample_size(law.probs, settings.tv, settings.alpha, settings.power)
    tokens, counters, in_generate = _call(generate, settings, n)
    if ((tokens < 0) | (tokens >= V)).any():
        raise EngineContractError(f"generate: token id outside [0, {V})")
    report = _report(law, tokens, settings, label)
    report.seconds_in_generate = in_generate
    if claim is not None and counters is not None:
        expected = expected_acceptance(law.target, law.draft(claim.greedy_draft), claim, N)
        report.acceptance = engine_stats.acceptance_test(claim, expected, counters, n, settings.alpha)
    report.seconds = time.perf_counter() - start
    if not report.passed:
        raise EngineLosslessnessError(report)
    return report


def _report(law, tokens, settings, label) -> EngineReport:
    """The G-test and the per-position diagnostics of sampled `tokens` [n, N]."""
    V = law.target.vocab_size
    n = tokens.shape[0]
    joint = engine_stats.joint_counts(tokens, V)  # [V^N]
    support = law.probs > 0
    test = gtest.g_test(joint[support], law.probs[support])
    impossible = int(joint[~support].sum())
    rng = np.random.default_rng([settings.seed, n])
    return EngineReport(
        label=label, settings=settings, n=n, cells=int(support.sum()), df=test.df,
        pooled_mass=gtest.pooled_mass(law.probs[support], n), statistic=test.statistic,
        p_value=0.0 if impossible else test.p_value,
        detectable_tv=gtest.detectable_tv(n, max(test.df, 0), settings.alpha, settings.power),
        empirical_tv=0.5 * float(np.abs(joint / n - law.probs).sum()), impossible=impossible,
        positions=engine_stats.position_reports(joint, law.probs, law.conditionals, rng))
