"""Package-private pieces of `verispec.testing`, shared by its harnesses.

`arguments` (reading a sequence argument: vocabulary sizes, temperatures, families), `instances`
(checking a user's list of `Instance`s, for `assert_lossless` and the sampler harnesses), and the
one core of the chain harness `verispec.testing.sampler` and the tree harness
`verispec.testing.tree_sampler`: `harness` (the backend conversion, the checked settings of a run,
the exact target law as an array, the sampling and G-test of one instance, the run over the
instances) and `verdicts` (the function's name, the contract errors and the output checks, the
per-instance result, the report, the NOT lossless / LOSSY verdict). Their names are public within
`verispec.testing` only; users import from `verispec.testing` (the errors, the report and
`PLACEHOLDER` are re-exported by `verispec.testing.sampler`).
"""
