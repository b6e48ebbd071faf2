"""An SGLang-style batched tree sampler (numpy), in the next-sibling layout, with thresholds.

`TreeRejectionSampler` verifies a draft tree top-down by recursive rejection over siblings: at
the current node with residual r (initially the target's p there) it tries the children in
sibling order; child x with proposal q is accepted with probability min(1, r(x) / q(x)); on a
rejection r becomes norm(max(r - q, 0)) and the next sibling is tried. An accepted child becomes
the current node (r = p after it); when every child is rejected the correction token is drawn
from r, and at a leaf the bonus token from p after the leaf.

For a deterministic tree (children chosen, not drawn; ``draft_probs`` None or
``target_only=True``) q is the point mass on each child: the rule is then "sample the target and
follow the tree", the law of SGLang's ``tree_speculative_sampling_target_only``, and the residual
after a rejection is p with the rejected siblings removed.

``threshold_single`` and ``threshold_acc`` (as SGLang names them; 1.0 = exact) relax the rule:
a child is also accepted when p(x) >= threshold_single, and the ratio is divided by
threshold_acc. Below 1 the sampler accepts more greedily and its law is not the target's.

Sources: recursive rejection sampling, Chen et al. 2023 (arXiv:2302.01318), Miao et al. 2024
(SpecInfer, arXiv:2305.09781), Jeon et al. 2024 (without replacement, arXiv:2402.14160);
tree verification of deterministic trees, Li et al. 2024 (EAGLE, arXiv:2401.15077).
"""

from __future__ import annotations

import numpy as np

from .tree_exact import tree_sampler_tv
from .tree_layout import emitted_from_accept_index, next_sibling_layout, parents_layout, tree_depth

__all__ = ["TreeRejectionSampler", "reference_tree_sampler", "parents_tree_sampler", "categorical"]


def categorical(probs, uniforms) -> np.ndarray:
    """Inverse-CDF draws: probs float [rows, V] (rows with positive mass), uniforms [rows] in
    [0, 1) -> int64 [rows]. A zero-probability tail is never drawn (the CDF is renormalised)."""
    cdf = np.cumsum(probs, axis=-1)  # [rows, V]
    cdf = cdf / cdf[:, -1:]
    return np.minimum((cdf <= uniforms[:, None]).sum(axis=-1), probs.shape[-1] - 1)


