"""A black-box statistical check of a batched speculative sampler: `assert_sampler_lossless`.

`assert_lossless` enumerates a rule written against verispec's reference API; production code (a
batched torch/numpy kernel with its own RNG, such as an engine's rejection sampler) is a black box:

1. it takes toy target/draft pairs (the default sweep of `assert_lossless`, or your instances);
2. it runs the draft-verify loop for ``n`` rows at once: it drafts L tokens from q, gives your
   function the batch, appends what it emits, and repeats until every row has N tokens;
3. it compares the empirical joint law of the first N emitted tokens with the exact target law
   (`verispec.reference.exact.target_distribution`) by a G-test (`verispec.testing.gtest`).

The sample size ``n`` per instance is computed, not guessed: the smallest n for which the level
``alpha / num_instances`` G-test has power >= ``power`` against every law at total variation
>= ``tv`` (defaults: alpha = 1e-6 over the whole run, power 0.9 at TV 0.01). Sparse cells are
pooled and the report states what that costs (power holds at TV >= tv + pooled mass). Any
emitted sequence of probability 0 fails at once.

A statistical check, not a proof: a correct sampler fails with probability <= alpha (by the
G-test's chi-square approximation); one at TV >= tv (+ pooled mass) from the target on an
instance passes with probability <= 1 - power. Smaller bugs, or bugs needing sizes the instances do not reach, can pass.

The contract: `assert_sampler_lossless`. Sources: speculative sampling, Leviathan et al. 2023 (arXiv:2211.17192, Algorithm 1) and Chen et al.
2023 (arXiv:2302.01318, Algorithm 2); the G-test and its power, see `verispec.testing.gtest`.
"""

from __future__ import annotations

import numpy as np

from ..reference.models import check_positive_int
from . import gtest
from ._internal.harness import (Backend, HarnessSettings, TimedLoop, call_contract, check_callable, harness_instances,
                                run_harness, sample_instance)
from ._internal.verdicts import (PLACEHOLDER, InstanceResult, SamplerContractError, SamplerLosslessnessError,
                                 SamplerReport, check_output, contract_error, sampler_name)
from .sweeps import DEFAULT_FAMILIES

__all__ = ["assert_sampler_lossless", "reference_sampler", "SamplerReport", "InstanceResult",
           "SamplerLosslessnessError", "SamplerContractError", "PLACEHOLDER"]

_MAX_CODE = 2 ** 62  # prefixes are encoded as base-(V+1) integers in int64


# --------------------------------------------------------------------------------------------------
# a correct batched sampler (numpy), the known-good baseline

def _categorical(probs, uniforms):
    """Inverse-CDF draws: probs [rows, V] (rows sum to > 0), uniforms [rows] in [0, 1) -> [rows]."""
    cdf = np.cumsum(probs, axis=-1)  # [rows, V]
    cdf = cdf / cdf[:, -1:]  # the last entry is exactly 1, so a zero-probability tail is never drawn
    return (cdf <= uniforms[:, None]).sum(axis=-1)


def reference_sampler(draft_ids, draft_probs, target_probs, generator):
    """Speculative sampling for a batch of chains (numpy), in the harness's canonical signature.

    Accept draft token x_i with probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection
    emit a correction token ~ norm(max(p_i - q_i, 0)); if all L are accepted emit a bonus token
    ~ p_L. Leviathan et al. 2023 (arXiv:2211.17192, Algorithm 1); Chen et al. 2023
    (arXiv:2302.01318, Algorithm 2).

    Args:
        draft_ids: int64 [batch, L]. draft_probs: float [batch, L, V].
        target_probs: float [batch, L + 1, V]. generator: numpy.random.Generator.

    Returns:
        int64 [batch, L + 1]: accepted tokens, the correction/bonus token, then -1 padding.
    """
    B, L = draft_ids.shape
    rows = np.arange(B)
    p_x = np.take_along_axis(target_probs[:, :L], draft_ids[..., None], -1)[..., 0]  # [batch, L]
    q_x = np.take_along_axis(draft_probs, draft_ids[..., None], -1)[..., 0]  # [batch, L]
    accept = generator.random((B, L)) * q_x < p_x  # u < p/q without dividing by q  # [batch, L]
    tau = np.where(accept.all(axis=1), L, np.argmin(accept, axis=1))  # accepted length  # [batch]
    p_last = target_probs[rows, tau]  # [batch, V]
    q_last = np.where((tau < L)[:, None], draft_probs[rows, np.minimum(tau, L - 1)], 0.0)  # [batch, V]
    residual = np.maximum(p_last - q_last, 0.0)  # = p_L for a bonus token  # [batch, V]
    residual = np.where(residual.sum(-1, keepdims=True) > 0, residual, p_last)
    out = np.where(np.arange(L)[None, :] < tau[:, None], draft_ids, PLACEHOLDER)  # [batch, L]
    out = np.concatenate([out, np.full((B, 1), PLACEHOLDER)], axis=1)  # [batch, L + 1]
    out[rows, tau] = _categorical(residual, generator.random(B))
    return out


