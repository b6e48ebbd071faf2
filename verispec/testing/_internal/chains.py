"""The chain drafter of the planted bugs whose drafts come from a processed draft law."""

from __future__ import annotations

from typing import Callable

import numpy as np

from ...reference.drafters import Draft, Drafter, draw_counts, require_draft_model
from ...reference.models import check_positive_int


def processed_chain(name: str, draft_length: int, process: Callable[[np.ndarray], np.ndarray], **params) -> Drafter:
    """A chain of L tokens, each drawn from process(q) (q [V]: the draft model's conditional);
    the draft's proposal is process(q), the law its tokens were drawn from. Logits processors
    applied to the draft do this (transformers issue #47932); the planted bugs then hand their
    verifier the raw q.

    Raises:
        TypeError / ValueError: draft_length not an int >= 1; no draft LanguageModel (on use).
    """
    L = check_positive_int(draft_length, "draft_length")

    def build(draft_model, context, rand):
        model = require_draft_model(draft_model, name)

        def expand(node, k):
            if len(node) == L:
                return (), None
            q = process(model.probs(context + node))  # [V], the processed law drawn from
            return draw_counts(q, k, rand), q

        return Draft(1, expand, rand)

    return Drafter(name, build, draft_length=L, **params)
