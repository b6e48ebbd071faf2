"""Theory: closed forms, LP certificates (cvxpy) and draft-tree optimisation, cross-checked
against `verispec.reference` enumeration. Importable without torch."""
