"""Package-private pieces of `verispec.formal.prove`, shared with its point search and helper process.

`problem` (the symbolic models, programs, exploration and the query of one output), `laws` (the law
of an output read off the branch tree) and `counterexamples` (rationalising and confirming a
solver's pair). Their names are public within `verispec.formal` only; users import from
`verispec.formal` (`prove`, `ProofResult`, `Counterexample`, `SymbolicModel`).
"""
