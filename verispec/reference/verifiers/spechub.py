"""SpecHub (Sun et al. 2024, "SpecHub: Provable Acceleration to Multi-Draft Speculative
Decoding", arXiv 2411.05289, EMNLP 2024; public code
MasterGodzilla/Speculative_decoding_OT: `Sequoia/utils.py::sampling_a_and_i` (drafts) and
`EAGLE/eagle/model/utils.py::evaluate_posterior`, mode 'spechub' (verification)).

Two drafts with a "hub": a = argmax q. The pair (first, second) is drawn as: first ~ q; if
first == a, second ~ q(. | != a), else second = a. So the ordered pair has law
Q(i, a) = q(i) and Q(a, i) = q(a) q(i) / (1 - q(a)) for i != a (the two drafts always differ).
Verification, for target p (written here from that code):

    q_ia(i) = q(i) (i != a), q_ai(i) = q(a) q(i) / (1 - q(a)) (i != a); both 0 at a.
    1. pair (i, a): accept i with probability min(1, p(i) / q_ia(i)).
       p1 = max(p - q_ia, 0) off a, p1(a) = p(a);  r_ia = max(q_ia - p, 0) off a.
    2. pair (a, i): accept i with probability min(1, p1(i) / q_ai(i)).
       p2 = max(p1 - q_ai, 0) off a, p2(a) = p(a);  r_ai = max(q_ai - p1, 0) off a.
    3. pair (a, i), i rejected: accept a with probability min(1, p(a) / sum r_ai);
       then p2(a) <- max(p(a) - sum r_ai, 0).
    4. pair (i, a), i rejected: accept a with probability min(1, p2(a) / sum r_ia);
       then p2(a) <- max(p2(a) - sum r_ia, 0).
    5. otherwise emit the correction Y ~ norm(p2).

Each test uses a fresh uniform, as the code does. Not ported: the code's float guard "accept a
outright when p(a) > 1 - 1e-3". When q(a) = 1 we draft a alone (single-draft speculative
sampling); below the root each path continues as its own chain from q (see `spechub_verify`).
"""

from __future__ import annotations

import numpy as np

from ..drafters import Draft, Drafter, require_draft_model
from ..models import check_positive_int
from ..probability import accept_probability, argmax, residual
from .multidraft import top_down


def hub_proposals(q):
    """(a, q_ia, q_ai): the hub token and the laws of the non-hub token in pairs (i, a), (a, i)
    -> int, [V], [V] (both zero at a). Requires q(a) < 1."""
    a = argmax(q)
    q_ia = q.copy()
    q_ia[a] = 0
    # q(a) / sum_{i != a} q(i) rather than q(a) / (1 - q(a)): no cancellation when q(a) ~ 1, and
    # the same normalisation the drafter uses for q(. | != a).
    q_ai = q_ia * (q[a] / q_ia.sum())
    return a, q_ia, q_ai


def _off_hub(values, a, hub_value):
    out = values.copy()
    out[a] = hub_value
    return out


def spechub_step(p, q, drafts, rand) -> int:
    """One SpecHub step at a node with the ordered draft pair `drafts` = (first, second).

    Args:
        p, q: target and draft distributions [V]; drafts: (first, second) from `hub_pair`.

    Returns:
        the emitted token (a draft token when accepted, else the correction).
    """
    if len(drafts) == 1:  # q(a) = 1: a single draft
        x = drafts[0]
        return x if rand.bernoulli(accept_probability(p[x], q[x])) else rand.categorical(residual(p, q))
    first, second = drafts
    a, q_ia, q_ai = hub_proposals(q)
    zero = q[0] * 0
    hub_second = second == a  # pair (i, a)
    if hub_second and rand.bernoulli(accept_probability(p[first], q_ia[first])):
        return first
    p1 = _off_hub(np.maximum(p - q_ia, zero), a, p[a])  # [V]
    r_ia = np.maximum(q_ia - p, zero)  # [V], zero at a
    r_ia[a] = zero
    if not hub_second and rand.bernoulli(accept_probability(p1[second], q_ai[second])):
        return second
    p2 = _off_hub(np.maximum(p1 - q_ai, zero), a, p[a])  # [V]
    r_ai = np.maximum(q_ai - p1, zero)  # [V]
    r_ai[a] = zero
    if not hub_second and rand.bernoulli(accept_probability(p[a], r_ai.sum())):
        return a
    p2[a] = max(p[a] - r_ai.sum(), zero)
    if hub_second and rand.bernoulli(accept_probability(p2[a], r_ia.sum())):
        return a
    p2[a] = max(p2[a] - r_ia.sum(), zero)
    # In exact arithmetic p2 has mass whenever this line is reached; float64 round-off can open
    # a branch of probability ~1e-16 where it has none: fall back to p there, as `residual` does.
    return rand.categorical(p2 / p2.sum() if p2.sum() > 0 else p)


def hub_pair(q, rand) -> tuple[int, ...]:
    """SpecHub's ordered draft pair (first, second) from q; (a,) alone when q(a) = 1."""
    a = argmax(q)
    if q[a] == 1:
        return (a,)
    first = rand.categorical(q)
    if first != a:
        return (first, a)
    rest = q.copy()
    rest[a] = 0
    return (a, rand.categorical(rest / rest.sum()))


def hub_pairs(draft_length: int) -> Drafter:
    """SpecHub's drafts: two paths of length L whose first tokens are `hub_pair`; below the root
    each path continues as its own chain from q.

    Raises:
        TypeError / ValueError: draft_length not an int >= 1; no draft LanguageModel.
    """
    L = check_positive_int(draft_length, "draft_length")

    def build(draft_model, context, rand):
        draft_model = require_draft_model(draft_model, "hub_pairs")

        def expand(node, k):
            if len(node) == L:
                return (), None
            q = draft_model.probs(context + node)  # [V]
            if k == 1:
                return (rand.categorical(q),), q
            return hub_pair(q, rand), q

        return Draft(2, expand)

    return Drafter("hub_pairs", build, draft_length=L, num_paths=2)


_spechub_top_down = top_down(spechub_step)


def spechub_verify(target, draft_model, context, draft, rand) -> tuple[int, ...]:
    """SpecHub at the root pair, single-draft speculative sampling on each path below it: each of
    the two paths continues as its own chain from q (token verification), as in the public code's
    binary trees with two candidates at the first branching."""
    return _spechub_top_down(target, draft_model, context, draft, rand)
