"""A black-box statistical check of a batched TREE (multi-draft) sampler: `assert_tree_sampler_lossless`.

The chain harness (`verispec.testing.sampler`) hands a sampler one drafted chain per row; engines
(EAGLE, vLLM, SGLang) verify draft trees in a flattened node layout. This harness:

1. takes toy target/draft pairs (the default sweep of `assert_lossless`, or your instances);
2. runs the draft-verify loop for ``n`` rows at once: each row's tree is drawn by a reference
   drafter (`verispec.reference.drafters`: ``iid_paths``, ``paths_without_replacement``,
   ``ranked_tree``, ``opt_tree``; exact tree laws from `verispec.testing.tree_draws`), the batch
   goes to your function in the parents or next-sibling layout (`verispec.testing.tree_layout`),
   what it emits is appended, until every row has N tokens;
3. compares the empirical law of the first N emitted tokens with the exact target law by a
   G-test (`verispec.testing.gtest`), with the sample size from alpha and power as the chain
   harness computes it.

A statistical check, not a proof: a correct sampler fails with probability <= alpha (by the
G-test's chi-square approximation); one at TV >= tv (+ pooled mass) from the target on an
instance passes with probability <= 1 - power.

Sources: tree / multi-draft speculative sampling, Miao et al. 2024 (SpecInfer, arXiv:2305.09781),
Jeon et al. 2024 (arXiv:2402.14160), Li et al. 2024 (EAGLE, arXiv:2401.15077); the G-test and its
power, see `verispec.testing.gtest`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..reference.models import check_positive_int
from . import gtest
from ._internal.harness import (Backend, HarnessSettings, TimedLoop, call_contract, check_callable, harness_instances,
                                run_harness, sample_instance)
from ._internal.verdicts import (PLACEHOLDER, InstanceResult, SamplerReport, check_output, contract_error,
                                 sampler_name)
from .sweeps import DEFAULT_FAMILIES
from .tree_draws import (DETERMINISTIC_DRAFTERS, check_drafter, drafter_depth, flat_tree_law, parent_distributions,
                         proposals, target_rows)
from .tree_layout import next_sibling_layout

__all__ = ["assert_tree_sampler_lossless", "TreeSamplerReport", "LAYOUTS"]

#: The calling conventions the harness speaks (see `assert_tree_sampler_lossless`).
LAYOUTS = ("parents", "next_sibling")

_MAX_CODE = 2 ** 62  # prefixes and paths are encoded as base-(V+1) integers in int64


@dataclass
class TreeSamplerReport(SamplerReport):
    """`SamplerReport` of `assert_tree_sampler_lossless`, plus the drafter and the layout."""

    drafter: str = ""
    layout: str = "parents"

    harness = "assert_tree_sampler_lossless"

    def setting_lines(self) -> list:
        return [f"  drafter {self.drafter}, layout {self.layout!r}"]


@dataclass(frozen=True)
class _TreeSetting:
    """What the tree harness adds to `HarnessSettings`: the reference drafter drawing the trees,
    whether deterministic trees carry the soft q (`deterministic_draft_probs="soft"`), the layout."""

    drafter: object
    soft: bool
    layout: str


@dataclass
class _Entry:
    """One drafted tree at one prefix, as arrays: tokens / parents int64 [M], q float [M, V] or
    None, p float [M + 1, V], depth, codes int64 [M] (each node's root path, base V + 1)."""

    tokens: np.ndarray
    parents: np.ndarray
    q: np.ndarray | None
    p: np.ndarray
    depth: int
    codes: np.ndarray


class _Trees:
    """The drafter's tree law at every prefix the loop reaches, computed once per prefix."""

    def __init__(self, inst, drafter, soft, width, code_width):
        self.inst, self.drafter, self.soft, self.width = inst, drafter, soft, width
        self.name = check_drafter(drafter)
        self.V = inst.vocab_size
        self.powers = (self.V + 1) ** np.arange(max(width, code_width), dtype=np.int64)
        self.entries: list[_Entry] = []
        self.laws: dict = {}  # prefix code -> (entry ids, cumulative probabilities)
        self.sizes: list[int] = []  # nodes of each entry

    def _entry(self, tree, prefix):
        model, deterministic = self.inst.draft, self.name in DETERMINISTIC_DRAFTERS
        full = self.inst.context + prefix
        if deterministic:
            q = parent_distributions(tree, model, full) if self.soft else None
        else:
            q = proposals(tree, self.name, model, full)
        tokens, parents = np.array(tree.tokens, dtype=np.int64), np.array(tree.parents, dtype=np.int64)
        paths = [tree.path(i) for i in range(tree.num_nodes)]
        codes = np.array([sum((t + 1) * int(self.powers[j]) for j, t in enumerate(path)) for path in paths],
                         dtype=np.int64)
        return _Entry(tokens, parents, q, target_rows(tree, self.inst.target, full), int(tree.depths().max()), codes)

    def law(self, code, row_tokens):
        if code not in self.laws:
            prefix = tuple(int(t) for t in row_tokens if t >= 0)
            law = flat_tree_law(self.drafter, self.inst.draft, self.inst.context + prefix)
            ids = []
            for tree in law:
                self.entries.append(self._entry(tree, prefix))
                self.sizes.append(tree.num_nodes)
                ids.append(len(self.entries) - 1)
            self.laws[code] = (np.array(ids), np.cumsum([float(v) for v in law.values()]))
        return self.laws[code]

    def draw(self, prefixes, rng):
        """prefixes int64 [rows, width] (-1 padded) -> the entry id drawn for each row [rows]."""
        codes = (prefixes + 1) @ self.powers[:self.width]
        unique, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
        out = np.empty(len(codes), dtype=np.int64)
        for i, (code, row) in enumerate(zip(unique.tolist(), first.tolist())):
            ids, cdf = self.law(code, prefixes[row])
            rows = np.flatnonzero(inverse.reshape(-1) == i)
            pick = np.searchsorted(cdf, rng.random(len(rows)) * cdf[-1], side="right")
            out[rows] = ids[np.minimum(pick, len(ids) - 1)]
        return out


def _layout_args(layout, tokens, parents, q, p, root_tokens):
    """The function's array arguments in `layout` (see `assert_tree_sampler_lossless`)."""
    if layout == "parents":
        return tokens, parents, q, p
    next_token, next_sibling = next_sibling_layout(parents)
    candidates = np.concatenate([root_tokens[:, None], tokens], axis=1)  # [batch, M + 1]
    q = None if q is None else np.concatenate([np.zeros_like(q[:, :1]), q], axis=1)  # row 0: the root
    return candidates, next_token, next_sibling, q, p


def _validate(out, batch, where, powers):
    """Check the output contract (`check_output`, then: the accepted tokens are a root path of the
    row's tree); returns int64 [batch, D + 1] and the emitted counts [batch]. `batch` = (tokens,
    parents, node codes, row of each node's tree, row's tree index, depth)."""
    tokens, parents, codes, code_tree, row_tree, D = batch
    arrays = {"tokens": tokens, "parents": parents}
    out, k = check_output(out, ((len(tokens), D + 1), "[batch, max_depth + 1]"), where, arrays)
    accepted = np.arange(D)[None, :] < (k - 1)[:, None]  # [batch, D]
    row_code = (np.where(accepted, out[:, :D], PLACEHOLDER) + 1) @ powers[:D]  # [batch]
    span = int(powers[D])  # every code of a path of length <= D is below it
    in_tree = (k == 1) | np.isin(row_tree * span + row_code, code_tree * span + codes)
    if not in_tree.all():
        raise contract_error("output: the accepted tokens (all but the last emitted) are not a root path of the tree",
                             where, int(np.flatnonzero(~in_tree)[0]), {**arrays, "output": out})
    return out, k


class _Loop(TimedLoop):
    """Runs the draft-verify loop with the function under test on one instance."""

    def __init__(self, fn, inst, trees, convert, layout):
        super().__init__()
        self.fn, self.inst, self.trees, self.convert, self.layout = fn, inst, trees, convert, layout
        self.where = (sampler_name(fn), inst)

    def _batch(self, entry_ids):
        """Stack the drawn trees of one size: arrays for the call and for `_validate`."""
        unique, inverse = np.unique(entry_ids, return_inverse=True)
        inverse = inverse.reshape(-1)
        es = [self.trees.entries[e] for e in unique.tolist()]
        tokens = np.stack([e.tokens for e in es])[inverse]  # [batch, M]
        parents = np.stack([e.parents for e in es])[inverse]  # [batch, M]
        q = None if es[0].q is None else np.stack([e.q for e in es])[inverse]  # [batch, M, V]
        p = np.stack([e.p for e in es])[inverse]  # [batch, M + 1, V]
        codes = np.concatenate([e.codes for e in es])
        code_tree = np.repeat(np.arange(len(es)), [len(e.codes) for e in es])
        return (tokens, parents, q, p), (tokens, parents, codes, code_tree, inverse, max(e.depth for e in es))

    def _call(self, entry_ids, root_tokens, generator):
        (tokens, parents, q, p), check = self._batch(entry_ids)
        args = [self.convert.array(a) for a in _layout_args(self.layout, tokens, parents, q, p, root_tokens)]
        out = self.call_fn(self.fn, args, generator, call_contract(self.where))
        return _validate(self.convert.output(out), check, self.where, self.trees.powers)

    def run(self, rows, draft_rng, generator):
        """`rows` independent runs -> their first N tokens, int64 [rows, N]."""
        N, D = self.inst.num_tokens, drafter_depth(self.trees.drafter)
        emitted = np.full((rows, N + D + 1), PLACEHOLDER, dtype=np.int64)
        length = np.zeros(rows, dtype=np.int64)
        last = self.inst.context[-1] if self.inst.context else 0
        while True:
            active = np.flatnonzero(length < N)
            if not active.size:
                return emitted[:, :N]
            entry_ids = self.trees.draw(emitted[active, :N - 1], draft_rng)
            sizes = np.array(self.trees.sizes)[entry_ids]  # nodes of each row's tree
            for size in np.unique(sizes).tolist():  # one call per tree size: no padding nodes
                rows_m = active[sizes == size]
                roots = np.where(length[rows_m] > 0, emitted[rows_m, np.maximum(length[rows_m] - 1, 0)], last)
                out, k = self._call(entry_ids[sizes == size], roots, generator)
                keep = np.arange(out.shape[1])[None, :] < k[:, None]
                cols = length[rows_m][:, None] + np.arange(out.shape[1])[None, :]
                emitted[np.repeat(rows_m, k), cols[keep]] = out[keep]
                length[rows_m] += k


def _run_instance(fn, inst, index, settings, alpha_i, tree):
    """Sample, test and return an `InstanceResult` (plus the two laws for a failure report);
    `tree`: the `_TreeSetting`."""
    V, N, D = inst.vocab_size, inst.num_tokens, drafter_depth(tree.drafter)
    if (V + 1) ** max(N - 1, D + 1) >= _MAX_CODE // 2 ** 20:
        raise ValueError(f"num_tokens: (V + 1)^max(N - 1, depth + 1) is too large for the harness (V = {V}, N = {N})")

    def make_loop():
        trees = _Trees(inst, tree.drafter, tree.soft, N - 1, D + 1)
        return _Loop(fn, inst, trees, settings.backend, tree.layout)

    fields, empirical, law = sample_instance(inst, index, settings, alpha_i, make_loop)
    return InstanceResult(**fields), empirical, law


def _tree_setting(fn, drafter, layout, deterministic_draft_probs) -> _TreeSetting:
    """The tree harness's own arguments, checked (TypeError / ValueError naming each)."""
    check_callable(fn)
    check_drafter(drafter)
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
    if deterministic_draft_probs not in ("none", "soft"):
        raise ValueError(f"deterministic_draft_probs: expected 'none' or 'soft', got {deterministic_draft_probs!r}")
    return _TreeSetting(drafter, deterministic_draft_probs == "soft", layout)


def assert_tree_sampler_lossless(fn, *, drafter, layout: str = "parents", deterministic_draft_probs: str = "none",
                                 backend: str = "numpy", num_tokens: int | None = None, vocab_sizes=(2, 3),
                                 temperatures=(1, 0, 0.5), families=DEFAULT_FAMILIES, target=None, draft=None,
                                 context=(), instances=None, alpha: float = gtest.ALPHA, power: float = gtest.POWER,
                                 tv: float = gtest.TV, num_samples: int | None = None, seed: int = 0,
                                 batch_size: int = 65_536, dtype=None, device="cpu",
                                 min_expected: float = gtest.MIN_EXPECTED) -> TreeSamplerReport:
    """Check a batched tree sampler by sampling (G-test of the first N emitted tokens' law against
    the target's, stated alpha and power; see the module docstring). Layout "parents" (EAGLE, vLLM)::

        fn(tokens, parents, draft_probs, target_probs, generator) -> output_ids
            tokens:       int64 [batch, M]          node tokens, breadth first
            parents:      int64 [batch, M]          parent node, -1 for the root's children
            draft_probs:  float [batch, M, V]       node i's proposal (the law it was drawn from),
                          or None for a deterministic tree (ranked_tree, opt_tree)
            target_probs: float [batch, M + 1, V]   row 0 at the root, row i + 1 after node i
            generator:    numpy.random.Generator (backend "numpy") or torch.Generator ("torch")
            output_ids:   int   [batch, D + 1]      the accepted path's node tokens, one correction
                          or bonus token, then -1 (D = the deepest path in the batch)

    layout "next_sibling" (SGLang; `verispec.testing.tree_layout`)::

        fn(candidates, retrive_next_token, retrive_next_sibling, draft_probs, target_probs, generator)
            candidates: int64 [batch, M + 1] (index 0 the root: the last emitted token); node i is
            index i + 1 in every array; draft_probs [batch, M + 1, V] (row 0 zeros) or None.

    One call per tree size M (rows are never padded with fake nodes). Args:
        fn: the function above. drafter: a reference drafter drawing the trees (`iid_paths(L, K)`,
            `paths_without_replacement(L, K)`, `ranked_tree(static_shape(...))`, `opt_tree(...)`).
            layout: "parents" or "next_sibling".
        deterministic_draft_probs: "none" (deterministic trees get draft_probs None) or "soft"
            (the draft model's distribution at each node's parent, what an EAGLE-style drafter
            ranked the children by; a correct sampler must not use it as a proposal).
        num_tokens: N >= 1 tokens compared; default the tree's depth + 2 (two iterations at least).
        backend, dtype, device, vocab_sizes, temperatures, families, target, draft, context,
            instances, alpha, power, tv, num_samples, seed, batch_size, min_expected: as in
            `assert_sampler_lossless` (alpha for the whole run, Bonferroni over the instances).

    Returns a `TreeSamplerReport` (``print(report)`` gives a table). Raises:
        SamplerLosslessnessError (an AssertionError): an impossible sequence was emitted, or the
            G-test rejected at level alpha / num_instances (its ``result.empirical_tv`` is the TV).
            A sampler whose ``lossy`` attribute is True is reported LOSSY rather than NOT lossless;
            one with an ``exact_tv(drafter, target, draft, context, num_tokens)`` method (as
            `TreeRejectionSampler`) gets its exact TV on the failing instance beside the measured
            one (the error's ``exact_tv``).
        SamplerContractError (TypeError and ValueError): the function raised, or its output has the
            wrong shape or dtype, a token outside the vocabulary, no token, or an accepted prefix
            that is not a root path of the row's tree.
        TypeError / ValueError: invalid arguments, naming the argument.
    """
    tree = _tree_setting(fn, drafter, layout, deterministic_draft_probs)
    converter = Backend(backend, dtype, device)
    N = drafter_depth(drafter) + 2 if num_tokens is None else check_positive_int(num_tokens, "num_tokens")
    settings = HarnessSettings(alpha, power, tv, num_samples, seed, batch_size, min_expected, converter)
    todo = harness_instances(target, draft, context, instances, (vocab_sizes, temperatures, families, settings.seed),
                             N, no_draft="the drafter drafts from it")
    report = TreeSamplerReport(settings.alpha, settings.power, settings.tv, drafter=repr(drafter), layout=layout)
    return run_harness(fn, todo, lambda index, inst, alpha_i: _run_instance(fn, inst, index, settings, alpha_i, tree),
                       report, lambda result: {"setting": f" with {drafter!r}",
                                               "exact_tv": _exact_tv(fn, result, drafter, tree.soft)})


def _exact_tv(fn, result, drafter, soft: bool):
    """The exact TV of a rejected sampler's rule on the failing instance: its
    ``exact_tv(drafter, target, draft, context, num_tokens)``, or None when it has none, returns
    None, or the trees carried soft draft_probs its exact rule does not model."""
    exact_tv = getattr(fn, "exact_tv", None)
    if not callable(exact_tv) or soft:
        return None
    inst = result.instance
    return exact_tv(drafter, inst.target, inst.draft, inst.context, inst.num_tokens)
