"""A frequency-ranked draft vocabulary (FR-Spec): the draft model's LM head over a token subset S.

FR-Spec (Zhao et al. 2025, "FR-Spec: Accelerating Large-Vocabulary Language Models via
Frequency-Ranked Speculative Sampling", arXiv 2502.14856) computes the DRAFT model's output layer
over a subset S of the vocabulary only: q is the softmax over S (zero outside S), so a drafted
token always lies in S, and every verifier stays exactly lossless because it reads the q the
draft was drawn from. The TARGET is never restricted: a token outside S can still be emitted, as
a correction or bonus token. On a large vocabulary the draft's LM head is a sizeable part of a
one-token draft forward (which is weight-bandwidth bound), and a head over |S| rows costs |S| / V
of it; docs/draft_vocab.md gives the measured share on the real pair.

How S is chosen here (`DraftVocab`): the `size` lowest token ids, united with the ids of the
batch's prompts (identifiers, which a code prompt repeats) and any explicit `ids` (e.g. the
tokenizer's special tokens). The paper ranks tokens by their frequency in a corpus (SlimPajama);
we use no corpus: byte-level BPE vocabularies such as Qwen2.5's number tokens in merge order, and
early merges are frequent pairs, so low ids are a frequency proxy (docs/draft_vocab.md gives the
token coverage this reaches on HumanEval). A user with counts from their own corpus passes their
own subset (`DraftVocab(size=0, ids=top_ids, prompt=False)`).

`verispec.empirical.drafters.ModelDrafter.start` applies the drafter's `draft_vocab` (set by
`with_draft_vocab`) through `verispec.empirical.model.CausalLM.with_head_subset`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from numbers import Integral

import torch

__all__ = ["DraftVocab", "as_draft_vocab", "check_subset", "with_draft_vocab"]


def check_subset(subset, vocab_size: int, name: str = "subset") -> torch.Tensor:
    """A token-id subset as sorted unique int64 ids [|S|] on CPU.

    Raises:
        TypeError: not an integer tensor / sequence of ints (named `name`).
        ValueError: empty, not 1-D, or an id outside [0, vocab_size).
    """
    if not isinstance(subset, torch.Tensor):
        if isinstance(subset, (str, bytes)) or not hasattr(subset, "__iter__"):
            raise TypeError(f"{name}: expected a 1-D integer tensor or a sequence of token ids, "
                            f"got {type(subset).__name__}")
        items = list(subset)
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in items):
            raise TypeError(f"{name}: token ids must be ints")
        subset = torch.tensor(items, dtype=torch.long)
    if subset.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8):
        raise TypeError(f"{name}: expected an integer tensor of token ids, got dtype {subset.dtype}")
    if subset.dim() != 1 or subset.numel() == 0:
        raise ValueError(f"{name}: expected a non-empty 1-D set of token ids, got shape {tuple(subset.shape)}")
    ids = subset.to("cpu", torch.long)
    if bool(((ids < 0) | (ids >= vocab_size)).any()):
        raise ValueError(f"{name}: token ids must lie in [0, {vocab_size})")
    return torch.unique(ids)  # sorted


@dataclass(frozen=True)
class DraftVocab:
    """The draft's token subset S = {0, ..., size - 1} u ids u (the prompts' ids when `prompt`).

    Args:
        size: k >= 0, how many of the lowest token ids (clipped to the vocabulary).
        ids: extra token ids (e.g. the tokenizer's special tokens), any order.
        prompt: add every token id of the batch's prompts.

    Raises (construction): TypeError / ValueError naming `draft_vocab` for a bad size or ids, or
    when S would be empty for every prompt (size 0, no ids, prompt False).
    """

    size: int = 32768
    ids: tuple = ()
    prompt: bool = True

    def __post_init__(self):
        if isinstance(self.size, bool) or not isinstance(self.size, int):
            raise TypeError(f"draft_vocab: size must be an int, got {type(self.size).__name__}")
        if self.size < 0:
            raise ValueError(f"draft_vocab: size must be >= 0, got {self.size}")
        if self.ids:
            ids = check_subset(self.ids, 2 ** 62, "draft_vocab")  # range checked against V in `subset`
            object.__setattr__(self, "ids", tuple(ids.tolist()))
        if self.size == 0 and not self.ids and not self.prompt:
            raise ValueError("draft_vocab: the subset is empty (size 0, no ids, prompt False)")

    def subset(self, vocab_size: int, tokens: torch.Tensor | None = None,
               lengths: torch.Tensor | None = None) -> torch.Tensor:
        """S for a batch: sorted unique int64 ids [|S|] on CPU.

        Args:
            vocab_size: V of the draft model. tokens: int64 [B, n] right-padded prompts (or None).
            lengths: int64 [B], each prompt's length (default n).

        Raises:
            ValueError naming `draft_vocab`: an id >= V, or an empty S.
        """
        parts = [torch.arange(min(self.size, vocab_size)), torch.tensor(self.ids, dtype=torch.long)]
        if self.prompt and tokens is not None:
            n = tokens.shape[1]
            lengths = torch.full((tokens.shape[0],), n) if lengths is None else lengths.cpu()
            parts.append(tokens.cpu()[torch.arange(n) < lengths.unsqueeze(1)])  # the prompts' real ids
        return check_subset(torch.cat(parts), vocab_size, "draft_vocab")

    def label(self) -> dict:
        """What a report records: {"draft_vocab_size": k, "draft_vocab_ids": number of extra ids,
        "draft_vocab_prompt": bool}."""
        return {"draft_vocab_size": self.size, "draft_vocab_ids": len(self.ids), "draft_vocab_prompt": self.prompt}


def as_draft_vocab(value) -> DraftVocab | None:
    """None, an int k (`DraftVocab(size=k)`: the k lowest ids and the prompts' ids), a
    `DraftVocab`, or a user's own subset (a 1-D integer tensor or sequence of ids, used as is:
    `DraftVocab(size=0, ids=value, prompt=False)`).

    Raises:
        TypeError / ValueError naming `draft_vocab`: anything else, k < 1, an empty or non-integer subset.
    """
    if value is None or isinstance(value, DraftVocab):
        return value
    if isinstance(value, Integral) and not isinstance(value, bool):
        if value < 1:
            raise ValueError(f"draft_vocab: expected a size k >= 1, got {value}")
        return DraftVocab(size=int(value))
    if isinstance(value, torch.Tensor) or (hasattr(value, "__iter__") and not isinstance(value, (str, bytes))):
        return DraftVocab(size=0, ids=tuple(check_subset(value, 2 ** 62, "draft_vocab").tolist()), prompt=False)
    raise TypeError(f"draft_vocab: expected None, an int k, a DraftVocab or a sequence of token ids, "
                    f"got {type(value).__name__}")


def with_draft_vocab(method, draft_vocab):
    """`method` (a `TorchMethod` whose drafter runs the draft model) with its draft forwards
    restricted to the subset `draft_vocab` (`as_draft_vocab`); None returns `method` unchanged.
    The verifier is untouched: it reads the q over S the drafts were drawn from.

    Raises:
        TypeError / ValueError naming `draft_vocab`: a bad subset, or a drafter without a draft
        model (prompt lookup, phrase pools: nothing to restrict).
    """
    vocab = as_draft_vocab(draft_vocab)
    if vocab is None:
        return method
    probe = method.drafter()
    if not getattr(probe, "needs_model", False) or not hasattr(probe, "draft_vocab"):
        raise ValueError(f"draft_vocab: method {method.name!r} drafts without a draft model (nothing to restrict)")
    make = method.drafter

    def drafter():
        out = make()
        out.draft_vocab = vocab
        return out

    return replace(method, drafter=drafter, params={**method.params, **vocab.label()})
