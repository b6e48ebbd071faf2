"""The phrase pool of the phrase-pool drafters: phrases of a fixed length keyed by the token they
follow, newest first, least-recently-used entries evicted (`PhrasePool`), and the reads the
drafters make of it (`candidates`).
"""

from __future__ import annotations

import numbers
from collections import OrderedDict
from typing import Iterable, Sequence

import torch

from ...validation import check_positive

__all__ = ["PhrasePool", "check_pool", "candidates"]


def _check_token(value, name) -> int:
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point() \
            and value.dtype != torch.bool:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected an int token id, got {type(value).__name__}")
    value = int(value)
    if value < 0:
        raise ValueError(f"{name}: token ids must be >= 0, got {value}")
    return value


class PhrasePool:
    """Phrase candidate pool keyed by one token (Ouroboros, Zhao et al. 2024, arXiv 2402.13720).

    Each key token holds at most `max_phrases_per_key` phrases of exactly `phrase_length` tokens
    (the tokens that followed the key), kept in recency order: adding a phrase that is already
    there refreshes it, adding one to a full key evicts that key's least recently added phrase.
    At most `capacity` keys are kept; the least recently used key (added to or looked up) goes
    first. `candidates` counts `lookups` and `hits` (lookups that returned >= 1 phrase).

    Args:
        phrase_length: n >= 1 tokens per phrase (Ouroboros: lookahead level - 1; default 4).
        max_phrases_per_key: G >= 1 (Ouroboros' guess set size; default 20).
        capacity: keys kept at most (default 65536).

    Raises:
        TypeError / ValueError: a parameter that is not a positive int.
    """

    def __init__(self, phrase_length: int = 4, max_phrases_per_key: int = 20, capacity: int = 65536):
        self.phrase_length = check_positive(phrase_length, "phrase_length")
        self.max_phrases_per_key = check_positive(max_phrases_per_key, "max_phrases_per_key")
        self.capacity = check_positive(capacity, "capacity")
        self._table: OrderedDict[int, OrderedDict[tuple, None]] = OrderedDict()  # key -> phrases, oldest first
        self.lookups = 0
        self.hits = 0

    def add(self, key: int, phrase: Sequence[int]) -> None:
        """Insert (or refresh) `phrase` (n token ids) under `key`, evicting per the LRU rules.

        Raises:
            TypeError / ValueError: a token id that is not a non-negative int, or a phrase whose
            length is not `phrase_length`.
        """
        key = _check_token(key, "key")
        if isinstance(phrase, (str, bytes)) or not isinstance(phrase, (Sequence, torch.Tensor)):
            raise TypeError(f"phrase: expected a sequence of token ids, got {type(phrase).__name__}")
        if isinstance(phrase, torch.Tensor):
            phrase = phrase.reshape(-1).tolist()
        phrase = tuple(_check_token(t, "phrase") for t in phrase)
        if len(phrase) != self.phrase_length:
            raise ValueError(f"phrase: expected {self.phrase_length} tokens (phrase_length), got {len(phrase)}")
        self._insert(key, phrase)

    def _insert(self, key: int, phrase: tuple) -> None:
        phrases = self._table.get(key)
        if phrases is None:
            phrases = self._table[key] = OrderedDict()
        self._table.move_to_end(key)
        phrases[phrase] = None
        phrases.move_to_end(phrase)
        if len(phrases) > self.max_phrases_per_key:
            phrases.popitem(last=False)
        if len(self._table) > self.capacity:
            self._table.popitem(last=False)

    def replace(self, key: int, old: Sequence[int], new: Sequence[int]) -> bool:
        """Put `new` where `old` stands under `key`, keeping its recency rank (Ouroboros' in-place
        refinement of a guess); an older copy of `new` is dropped. Returns False (and changes
        nothing) when `old` is not there. Token ids are not re-checked: `new` must be a phrase of
        `phrase_length` valid ids."""
        phrases = self._table.get(key)
        old, new = tuple(old), tuple(new)
        if phrases is None or old not in phrases:
            return False
        rebuilt = [new if phrase == old else phrase for phrase in phrases if phrase != new or phrase == old]
        phrases.clear()
        phrases.update(dict.fromkeys(rebuilt))
        return True

    def add_ngrams(self, tokens: Iterable[int]) -> int:
        """Add every window (tokens[i], tokens[i+1 : i+1+n]) of a token sequence; returns how
        many windows were added (0 when fewer than n + 1 tokens)."""
        if isinstance(tokens, torch.Tensor):
            tokens = tokens.reshape(-1).tolist()
        tokens = [_check_token(t, "tokens") for t in tokens]
        n = self.phrase_length
        for i in range(len(tokens) - n):
            self._insert(tokens[i], tuple(tokens[i + 1:i + 1 + n]))
        return max(len(tokens) - n, 0)

    def candidates(self, key: int, limit: int | None = None) -> list[tuple[int, ...]]:
        """The newest `limit` phrases under `key` (all when None), newest first; counts a lookup
        (and a hit when any is returned) and marks `key` recently used."""
        key = _check_token(key, "key")
        self.lookups += 1
        phrases = self._table.get(key)
        if not phrases:
            return []
        self.hits += 1
        self._table.move_to_end(key)
        out = list(reversed(phrases))
        return out if limit is None else out[:limit]

    def state(self) -> dict:
        """A JSON-ready snapshot: the parameters and every key's phrases, keys from least to most
        recently used and phrases oldest first (the lookup counters are not kept)."""
        return {"phrase_length": self.phrase_length, "max_phrases_per_key": self.max_phrases_per_key,
                "capacity": self.capacity,
                "table": [[key, [list(phrase) for phrase in phrases]] for key, phrases in self._table.items()]}

    @classmethod
    def from_state(cls, state: dict) -> "PhrasePool":
        """The pool that `state()` snapshotted, LRU order included; counters start at 0.

        Raises:
            TypeError / ValueError: `state` is not such a snapshot (bad parameters, token ids or
            phrase lengths).
        """
        if not isinstance(state, dict) or not isinstance(state.get("table"), list):
            raise TypeError(f"state: expected a PhrasePool.state() dict, got {type(state).__name__}")
        pool = cls(state.get("phrase_length"), state.get("max_phrases_per_key"), state.get("capacity"))
        for entry in state["table"]:
            if not isinstance(entry, (list, tuple)) or len(entry) != 2 or not isinstance(entry[1], list):
                raise TypeError(f"state: expected [key, [phrase, ...]] table entries, got {entry!r}")
            for phrase in entry[1]:  # oldest first: re-adding rebuilds both LRU orders
                pool.add(entry[0], phrase)
        return pool

    def phrases(self, key: int) -> list[tuple[int, ...]]:
        """All phrases under `key`, newest first, without counting a lookup or touching LRU order."""
        return list(reversed(self._table.get(_check_token(key, "key"), ())))

    def keys(self) -> list[int]:
        """Keys from least to most recently used."""
        return list(self._table)

    def __contains__(self, key) -> bool:
        return key in self._table

    def __len__(self) -> int:
        """Number of phrases held (all keys)."""
        return sum(len(p) for p in self._table.values())

    def __repr__(self):
        return (f"PhrasePool(phrase_length={self.phrase_length}, max_phrases_per_key="
                f"{self.max_phrases_per_key}, capacity={self.capacity}, keys={len(self._table)}, "
                f"phrases={len(self)})")


def check_pool(pool):
    if pool is None:
        return PhrasePool()
    if not isinstance(pool, PhrasePool):
        raise TypeError(f"pool: expected a PhrasePool or None, got {type(pool).__name__}")
    return pool


def candidates(pool: PhrasePool, key: int, limit: int, depth: int, vocab_size: int) -> list[tuple]:
    """Up to `limit` newest phrases under `key`, cut to `depth` tokens; phrases with ids outside
    the vocabulary (a pool shared with another tokenizer) are skipped."""
    if depth < 1:
        return []
    out = []
    for phrase in pool.candidates(key, limit):
        if max(phrase) < vocab_size:
            out.append(phrase[:depth])
    return out
