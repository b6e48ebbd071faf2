"""The law of the set of distinct tokens among K drafts at one position.

The multi-draft verifiers that select one draft from the SET of distinct drafted tokens
(`verifiers.importance`), and the one-step bounds and LPs of `verispec.theory`, need the exact law
of that set under the drafts the reference drafters really make. It lives here, at the bottom
layer, so that the reference verifiers need nothing from `verispec.theory`.
"""

from __future__ import annotations

from . import drafters, models
from .models import check_positive_int
from .deprecation import renamed_keywords
from .probability import as_probs
from .randomness import enumerate_law


@renamed_keywords(num_drafts="num_paths")
def draft_set_law(q, num_paths: int, replacement: bool = True) -> dict:
    """The law of the SET of distinct tokens among K drafts from q: {sorted token tuple: prob}.

    The drafts are those of the reference drafters — `drafters.iid_paths` (i.i.d., with
    replacement) or `drafters.paths_without_replacement` (successive draws over the unused tokens,
    fewer than K when q has fewer positive tokens) — and the law is their exact enumeration, so
    the bounds built on it speak of the drafts the methods really use. Exact for Fraction q.

    Args:
        q: draft distribution [V] (float64 or Fraction). num_paths: K >= 1.
        replacement: True for i.i.d. drafts, False for drafts without replacement.

    Raises:
        TypeError / ValueError: q not a distribution, K < 1.
    """
    K = check_positive_int(num_paths, "num_paths")
    drafter = (drafters.iid_paths if replacement else drafters.paths_without_replacement)(1, K)
    draft_model = models.iid(as_probs(q, "q"))
    return enumerate_law(lambda rand: drafter(draft_model, (), rand).child_set(())).law
