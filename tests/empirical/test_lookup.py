"""Prompt-lookup drafts on tensors (verispec.empirical.drafters.lookup) against the reference
`verispec.reference.drafters.lookup_phrase`: same phrase on every small sequence tried (seeded
random sequences over 2-5 tokens, lengths 0-14, n-gram 1-4, draft length 1-5), one row at a time
and as a batch of right-padded rows; known cases; bad input."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")

from verispec.empirical.drafters.lookup import prompt_lookup_batch, prompt_lookup_draft  # noqa: E402
from verispec.reference.drafters import lookup_phrase  # noqa: E402


def _ids(seq):
    return torch.tensor(seq, dtype=torch.long)


@pytest.mark.parametrize("seq,max_ngram,L,expected", [
    ([1, 2, 3, 1, 2], 2, 3, [3, 1, 2]),   # suffix bigram (1, 2) at 0 -> what followed it
    ([5, 1, 7, 1, 8, 1], 1, 4, [8, 1]),    # the most recent earlier "1" (at 3) wins; runs into the end
    ([4, 2, 9, 3, 2, 6, 3, 2], 2, 1, [6]),  # bigram (3, 2) beats the more recent unigram 2
    ([1, 2, 3], 3, 2, []),                 # nothing recurs
    ([7], 2, 2, []),                       # one token: no earlier occurrence possible
    ([], 2, 2, []),
    ([6, 6, 6, 6], 3, 5, [6]),             # trigram at 0 -> one token before the end
])
def test_known_phrases(seq, max_ngram, L, expected):
    assert prompt_lookup_draft(_ids(seq), max_ngram, L).tolist() == expected
    assert list(lookup_phrase(seq, L, max_ngram)) == expected


def test_matches_reference_single_and_batched():
    rng = random.Random(0)
    cases = []
    for _ in range(400):
        V, n = rng.choice([2, 3, 5]), rng.randint(0, 14)
        cases.append(([rng.randrange(V) for _ in range(n)], rng.randint(1, 4), rng.randint(1, 5)))
    for seq, N, L in cases:
        assert tuple(prompt_lookup_draft(_ids(seq), N, L).tolist()) == lookup_phrase(seq, L, N), (seq, N, L)
    # Batched: rows of different lengths, right-padded with junk that must be ignored.
    for N, L in ((1, 3), (2, 2), (3, 5), (4, 1)):
        rows = [seq for seq, _, _ in cases[:64]]
        S = max(len(r) for r in rows) + 2
        contexts = torch.tensor([r + [rng.randrange(5) for _ in range(S - len(r))] for r in rows])  # [B, S]
        drafts, lengths = prompt_lookup_batch(contexts, torch.tensor([len(r) for r in rows]), N, L)
        assert drafts.shape == (64, L) and lengths.dtype == torch.int64
        for b, seq in enumerate(rows):
            assert tuple(drafts[b, :int(lengths[b])].tolist()) == lookup_phrase(seq, L, N), (seq, N, L)
            assert not drafts[b, int(lengths[b]):].any()


def test_bad_input():
    with pytest.raises(TypeError, match="context_ids"):
        prompt_lookup_draft(torch.tensor([1.0, 2.0]), 2, 2)
    with pytest.raises(TypeError, match="context_ids"):
        prompt_lookup_draft([1, 2], 2, 2)
    with pytest.raises(ValueError, match="context_ids"):
        prompt_lookup_draft(torch.tensor([[1, 2]]), 2, 2)
    with pytest.raises(ValueError, match="max_ngram"):
        prompt_lookup_draft(_ids([1, 2]), 0, 2)
    with pytest.raises(ValueError, match="draft_length"):
        prompt_lookup_draft(_ids([1, 2]), 2, 0)
    with pytest.raises(TypeError, match="draft_length"):
        prompt_lookup_draft(_ids([1, 2]), 2, 2.0)
    with pytest.raises(ValueError, match="context_lengths"):
        prompt_lookup_batch(torch.zeros(2, 3, dtype=torch.long), torch.tensor([1, 4]), 2, 2)
    with pytest.raises(ValueError, match="context_lengths"):
        prompt_lookup_batch(torch.zeros(2, 3, dtype=torch.long), torch.tensor([1]), 2, 2)
    with pytest.raises(ValueError, match="contexts"):
        prompt_lookup_batch(torch.zeros(3, dtype=torch.long), torch.tensor([1]), 2, 2)


def test_min_ngram_skips_shorter_matches():
    """[1, 2, 3, 9, 5, 3]: the suffix 1-gram 3 recurs (phrase [9, 5, 3]), no longer suffix does; with
    min_ngram = 2 that row drafts nothing, while [4, 5, 6, 4, 5] (2-gram [4, 5] recurs) keeps its phrase."""
    contexts = torch.tensor([[1, 2, 3, 9, 5, 3], [4, 5, 6, 4, 5, 0]])
    lengths = torch.tensor([6, 5])
    drafts, found = prompt_lookup_batch(contexts, lengths, 3, 3)
    assert found.tolist() == [3, 3] and drafts.tolist() == [[9, 5, 3], [6, 4, 5]]
    drafts, found = prompt_lookup_batch(contexts, lengths, 3, 3, min_ngram=2)
    assert found.tolist() == [0, 3] and drafts[1].tolist() == [6, 4, 5]
    for bad, error in ((0, ValueError), (1.0, TypeError)):
        with pytest.raises(error, match="min_ngram"):
            prompt_lookup_batch(contexts, lengths, 3, 3, min_ngram=bad)
