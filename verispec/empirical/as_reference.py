"""A real causal LM seen as a reference `LanguageModel`: the exact engine on torch models.

`TorchLanguageModel(lm, temperature)` answers `probs(prefix)` with the engine's own
`verispec.empirical.drafters.probabilities` of ONE cache-free forward over the whole prefix,
memoised per prefix. No KV cache is involved, so the reference side cannot share a cache bug with
the decoder it checks: `verispec.reference.exact` computes exact laws (e.g. E[tau | context],
`exact.expected_accepted_length`) on the very models a torch decoder runs, which exposes draft-side
cache desyncs (they lower acceptance without breaking losslessness: no output-law test sees them).
`warm(contexts, depth)` fills the memo in a few batched forwards.

Only practical for tiny vocabularies: the enumerator visits up to V^depth prefixes per context.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from ..reference.models import LanguageModel, check_prefix
from .drafters import probabilities
from .model import CausalLM
from .validation import check_temperature

__all__ = ["TorchLanguageModel"]


class TorchLanguageModel(LanguageModel):
    """`lm` at temperature T as a prefix -> probabilities oracle (float64 [V]).

    Args:
        lm: a `CausalLM`. temperature: T >= 0 (0: greedy point mass).
        batch_size: the most sequences one batched forward of `warm` runs.

    Raises:
        TypeError: `lm` is not a `CausalLM`, or a non-number temperature.
        ValueError: a negative / non-finite temperature; `probs(())` (a causal LM without a
            beginning-of-sequence token has no conditional for the empty prefix).
    """

    def __init__(self, lm: CausalLM, temperature: float = 1.0, batch_size: int = 4096):
        if not isinstance(lm, CausalLM):
            raise TypeError(f"lm: expected a CausalLM, got {type(lm).__name__}")
        temperature = check_temperature(temperature, "temperature")
        super().__init__(lm.vocab_size)
        self.lm, self.temperature, self.batch_size = lm, temperature, int(batch_size)

    def _forward_last(self, prefixes: list[tuple[int, ...]]) -> np.ndarray:
        """Equal-length prefixes -> probs [n, V] at their last position (batched, no cache)."""
        ids = torch.tensor(prefixes, dtype=torch.long, device=self.lm.device)  # [n, length]
        with torch.inference_mode():
            logits = self.lm.model(input_ids=ids, use_cache=False).logits[:, -1]  # [n, V]
        return probabilities(logits.float(), self.temperature).cpu().numpy()  # the decoder's own p

    def _compute(self, prefix):
        if not prefix:
            raise ValueError("prefix: a causal LM has no conditional for the empty prefix; start from a "
                             "non-empty context")
        return self._forward_last([prefix])[0]

    def warm(self, contexts, depth: int) -> int:
        """Memoise probs at every context + s, s any token sequence of length 0..depth >= 0, for
        `contexts` non-empty token-id sequences, in batched forwards of equal-length prefixes (an
        exact enumeration then reads table entries); returns the number of prefixes computed."""
        todo: dict[int, list] = {}
        for context in contexts:
            context = check_prefix(context, self.vocab_size, "contexts")
            if not context:
                raise ValueError("contexts: every context must be non-empty")
            for d in range(depth + 1):
                for tail in itertools.product(range(self.vocab_size), repeat=d):
                    prefix = context + tail
                    if prefix not in self._cache:
                        todo.setdefault(len(prefix), []).append(prefix)
        computed = 0
        for group in todo.values():
            group = list(dict.fromkeys(group))  # [n] distinct prefixes of one length
            for start in range(0, len(group), self.batch_size):
                chunk = group[start:start + self.batch_size]
                for prefix, p in zip(chunk, self._forward_last(chunk)):
                    self._cache[prefix] = p
                computed += len(chunk)
        return computed

    def __repr__(self):
        return f"TorchLanguageModel({self.lm.name!r}, temperature={self.temperature!r})"
