"""The installed transformers' own speculative sampler, checked by the chain harness in one call.

`transformers.generation.utils._speculative_sampling` (Leviathan et al. 2023, arXiv:2211.17192,
Algorithm 1) verifies one row: ``(candidate_input_ids [1, L], candidate_logits [1, L, V],
candidate_length, new_logits [1, L + 1, V]) -> (valid_tokens [1, n + 1], n_matches)``, drawing
from torch's global RNG. Recent versions add ``assistant_ensemble_weight`` w: DIVERSE static
ensemble verification (arXiv:2604.07622), which accepts with v / q where v = w p + (1 - w) q, a
relaxation that is lossy by design.

`as_harness_sampler` drives it row by row under `verispec.testing.assert_sampler_lossless`
(backend "torch"): the logits of the whole batch are computed once, the global RNG is seeded once
per batch from the harness's generator (inside ``torch.random.fork_rng``, so the caller's stream
is untouched) and each call gets views of the batch, so the per-row cost is the function's own.
`check_speculative_sampling` runs the check and returns a `SamplingVerdict`; in the DIVERSE mode
the sampler is declared lossy, and the verdict carries the exact TV of the same rule on the same
instance (`verispec.reference.methods.static_ensemble`, enumerated exactly) beside the measured one.
"""

from __future__ import annotations

import inspect
from dataclasses import replace

import numpy as np

from ..reference import exact, methods
from ..testing import gtest
from .verdict import IntegrationError, SamplingVerdict, run_sampler_check

__all__ = ["FUNCTION", "ENSEMBLE_ARGUMENT", "IntegrationError", "speculative_sampling_function", "supports_ensemble",
           "as_harness_sampler", "check_speculative_sampling", "SamplingVerdict", "reference_tv"]

#: What this adapter looks for in the installed transformers.
FUNCTION = "transformers.generation.utils._speculative_sampling"
#: The DIVERSE ensemble argument of that function (absent before it was added).
ENSEMBLE_ARGUMENT = "assistant_ensemble_weight"


def speculative_sampling_function():
    """The installed ``transformers.generation.utils._speculative_sampling``.

    Raises:
        IntegrationError: transformers is not installed, or the function is not there (the
            message names what was looked for and the installed version).
    """
    try:
        import transformers  # optional dependency
        from transformers.generation import utils
    except ImportError as err:
        raise IntegrationError(f"{FUNCTION}: transformers is not importable ({err}); pip install transformers") from err
    module_name, _, name = FUNCTION.rpartition(".")
    fn = getattr(utils, name, None)
    if not callable(fn):
        raise IntegrationError(f"{FUNCTION} was not found in the installed transformers {transformers.__version__} "
                               f"(module {module_name}); it may have been renamed or moved: the adapter "
                               "verispec.integrations.transformers must be updated")
    return fn


def supports_ensemble(fn=None) -> bool:
    """True when the function takes ``assistant_ensemble_weight`` (DIVERSE ensemble verification)."""
    fn = speculative_sampling_function() if fn is None else fn
    return ENSEMBLE_ARGUMENT in inspect.signature(fn).parameters


def as_harness_sampler(assistant_ensemble_weight: float | None = None, function=None):
    """transformers' single-row function in the chain harness's canonical signature (backend "torch").

    Args:
        assistant_ensemble_weight: None (standard speculative sampling) or w in (0, 1) (DIVERSE).
        function: the function to drive (default: `speculative_sampling_function()`).

    Returns:
        ``fn(draft_ids, draft_probs, target_probs, generator) -> output_ids`` (see
        `verispec.testing.assert_sampler_lossless`).

    Raises:
        IntegrationError: the function is missing, or lacks ``assistant_ensemble_weight`` when w is given.
        ValueError: w outside (0, 1).
    """
    import torch  # optional dependency

    fn = speculative_sampling_function() if function is None else function
    extra = {}
    if assistant_ensemble_weight is not None:
        if not supports_ensemble(fn):
            raise IntegrationError(f"{FUNCTION} of the installed transformers has no {ENSEMBLE_ARGUMENT} argument")
        if isinstance(assistant_ensemble_weight, bool) or not 0 < assistant_ensemble_weight < 1:
            raise ValueError(f"assistant_ensemble_weight: must be in (0, 1), got {assistant_ensemble_weight!r}")
        extra[ENSEMBLE_ARGUMENT] = float(assistant_ensemble_weight)

    def sampler(draft_ids, draft_probs, target_probs, generator):
        B, L = draft_ids.shape
        draft_logits, target_logits = torch.log(draft_probs), torch.log(target_probs)  # softmax gives the probs back
        out = np.full((B, L + 1), -1, dtype=np.int64)
        seed = int(torch.randint(0, 2 ** 62, (1,), generator=generator))
        with torch.random.fork_rng(devices=[]), torch.inference_mode():
            torch.manual_seed(seed)
            for b in range(B):  # the function verifies one row per call
                valid, _ = fn(draft_ids[b:b + 1], draft_logits[b:b + 1], L, target_logits[b:b + 1], **extra)
                tokens = valid.tolist()[0]
                out[b, :len(tokens)] = tokens
        return out

    sampler.__qualname__ = FUNCTION + (f"({ENSEMBLE_ARGUMENT}={assistant_ensemble_weight})" if extra else "")
    sampler.lossy = bool(extra)  # DIVERSE's ensemble is lossy by design: the harness says LOSSY, not NOT lossless
    return sampler


def check_speculative_sampling(mode: str = "standard", assistant_ensemble_weight: float = 0.5, *,
                               tv: float = 0.05, alpha: float = gtest.ALPHA, power: float = gtest.POWER,
                               **harness) -> SamplingVerdict:
    """Run `assert_sampler_lossless` on the installed transformers' `_speculative_sampling`.

    Args:
        mode: "standard" (must pass) or "diverse" (``assistant_ensemble_weight`` = w; lossy by design).
        tv, alpha, power: as in `assert_sampler_lossless` (power >= `power` at TV >= tv).
        harness: further keyword arguments of `assert_sampler_lossless` (vocab_sizes, families, ...).

    Returns:
        a `SamplingVerdict` (a rejection is a verdict, not an exception).

    Raises:
        ValueError: unknown mode. IntegrationError: see `as_harness_sampler`.
    """
    if mode not in ("standard", "diverse"):
        raise ValueError(f"mode: expected 'standard' or 'diverse', got {mode!r}")
    fn = as_harness_sampler(assistant_ensemble_weight if mode == "diverse" else None)
    verdict = run_sampler_check(fn, mode, tv=tv, alpha=alpha, power=power, **harness)
    if mode == "diverse" and verdict.report.results:
        exact_tv = reference_tv(verdict.report.results[-1].instance, assistant_ensemble_weight,
                                harness.get("draft_length", 2))
        verdict = replace(verdict, exact_tv=exact_tv)
    return verdict


def reference_tv(instance, ensemble_weight: float, draft_length: int = 2) -> float:
    """The exact TV from the target of DIVERSE's static ensemble with weight w (the rule transformers
    runs for ``assistant_ensemble_weight`` = w) on a harness `instance`: the law of its first N
    tokens by exact enumeration of `verispec.reference.methods.static_ensemble(L, w)`."""
    method = methods.static_ensemble(draft_length, ensemble_weight)
    law = exact.output_distribution(instance.target, instance.draft, method, instance.context, instance.num_tokens)
    return float(exact.total_variation(law, exact.target_distribution(instance.target, instance.context,
                                                                      instance.num_tokens)))
