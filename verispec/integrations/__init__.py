"""Adapters that check other libraries' own samplers with verispec's harnesses.

- `verispec.integrations.transformers`: the installed transformers'
  ``transformers.generation.utils._speculative_sampling``, checked by
  `verispec.testing.assert_sampler_lossless` (``verispec check-sampler transformers``).
- `verispec.integrations.check_sampler`: that command's arguments and verdicts.

Each adapter imports its library inside its functions: importing this package loads none of them.
"""

__all__ = ["transformers"]
