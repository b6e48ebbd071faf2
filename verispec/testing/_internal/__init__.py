"""Package-private pieces of `verispec.testing`, shared by its harnesses.

`arguments` (reading a sequence argument: vocabulary sizes, temperatures, families), `instances`
(checking a user's list of `Instance`s, for `assert_lossless` and the sampler harnesses) and
`harness` (what the chain harness `verispec.testing.sampler` and the tree harness
`verispec.testing.tree_sampler` share: the backend conversion, the exact target law as an array,
the sampling and G-test of one instance, the failure message). Their names are public within
`verispec.testing` only; users import from `verispec.testing`.
"""
