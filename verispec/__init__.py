"""verispec: verify verifiers for speculative decoding of LLMs.

Subpackages: `verispec.reference` (numpy; the single source of truth for every algorithm),
`verispec.theory` (LP certificates, closed forms), `verispec.empirical` (torch, real models),
`verispec.testing` (strategies and assertions for users' pytest suites).
"""

__version__ = "0.1.0"
