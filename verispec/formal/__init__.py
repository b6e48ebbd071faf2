"""Formal proofs of losslessness: symbolic execution of the same rule code + SMT (z3).

    from verispec.formal import prove
    result = prove("token", vocab_size=2, draft_length=2)   # for EVERY target/draft pair at V=2, L=2
    assert result.proved, result.summary()

`verispec.reference.exact` and `verispec check` compute the exact law on chosen instances; `prove`
runs the rule on symbolic probabilities (`Sym`) so that one run covers every point of the closed
simplex, and asks z3 whether any pair makes the law differ (`prove`, `ProofResult`).
`prove_all_vocab` (`verispec.formal.cutoff`) answers for every vocabulary size, where the rule's
watched run meets the cutoff criterion (docs/prove.md, "For every V").
"""

from .cutoff import CutoffResult, prove_all_vocab
from .prove import Counterexample, ProofResult, Query, SymbolicModel, prove
from .symbolic import Sym, SymbolicError

__all__ = ["prove", "ProofResult", "Query", "Counterexample", "SymbolicModel", "Sym", "SymbolicError",
           "prove_all_vocab", "CutoffResult"]