class TreeRejectionSampler:
    """``sampler(candidates, retrive_next_token, retrive_next_sibling, draft_probs, target_probs,
    generator) -> output_ids`` in the next-sibling layout (`verispec.testing.tree_layout`).

    Args (of the call): candidates int [batch, M + 1] (index 0 the root); retrive_next_token,
    retrive_next_sibling int [batch, M + 1]; draft_probs float [batch, M + 1, V] (row j: the law
    node j was drawn from; row 0 unused) or None; target_probs float [batch, M + 1, V];
    generator: numpy.random.Generator. Returns int64 [batch, D + 1] (D the deepest path): the
    accepted tokens, the correction / bonus token, then -1.

    Args (of the constructor):
        threshold_single, threshold_acc: in (0, 1]; 1.0 is exact (see the module docstring).
        target_only: ignore draft_probs (a deterministic tree); None = only when it is None.

    Subclasses override `residual`, `proposal` or `bonus_row` (the planted bugs of
    `verispec.testing.planted_trees` do).
    """

    def __init__(self, threshold_single: float = 1.0, threshold_acc: float = 1.0, target_only: bool | None = None):
        for name, value in (("threshold_single", threshold_single), ("threshold_acc", threshold_acc)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise ValueError(f"{name}: must be a number in (0, 1], got {value!r}")
        self.threshold_single, self.threshold_acc = float(threshold_single), float(threshold_acc)
        self.target_only = target_only

    @property
    def lossy(self) -> bool:
        """True when a threshold is below 1: the sampler declares itself lossy (the tree harness
        then reports it LOSSY with its TV, not NOT lossless)."""
        return self.threshold_single < 1 or self.threshold_acc < 1

    def exact_tv(self, drafter, target, draft, context=(), num_tokens: int = 2):
        """TV of this rule's law from the target's, by exact enumeration (`verispec.testing.tree_exact`),
        with `drafter`'s trees at the instance (target, draft, context, N); None for a subclass that
        overrides a step (a planted bug: its rule is not the one enumerated)."""
        base = TreeRejectionSampler
        if any(getattr(type(self), step) is not getattr(base, step) for step in ("proposal", "residual", "bonus_row",
                                                                                 "_accept", "_final")):
            return None
        return tree_sampler_tv((self.threshold_single, self.threshold_acc), drafter, target, draft, context,
                               num_tokens, self.target_only)

    # -- the three steps a planted bug changes --------------------------------------------------

    def proposal(self, draft_probs, rows, child, tokens, target_only, vocab_size):
        """float [rows, V]: the law the children were drawn from (a point mass when target_only)."""
        if target_only:
            return np.eye(vocab_size)[tokens]
        return draft_probs[rows, child]

    def residual(self, r, q):
        """norm(max(r - q, 0)) [rows, V] after rejecting a child drawn from q."""
        out = np.maximum(r - q, 0.0)
        total = out.sum(-1, keepdims=True)
        return np.where(total > 0, out / np.where(total > 0, total, 1.0), r)

    def bonus_row(self, current, previous):
        """The index whose target row the bonus token is drawn from (after the leaf reached)."""
        return current

    # -- the walk --------------------------------------------------------------------------------

    def __call__(self, candidates, retrive_next_token, retrive_next_sibling, draft_probs, target_probs, generator):
        predicts, accept_index, num = self.verify(candidates, retrive_next_token, retrive_next_sibling, draft_probs,
                                                  target_probs, generator)
        return emitted_from_accept_index(predicts, accept_index, num)

    def verify(self, candidates, next_token, next_sibling, draft_probs, target_probs, generator):
        """SGLang-style outputs: (predicts int64 [batch (M + 1)], accept_index int64 [batch, D + 1],
        accept_token_num int64 [batch]); see `verispec.testing.tree_layout`."""
        candidates, next_token, next_sibling = np.asarray(candidates), np.asarray(next_token), np.asarray(next_sibling)
        target_probs = np.asarray(target_probs, dtype=np.float64)
        B, M1, V = target_probs.shape
        target_only = draft_probs is None if self.target_only is None else self.target_only
        draft_probs = None if draft_probs is None else np.asarray(draft_probs, dtype=np.float64)
        D = int(tree_depth(parents_layout(next_token, next_sibling)).max(initial=0))
        rows = np.arange(B)
        current, previous = np.zeros(B, dtype=np.int64), np.zeros(B, dtype=np.int64)
        r = target_probs[:, 0].copy()  # [batch, V]
        child = next_token[:, 0].copy()  # the sibling being tried (-1: none left)
        accept_index = np.full((B, D + 1), -1, dtype=np.int64)
        accept_index[:, 0] = rows * M1
        num = np.zeros(B, dtype=np.int64)
        predicts = np.full(B * M1, -1, dtype=np.int64)
        while (child >= 0).any():
            live = np.flatnonzero(child >= 0)
            c = child[live]
            x = candidates[live, c]
            q = self.proposal(draft_probs, live, c, x, target_only, V)  # [live, V]
            accept = self._accept(r[live], q, x, target_probs[live, current[live], x], generator)
            a, j = live[accept], live[~accept]
            predicts[a * M1 + current[a]] = x[accept]
            previous[a], current[a] = current[a], c[accept]
            num[a] += 1
            accept_index[a, num[a]] = a * M1 + current[a]
            r[a] = target_probs[a, current[a]]
            child[a] = next_token[a, current[a]]
            r[j] = self.residual(r[j], q[~accept])
            child[j] = next_sibling[j, c[~accept]]
        self._final(predicts, r, current, previous, next_token, target_probs, generator)
        return predicts, accept_index, num

    def _accept(self, r, q, tokens, p_single, generator):
        """Accept child x when u < r(x) / (q(x) threshold_acc), or p(x) >= threshold_single."""
        k = np.arange(len(tokens))
        u = generator.random(len(tokens))
        return (u * q[k, tokens] * self.threshold_acc < r[k, tokens]) | (p_single >= self.threshold_single)

    def _final(self, predicts, r, current, previous, next_token, target_probs, generator):
        """The correction token (children all rejected: from r) or bonus token (at a leaf)."""
        B, M1, _ = target_probs.shape
        rows = np.arange(B)
        leaf = next_token[rows, current] < 0
        law = np.where(leaf[:, None], target_probs[rows, self.bonus_row(current, previous)], r)
        predicts[rows * M1 + current] = categorical(law, generator.random(B))


def reference_tree_sampler(candidates, retrive_next_token, retrive_next_sibling, draft_probs, target_probs, generator):
    """The exact `TreeRejectionSampler` (thresholds 1.0): lossless for drawn trees (with their
    proposals) and for deterministic trees (draft_probs None). Same call and return as
    `TreeRejectionSampler`."""
    return TreeRejectionSampler()(candidates, retrive_next_token, retrive_next_sibling, draft_probs, target_probs,
                                  generator)


def parents_tree_sampler(tokens, parents, draft_probs, target_probs, generator, sampler=None):
    """`reference_tree_sampler` (or `sampler`, a next-sibling-layout callable) in the parents layout
    (EAGLE, vLLM): converts with `verispec.testing.tree_layout.next_sibling_layout`.

    Args:
        tokens, parents: int [batch, M]; draft_probs: float [batch, M, V] or None;
        target_probs: float [batch, M + 1, V]; generator: numpy.random.Generator.

    Returns:
        int64 [batch, D + 1], as `TreeRejectionSampler`.
    """
    tokens = np.asarray(tokens)
    next_token, next_sibling = next_sibling_layout(parents)
    candidates = np.concatenate([np.zeros_like(tokens[:, :1]), tokens], axis=1)  # the root's token is never read
    if draft_probs is not None:
        draft_probs = np.asarray(draft_probs)
        draft_probs = np.concatenate([np.zeros_like(draft_probs[:, :1]), draft_probs], axis=1)
    return (sampler or reference_tree_sampler)(candidates, next_token, next_sibling, draft_probs, target_probs,
                                               generator)
