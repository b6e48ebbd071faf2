"""The chain drafter of the planted bugs whose drafts come from a processed draft law."""

from __future__ import annotations

from typing import Callable

import numpy as np

from ...reference.drafters import Drafter, draw_counts, node_by_node


def processed_chain(name: str, draft_length: int, process: Callable[[np.ndarray], np.ndarray], **params) -> Drafter:
    """A chain of L tokens, each drawn from process(q) (q [V]: the draft model's conditional);
    the draft's proposal is process(q), the law its tokens were drawn from. Logits processors
    applied to the draft do this (transformers issue #47932); the planted bugs then hand their
    verifier the raw q.

    Raises:
        TypeError / ValueError: draft_length not an int >= 1; no draft LanguageModel (on use).
    """
    def draft_node(q, k, rand):
        q = process(q)  # [V], the processed law drawn from
        return draw_counts(q, k, rand), q

    return node_by_node(name, draft_length, 1, draft_node, **params)
