"""The lossless speed options of the torch engine: each makes a draft or a forward cheaper without
changing the target's law p (the output law of every lossless verifier).

- `quantize`: an int8-weight copy of the DRAFT model (``dq=8``; any draft is a valid q, so the
  output law is unchanged; Leviathan et al. 2023, arXiv 2211.17192, Thm. 1).
- `draftvocab`: the draft's LM head over a token subset S (``dv=k``; FR-Spec, arXiv 2502.14856).
- `lean_forward`: the draft's forward run by the engine in fewer ops, q/k/v and gate/up each one
  stacked linear (``df=lean``; int8 outputs unchanged, so q is the same draft's); the target's too
  (``tf=lean``; p unchanged up to float rounding).
- `linear_layout`: the target's linear layers as ``(W @ X^T)^T`` for a verification forward's few
  rows on CPU, optionally zero-padded to a power of two (``lin=wx`` / ``lin=wxpad``), or in
  bfloat16 through weights packed once for oneDNN (``lin=packed``).
- `attention`: per-row (varlen) attention over a packed batch, EMS-SD's unpadded layout as
  compute (arXiv 2405.07542); `counting_cache`: a KV cache that counts the slots it writes.
- `hardware`: the dtype a host runs fastest in (``--dtype auto``: bf16 only where it is native)
  and what the host can do.

Nothing is imported here: import the module you need (each imports torch, `hardware` only lazily).
"""