# --------------------------------------------------------------------------------------------------
# the draft-verify loop on many independent rows

class _PrefixTable:
    """A model's probabilities at many rows' prefixes, computed once per distinct prefix."""

    def __init__(self, model, context, vocab_size, width):
        self.model, self.context, self.V = model, context, vocab_size
        self.powers = (vocab_size + 1) ** np.arange(width, dtype=np.int64)  # [width]
        self.cache: dict = {}

    def probs(self, tokens):
        """tokens: int64 [rows, width], each row a prefix then -1 padding -> float64 [rows, V]."""
        codes = (tokens + 1) @ self.powers  # a distinct code per prefix (padding adds 0)  # [rows]
        unique, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
        table = np.empty((len(unique), self.V))  # [num_distinct, V]
        for i, (code, row) in enumerate(zip(unique.tolist(), first.tolist())):
            if code not in self.cache:
                prefix = tuple(int(t) for t in tokens[row] if t >= 0)
                self.cache[code] = np.asarray(self.model.probs(self.context + prefix), dtype=np.float64)
            table[i] = self.cache[code]
        return table[inverse.reshape(-1)]


def _validate(out, draft_ids, where):
    """Check the output contract (`check_output`, then: the accepted tokens are the draft's first
    ones); returns int64 [batch, L + 1] and the emitted counts [batch]."""
    A, L = draft_ids.shape
    arrays = {"draft_ids": draft_ids}
    out, k = check_output(out, ((A, L + 1), "[batch, L + 1]"), where, arrays)
    accepted = np.arange(L)[None, :] < (k - 1)[:, None]  # [batch, L]
    bad = np.flatnonzero((accepted & (out[:, :L] != draft_ids)).any(axis=1))
    if bad.size:
        raise contract_error("output: the accepted tokens (all but the last emitted) must equal draft_ids[:tau]",
                             where, int(bad[0]), {**arrays, "output": out})
    return out, k


class _Loop(TimedLoop):
    """Runs the draft-verify loop with the function under test on one instance."""

    def __init__(self, fn, inst, backend, L, tables):
        super().__init__()
        self.fn, self.inst, self.backend, self.L = fn, inst, backend, L
        self.where = (sampler_name(fn), inst)
        self.target_table, self.draft_table = tables

    def _draft(self, emitted, length, draft_rng):
        """Draft L tokens from q for each row; returns draft_ids, q and p (see the module docstring)."""
        A, L, V, N = len(length), self.L, self.inst.vocab_size, self.inst.num_tokens
        work = np.full((A, N - 1 + L), PLACEHOLDER, dtype=np.int64)  # prefix + drafted tokens
        work[:, :N - 1] = emitted[:, :N - 1]
        draft_ids = np.empty((A, L), dtype=np.int64)  # [batch, L]
        q = np.empty((A, L, V))  # [batch, L, V]
        p = np.empty((A, L + 1, V))  # [batch, L + 1, V]
        for i in range(L + 1):
            p[:, i] = self.target_table.probs(work)
            if i == L:
                break
            q[:, i] = self.draft_table.probs(work)
            draft_ids[:, i] = _categorical(q[:, i], draft_rng.random(A))
            work[np.arange(A), length + i] = draft_ids[:, i]
        return draft_ids, q, p

    def _call(self, draft_ids, q, p, generator):
        args = [self.backend.array(a) for a in (draft_ids, q, p)]
        out = self.call_fn(self.fn, args, generator, call_contract(self.where))
        return _validate(self.backend.output(out), draft_ids, self.where)

    def run(self, rows, draft_rng, generator):
        """`rows` independent runs -> their first N tokens, int64 [rows, N]."""
        L, N = self.L, self.inst.num_tokens
        emitted = np.full((rows, N + L), PLACEHOLDER, dtype=np.int64)  # [rows, N + L]
        length = np.zeros(rows, dtype=np.int64)  # [rows]
        while True:
            active = np.flatnonzero(length < N)  # [A]
            if not active.size:
                return emitted[:, :N]
            draft_ids, q, p = self._draft(emitted[active], length[active], draft_rng)
            out, k = self._call(draft_ids, q, p, generator)
            keep = np.arange(L + 1)[None, :] < k[:, None]  # [A, L + 1]
            cols = length[active][:, None] + np.arange(L + 1)[None, :]  # [A, L + 1]
            emitted[np.repeat(active, k), cols[keep]] = out[keep]
            length[active] += k


