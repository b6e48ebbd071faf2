"""An SGLang-style tree-verification kernel, wrapped for `assert_tree_sampler_lossless` in a few lines.

`sglang_style_kernel` has the argument list of SGLang's ``tree_speculative_sampling_target_only``
(outputs written in place; uniforms supplied by the caller; the next-sibling layout of
`verispec.testing.tree_layout`), written here in numpy for illustration: it verifies a
deterministic draft tree by one coin per level, accepting the first sibling whose cumulative
target probability reaches the coin (sampling the target and following the tree), and draws the
correction token from p with the rejected siblings removed, or the bonus token at a leaf.
``threshold_single`` / ``threshold_acc`` below 1 accept more greedily and are lossy.

`as_harness_sampler(kernel, **thresholds)` is all an engine team writes to check its own kernel:
allocate the outputs, draw the uniforms from the harness's generator, call, convert.

    python3 examples/sglang_style_tree_sampler.py     # exact passes; thresholds < 1 reported lossy

Sources: Li et al. 2024 (EAGLE, arXiv:2401.15077) for deterministic trees; Chen et al. 2023
(arXiv:2302.01318) for the residual.
"""

from __future__ import annotations

import numpy as np

from verispec.reference import drafters
from verispec.reference.static_trees import static_shape
from verispec.testing import SamplerLosslessnessError, assert_tree_sampler_lossless
from verispec.testing.tree_layout import emitted_from_accept_index, parents_layout, retrive_index, tree_depth


def sglang_style_kernel(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                        retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
                        draft_probs=None, threshold_single=1.0, threshold_acc=1.0):
    """Target-only tree verification (draft_probs is not read), batched over rows, in place.

    Shapes: predicts int [batch (M + 1)]; accept_index int [batch, S]; accept_token_num int [batch];
    candidates, retrive_index, retrive_next_token, retrive_next_sibling int [batch, M + 1];
    uniform_samples float [batch, M + 1] (one coin per accepted node); uniform_samples_for_final_sampling
    float [batch]; target_probs float [batch, M + 1, V].
    """
    B, _, V = target_probs.shape
    rows = np.arange(B)
    cur, num = np.zeros(B, dtype=np.int64), np.zeros(B, dtype=np.int64)
    acc, removed = np.zeros(B), np.zeros((B, V))  # cumulative p of tried siblings; their p, removed at the end
    coin = uniform_samples[:, 0].copy()
    child = retrive_next_token[:, 0].copy()
    accept_index[:, 0] = retrive_index[:, 0]
    while (child >= 0).any():
        live = np.flatnonzero(child >= 0)
        c = child[live]
        x = candidates[live, c]
        p_x = target_probs[live, cur[live], x]
        acc[live] += p_x
        ok = (coin[live] <= acc[live] / threshold_acc) | (p_x >= threshold_single)
        a, j = live[ok], live[~ok]
        predicts[retrive_index[a, cur[a]]] = x[ok]
        cur[a], num[a] = c[ok], num[a] + 1
        accept_index[a, num[a]] = retrive_index[a, cur[a]]
        coin[a], acc[a], removed[a] = uniform_samples[a, cur[a]], 0.0, 0.0
        child[a] = retrive_next_token[a, cur[a]]
        removed[j, x[~ok]] = p_x[~ok]
        child[j] = retrive_next_sibling[j, c[~ok]]
    p = target_probs[rows, cur]  # [batch, V]
    residual = np.maximum(p - removed, 0.0)
    residual = np.where(residual.sum(-1, keepdims=True) > 0, residual, p)  # round-off: every sibling rejected
    cdf = np.cumsum(residual, -1)
    cdf /= cdf[:, -1:]
    token = np.minimum((cdf <= uniform_samples_for_final_sampling[:, None]).sum(-1), V - 1)
    predicts[retrive_index[rows, cur]] = token
    accept_token_num[:] = num


def as_harness_sampler(kernel=sglang_style_kernel, **thresholds):
    """The harness's next-sibling signature around an SGLang-style kernel."""

    def sampler(candidates, retrive_next_token, retrive_next_sibling, draft_probs, target_probs, generator):
        B, M1, _ = target_probs.shape
        depth = int(tree_depth(parents_layout(retrive_next_token, retrive_next_sibling)).max())
        predicts = np.full(B * M1, -1, dtype=np.int64)
        accept_index = np.full((B, depth + 1), -1, dtype=np.int64)
        accept_token_num = np.zeros(B, dtype=np.int64)
        kernel(predicts, accept_index, accept_token_num, candidates, retrive_index(B, M1), retrive_next_token,
               retrive_next_sibling, generator.random((B, M1)), generator.random(B), target_probs, draft_probs,
               **thresholds)
        return emitted_from_accept_index(predicts, accept_index, accept_token_num)

    sampler.__qualname__ = f"sglang_style_kernel({', '.join(f'{k}={v}' for k, v in thresholds.items())})"
    return sampler


def main(tv=0.01):
    tree = drafters.ranked_tree(static_shape("eagle", 4, 2))
    print(assert_tree_sampler_lossless(as_harness_sampler(), drafter=tree, layout="next_sibling", tv=tv))
    for thresholds in ({"threshold_acc": 0.5}, {"threshold_single": 0.3}):
        try:
            assert_tree_sampler_lossless(as_harness_sampler(**thresholds), drafter=tree, layout="next_sibling", tv=tv)
        except SamplerLosslessnessError as err:
            r = err.result
            print(f"{thresholds}: lossy on {r.instance.label} (V = {r.instance.vocab_size}), empirical TV "
                  f"{r.empirical_tv:.4f}; alpha {r.alpha:.3g} per instance, power {err.report.power} at TV {tv}, "
                  f"n = {r.n:,}")
        else:
            raise SystemExit(f"{thresholds}: expected lossy, the harness passed it")


if __name__ == "__main__":
    main()
