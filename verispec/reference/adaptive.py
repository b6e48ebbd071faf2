"""Adaptive and hybrid chain drafts: the reference twins of `verispec.empirical.drafters.adaptive`.

- `adaptive_chain(L, confidence_threshold)`: a chain X_1, X_2, ... ~ q (the draft model) that
  ends after X_d when q(X_d | context, X_<d) < confidence_threshold, or at depth L. transformers'
  assisted generation stops its assistant this way (``assistant_confidence_threshold``). The stop
  keeps the low-confidence token: whether one more token is drafted is a function of the tokens
  drafted so far, so token-level verification (Leviathan et al. 2023, arXiv 2211.17192, Algorithm 1) stays
  exact: at each position it either verifies a fresh draw from q or, past the chain's end,
  samples p.
- `hybrid(L, confidence_threshold, lookup_length, max_ngram)`: the prompt-lookup phrase of the
  context (point masses, `drafters.lookup_phrase`) when there is one, `adaptive_chain` otherwise.

Both methods verify with token verification by default, or with block verification (Sun et al.
2024, arXiv 2403.10444, Algorithm 2; ``verifier="block"``), which emits at least as many tokens
per target call in expectation from the same chain and costs no forward more. Block
verification is proved for chains of a fixed length; on these chains, whose length is a stopping
time of their own tokens, it runs at the chain's actual length (h = w at its last token), and its
exact law is CHECKED on the default sweep of `verispec.testing.assert_lossless` for every cap
(tests/empirical/test_adaptive.py), not proved here.

The empirical drafters also schedule the cap L from the acceptance history (as transformers
does); a cap is fixed before its iteration's draws, so checking every cap checks the schedule.
Planted bugs that must fail `assert_lossless` are in `verispec.testing.planted_drafters`.
"""

from __future__ import annotations

from . import registry
from .deprecation import renamed_keywords
from .drafters import Draft, Drafter, phrase_draft, require_draft_model, draw_counts, lookup_phrase
from .methods import Method
from .models import check_positive_int
from .verifiers import block_verify, token_verify

__all__ = ["adaptive_chain", "hybrid", "adaptive_method", "hybrid_method", "check_verifier", "chain_draft", "VERIFIERS"]

#: The chain verifiers these methods take: token verification (Leviathan et al. 2023, arXiv
#: 2211.17192, Algorithm 1) and block verification (Sun et al. 2024, arXiv 2403.10444, Algorithm 2).
VERIFIERS = {"token": token_verify, "block": block_verify}


def _check_threshold(confidence_threshold) -> float:
    c = confidence_threshold
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not 0 <= c <= 1:
        raise ValueError(f"confidence_threshold: expected a number in [0, 1], got {c!r}")
    return c


def chain_draft(draft_model, context, rand, L: int, leaf) -> Draft:
    """A chain from q that is a leaf at depth L or where `leaf(node)` says so (node != ()): the
    draft of every chain whose length is a stopping time of its own tokens."""

    def expand(node, k):
        if len(node) == L or (node and leaf(node)):
            return (), None
        q = draft_model.probs(context + node)  # [V]
        return draw_counts(q, k, rand), q

    return Draft(1, expand, rand)


@renamed_keywords(threshold="confidence_threshold")
def adaptive_chain(draft_length: int, confidence_threshold: float = 0.4) -> Drafter:
    """A draft-model chain of at most L tokens that ends after a token of draft probability
    below `confidence_threshold` (module docstring).

    Raises:
        TypeError / ValueError: L not an int >= 1; confidence_threshold outside [0, 1].
    """
    L = check_positive_int(draft_length, "draft_length")
    confidence = _check_threshold(confidence_threshold)

    def build(draft_model, context, rand):
        model = require_draft_model(draft_model, "adaptive_chain")
        return chain_draft(model, context, rand, L,
                           lambda node: model.probs(context + node[:-1])[node[-1]] < confidence)

    return Drafter("adaptive_chain", build, draft_length=L, confidence_threshold=confidence)


@renamed_keywords(threshold="confidence_threshold")
def hybrid(draft_length: int, confidence_threshold: float = 0.4, lookup_length: int | None = None,
           max_ngram: int = 3) -> Drafter:
    """The context's prompt-lookup phrase (up to `lookup_length` tokens, default L) as point
    masses when it has one, else `adaptive_chain(L, confidence_threshold)`."""
    L = check_positive_int(draft_length, "draft_length")
    n = check_positive_int(max_ngram, "max_ngram")
    lookup = L if lookup_length is None else check_positive_int(lookup_length, "lookup_length")
    chain = adaptive_chain(L, confidence_threshold)

    def build(draft_model, context, rand):
        phrase = lookup_phrase(context, lookup, n)
        if phrase:
            return phrase_draft(phrase, draft_model.vocab_size)
        return chain(draft_model, context, rand)

    return Drafter("hybrid", build, draft_length=max(L, lookup), confidence_threshold=confidence_threshold, max_ngram=n)


def check_verifier(verifier) -> str:
    """`verifier` if it names one of `VERIFIERS`, else ValueError naming the argument."""
    if not isinstance(verifier, str) or verifier not in VERIFIERS:
        raise ValueError(f"verifier: expected one of {', '.join(VERIFIERS)}, got {verifier!r}")
    return verifier


@renamed_keywords(threshold="confidence_threshold")
def adaptive_method(draft_length: int,
                    confidence_threshold: float = registry.default("adaptive", "confidence_threshold"),
                    verifier: str = registry.default("adaptive", "verifier")) -> Method:
    """`adaptive_chain` + token (default) or block verification (`VERIFIERS`).

    Raises:
        TypeError / ValueError: as `adaptive_chain`; a verifier not in `VERIFIERS`.
    """
    rule = check_verifier(verifier)
    params = {"draft_length": draft_length, "confidence_threshold": confidence_threshold}
    return Method("adaptive", adaptive_chain(draft_length, confidence_threshold), VERIFIERS[rule],
                  params if rule == "token" else {**params, "verifier": rule}, model_state_only=True)


@renamed_keywords(threshold="confidence_threshold")
def hybrid_method(draft_length: int, confidence_threshold: float = registry.default("hybrid", "confidence_threshold"),
                  lookup_length: int | None = registry.default("hybrid", "lookup_length"),
                  max_ngram: int = registry.default("hybrid", "max_ngram"),
                  verifier: str = registry.default("hybrid", "verifier")) -> Method:
    """`hybrid` + token (default) or block verification (the lookup depends on the tokens, not
    only the models).

    Raises:
        TypeError / ValueError: as `hybrid`; a verifier not in `VERIFIERS`.
    """
    rule = check_verifier(verifier)
    drafter = hybrid(draft_length, confidence_threshold, lookup_length, max_ngram)
    params = {"draft_length": drafter.draft_length, "confidence_threshold": confidence_threshold}
    return Method("hybrid", drafter, VERIFIERS[rule], params if rule == "token" else {**params, "verifier": rule})