# --------------------------------------------------------------------------------------------------
# the check

def _run_instance(fn, inst, index, settings, alpha_i, L):
    """Sample, test and return an `InstanceResult` (plus the two laws for a failure report)."""
    if inst.draft is None:
        raise ValueError(f"instances: {inst.label} has no draft model; the harness drafts from it")
    V, N = inst.vocab_size, inst.num_tokens
    if (V + 1) ** (N - 1 + L) >= _MAX_CODE:
        raise ValueError(f"num_tokens: (V + 1)^(N - 1 + L) = {V + 1}^{N - 1 + L} is too large for the harness")

    def make_loop():
        tables = tuple(_PrefixTable(m, inst.context, V, N - 1 + L) for m in (inst.target, inst.draft))
        return _Loop(fn, inst, settings.backend, L, tables)

    fields, empirical, law = sample_instance(inst, index, settings, alpha_i, make_loop)
    return InstanceResult(**fields), empirical, law


def assert_sampler_lossless(fn, *, backend: str = "numpy", draft_length: int = 2, num_tokens: int | None = None,
                            vocab_sizes=(2, 3), temperatures=(1, 0, 0.5), families=DEFAULT_FAMILIES,
                            target=None, draft=None, context=(), instances=None, alpha: float = gtest.ALPHA,
                            power: float = gtest.POWER, tv: float = gtest.TV, num_samples: int | None = None,
                            seed: int = 0, batch_size: int = 65_536, dtype=None, device="cpu",
                            min_expected: float = gtest.MIN_EXPECTED) -> SamplerReport:
    """Check a batched speculative sampler by sampling: the law of its first N emitted tokens must
    be the target's (G-test, stated false-alarm rate and power; adapters for vLLM- and HF-style
    functions in ``examples/``). The contract::

        fn(draft_ids, draft_probs, target_probs, generator) -> output_ids
            draft_ids:    int64   [batch, L]        tokens drawn from draft_probs
            draft_probs:  float   [batch, L, V]     q(. | prefix + draft[:i]) for i < L
            target_probs: float   [batch, L + 1, V] p(. | prefix + draft[:i]) for i <= L
            generator:    numpy.random.Generator (backend "numpy") or torch.Generator ("torch")
            output_ids:   int     [batch, L + 1]    the accepted draft tokens, then one correction
                          or bonus token, then -1 padding (vLLM's placeholder convention)

    Args:
        fn: the function above. Wrap other signatures with an adapter (see ``examples/``).
        backend: "numpy" (arrays, a numpy Generator) or "torch" (tensors, a torch.Generator).
        draft_length: L >= 1 tokens drafted per call.
        num_tokens: N >= 1 tokens compared; default L + 2 (two iterations: bonus-token bugs show).
        vocab_sizes, temperatures, families, seed: the instances, as `assert_lossless`'s sweep.
        target, draft, context: a single instance instead (LanguageModels over one vocabulary).
        instances: your own `Instance`s instead (their ``num_tokens`` is replaced by N).
        alpha: false-alarm rate of the whole run, split over the instances (Bonferroni).
        power, tv: the power against every law at total variation >= tv (`InstanceResult.detectable_tv`).
        num_samples: runs per instance; default the least n with `power` at `tv` (`gtest`).
        batch_size: rows per call of `fn` (rows still running; memory is O(batch_size L V)).
        dtype, device: the probabilities' dtype (numpy: float64, torch: float32) and torch device.
        min_expected: the G-test's pooling threshold.

    Returns:
        a `SamplerReport` (per instance: n, df, pooled mass, G, p-value, detectable TV, seconds).

    Raises:
        SamplerLosslessnessError (a `LosslessnessError`, an AssertionError): an impossible
            sequence was emitted, or the G-test rejected at level alpha / num_instances.
        SamplerContractError (a RuleContractError; TypeError and ValueError, not an AssertionError):
            the function raised or broke the output contract.
        TypeError / ValueError: invalid arguments, naming the argument.
    """
    check_callable(fn)
    converter = Backend(backend, dtype, device)
    L = check_positive_int(draft_length, "draft_length")
    N = L + 2 if num_tokens is None else check_positive_int(num_tokens, "num_tokens")
    settings = HarnessSettings(alpha, power, tv, num_samples, seed, batch_size, min_expected, converter)
    todo = harness_instances(target, draft, context, instances, (vocab_sizes, temperatures, families, settings.seed), N)
    report = SamplerReport(alpha=settings.alpha, power=settings.power, tv=settings.tv)
    return run_harness(fn, todo, lambda index, inst, alpha_i: _run_instance(fn, inst, index, settings, alpha_i, L),
                       report)
