"""Converters between the two flattened tree layouts engines use, batched (numpy).

* **parents** (EAGLE, vLLM): nodes 0..M-1 (breadth first, ``parents[i] < i``), ``parents[b, i]``
  the index of node i's parent, -1 for a child of the root; ``target_probs[b, 0]`` is the
  target's distribution at the root and ``target_probs[b, i + 1]`` the one after node i.
* **next_sibling** (SGLang's ``tree_speculative_sampling_target_only``): M + 1 "draft tokens"
  per row, index 0 the root (the last verified token), node i at index i + 1;
  ``retrive_next_token[b, j]`` is j's first child and ``retrive_next_sibling[b, j]`` its next
  sibling (-1: none); ``retrive_index[b, j] = b (M + 1) + j`` indexes flat per-token buffers
  such as ``predicts``; ``target_probs[b, j]`` is the distribution after index j (the same array
  as in the parents layout).

An SGLang-style kernel reports ``accept_index [batch, S]`` (retrive indices of the accepted
nodes, the root first), ``accept_token_num [batch]`` (accepted draft tokens) and
``predicts [batch (M + 1)]`` (at each accepted index, the token that follows it: the next
accepted token, or the correction / bonus token after the last); `emitted_from_accept_index`
turns that into the harness's padded output.
"""

from __future__ import annotations

import numpy as np

from ._internal.verdicts import PLACEHOLDER  # padding after a row's last emitted token (vLLM's PLACEHOLDER_TOKEN_ID)

__all__ = ["next_sibling_layout", "parents_layout", "retrive_index", "tree_depth", "emitted_from_accept_index",
           "PLACEHOLDER"]


def _check_parents(parents) -> np.ndarray:
    parents = np.asarray(parents)
    if parents.ndim != 2 or parents.dtype.kind not in "iu":
        raise ValueError(f"parents: expected an int array [batch, num_nodes], got {parents.dtype} {parents.shape}")
    if parents.shape[1] and ((parents < -1) | (parents >= np.arange(parents.shape[1])[None, :])).any():
        raise ValueError("parents: every node's parent must be -1 or an earlier node (parents[b, i] < i)")
    return parents.astype(np.int64)


def next_sibling_layout(parents) -> tuple[np.ndarray, np.ndarray]:
    """parents [batch, M] -> (retrive_next_token, retrive_next_sibling), each int64 [batch, M + 1]
    in SGLang indexing (0 = the root, node i at i + 1; -1 = none). Siblings keep node order.

    Raises:
        ValueError: `parents` is not [batch, M] with ``-1 <= parents[b, i] < i``.
    """
    parents = _check_parents(parents)
    B, M = parents.shape
    rows = np.arange(B)
    next_token = np.full((B, M + 1), -1, dtype=np.int64)
    next_sibling = np.full((B, M + 1), -1, dtype=np.int64)
    for i in range(M - 1, -1, -1):  # prepend in reverse order: each list ends up in node order
        parent = parents[:, i] + 1
        next_sibling[:, i + 1] = next_token[rows, parent]
        next_token[rows, parent] = i + 1
    return next_token, next_sibling


def parents_layout(retrive_next_token, retrive_next_sibling) -> np.ndarray:
    """The inverse of `next_sibling_layout`: int64 parents [batch, M] (-1 = child of the root).

    Raises:
        ValueError: arrays of different shapes, or a node no list reaches.
    """
    next_token = np.asarray(retrive_next_token, dtype=np.int64)
    next_sibling = np.asarray(retrive_next_sibling, dtype=np.int64)
    if next_token.ndim != 2 or next_token.shape != next_sibling.shape:
        raise ValueError(f"retrive_next_token: expected [batch, M + 1] like retrive_next_sibling, got "
                         f"{next_token.shape} and {next_sibling.shape}")
    B, M1 = next_token.shape
    rows = np.arange(B)
    parents = np.full((B, M1), -2, dtype=np.int64)  # index 0 (the root) is dropped at the end
    for j in range(M1):
        child = next_token[:, j].copy()
        while (child >= 0).any():
            has = child >= 0
            parents[rows[has], child[has]] = j - 1
            child[has] = next_sibling[rows[has], child[has]]
    if (parents[:, 1:] == -2).any():
        raise ValueError("retrive_next_token: a node is not reached from the root")
    return parents[:, 1:]


def retrive_index(batch: int, num_draft_tokens: int) -> np.ndarray:
    """int64 [batch, num_draft_tokens]: b * num_draft_tokens + j (SGLang's flat token index)."""
    return np.arange(batch * num_draft_tokens, dtype=np.int64).reshape(batch, num_draft_tokens)


def tree_depth(parents) -> np.ndarray:
    """int64 [batch]: the longest root-to-node path of each row's tree (0 for no nodes)."""
    parents = _check_parents(parents)
    B, M = parents.shape
    depth = np.zeros((B, M + 1), dtype=np.int64)  # column 0: the root
    rows = np.arange(B)
    for i in range(M):
        depth[:, i + 1] = depth[rows, parents[:, i] + 1] + 1
    return depth.max(axis=1)


def emitted_from_accept_index(predicts, accept_index, accept_token_num) -> np.ndarray:
    """SGLang-style outputs -> the harness's output: int64 [batch, S], the accepted tokens and
    the correction / bonus token, then -1 (``out[b, j] = predicts[accept_index[b, j]]`` for
    ``j <= accept_token_num[b]``).

    Args:
        predicts: int [batch (M + 1)] (or [batch, M + 1]). accept_index: int [batch, S],
            retrive indices. accept_token_num: int [batch], accepted draft tokens (< S).

    Raises:
        ValueError: inconsistent shapes or an accept_token_num outside [0, S).
    """
    predicts = np.asarray(predicts).reshape(-1)
    accept_index = np.asarray(accept_index, dtype=np.int64)
    num = np.asarray(accept_token_num, dtype=np.int64).reshape(-1)
    if accept_index.ndim != 2 or num.shape != (accept_index.shape[0],):
        raise ValueError(f"accept_index: expected [batch, S] and accept_token_num [batch], got "
                         f"{accept_index.shape} and {num.shape}")
    S = accept_index.shape[1]
    if ((num < 0) | (num >= S)).any():
        raise ValueError(f"accept_token_num: must lie in [0, {S})")
    keep = np.arange(S)[None, :] <= num[:, None]  # [batch, S]
    out = np.full(accept_index.shape, PLACEHOLDER, dtype=np.int64)
    out[keep] = predicts[accept_index[keep]]
    return out
