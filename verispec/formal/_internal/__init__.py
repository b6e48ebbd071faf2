"""Package-private pieces of `verispec.formal.prove`, shared with its point search and its workers.

`problem` (the symbolic models, programs, exploration and the query of one output), `laws` (the law
of an output read off the branch tree), `counterexamples` (rationalising and confirming a
solver's pair), `values` (solver pairs as Fractions), `source` (the Python that rebuilds the proved
method, for the reproducing code) and `cvc5_worker` (cvc5 on one query, run as a child script). Their names are public within `verispec.formal` only; users import from
`verispec.formal` (`prove`, `ProofResult`, `Counterexample`, `SymbolicModel`).
"""
