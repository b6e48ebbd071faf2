"""Prompt-lookup (n-gram) drafts on token tensors: point-mass drafts read from the context itself.

`prompt_lookup_draft(context_ids, max_ngram, draft_length)` drafts for one context,
`prompt_lookup_batch` for a batch of right-padded contexts of different lengths. They are the torch
twins of `verispec.reference.drafters.lookup_phrase` (same match, same tie-break: the latest earlier
start), so a torch run and the reference draft the same phrase.

The draft is a *point mass*: q = one-hot on each drafted token. Token or block verification with
that q is lossless at any temperature (docs/algorithms.md, "Drafting without a draft distribution").

Source: prompt lookup decoding, Saxena 2023 (github.com/apoorvumang/prompt-lookup-decoding); used
as the drafter of EMS-SD, Ni et al. 2024 (arXiv 2405.07542).
"""

from __future__ import annotations

import torch

from ..validation import check_int
from ..verifiers.common import check_tensor

__all__ = ["prompt_lookup_draft", "prompt_lookup_batch"]


def prompt_lookup_draft(context_ids: torch.Tensor, max_ngram: int, draft_length: int) -> torch.Tensor:
    """The prompt-lookup draft of one context.

    Args:
        context_ids: int [n] token ids (the prompt and everything generated so far).
        max_ngram: N >= 1, the longest suffix n-gram tried (then N-1, ..., 1).
        draft_length: L >= 1, the most tokens returned.

    Returns:
        int64 [l], 0 <= l <= L, on the context's device: the tokens that followed the most recent
        earlier occurrence of the longest recurring suffix n-gram (l < L when that occurrence is
        close to the end); empty when no suffix n-gram occurs earlier.

    Raises:
        TypeError: not an integer tensor, or non-int max_ngram / draft_length.
        ValueError: context_ids not 1-D, max_ngram or draft_length < 1.
    """
    check_tensor(context_ids, "context_ids", 1, "int")
    N = check_int(max_ngram, "max_ngram", 1)
    L = check_int(draft_length, "draft_length", 1)
    if context_ids.numel() == 0:
        return context_ids.new_zeros(0, dtype=torch.long)
    drafts, lengths = prompt_lookup_batch(context_ids.unsqueeze(0), torch.tensor([context_ids.numel()]), N, L)
    return drafts[0, :int(lengths[0])]


def prompt_lookup_batch(contexts: torch.Tensor, context_lengths: torch.Tensor, max_ngram: int,
                        draft_length: int, min_ngram: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompt-lookup drafts for a batch of contexts of different lengths.

    Args:
        contexts: int [B, S], row b's context is contexts[b, :context_lengths[b]] (right padding).
        context_lengths: int [B] in [0, S].
        max_ngram, draft_length: as `prompt_lookup_draft`.
        min_ngram: the shortest suffix n-gram tried (1 <= min_ngram; above max_ngram: no draft).

    Returns:
        (drafts int64 [B, L] (0 after each row's draft), lengths int64 [B] in [0, L]), on the
        contexts' device.

    Raises:
        TypeError / ValueError: as `prompt_lookup_draft` (min_ngram too); context_lengths of the
        wrong shape or outside [0, S].
    """
    check_tensor(contexts, "contexts", 2, "int")
    check_tensor(context_lengths, "context_lengths", 1, "int")
    L = check_int(draft_length, "draft_length", 1)
    B, S = contexts.shape
    if S == 0:
        raise ValueError("contexts: expected at least one column")
    if context_lengths.shape[0] != B or bool(((context_lengths < 0) | (context_lengths > S)).any()):
        raise ValueError(f"context_lengths: expected {B} lengths in [0, {S}]")
    N = check_int(max_ngram, "max_ngram", 1)
    n_min = check_int(min_ngram, "min_ngram", 1)
    ctx, length = contexts.long(), context_lengths.long().to(contexts.device)  # [B, S], [B]
    start = torch.full((B,), -1, dtype=torch.long, device=ctx.device)  # first drafted index; -1: none
    for n in range(min(N, S - 1), n_min - 1, -1):  # longest n first: rows matched at a longer n keep it
        windows = ctx.unfold(1, n, 1)  # [B, S-n+1, n], window s = ctx[:, s:s+n]
        at = (length - n).clamp(min=0).unsqueeze(1) + torch.arange(n, device=ctx.device)  # [B, n]
        suffix = ctx.gather(1, at)  # [B, n]
        s = torch.arange(windows.shape[1], device=ctx.device)  # [S-n+1]
        # An earlier occurrence ends before the last token: s + n < length (the suffix excluded).
        hit = (windows == suffix.unsqueeze(1)).all(-1) & (s + n < length.unsqueeze(1))  # [B, S-n+1]
        latest = torch.where(hit, s, -1).max(1).values  # [B], the most recent occurrence
        start = torch.where((start < 0) & (latest >= 0), latest + n, start)
    lengths = torch.where(start >= 0, (length - start).clamp(max=L), 0)  # [B]
    j = torch.arange(L, device=ctx.device)
    index = (start.clamp(min=0).unsqueeze(1) + j).clamp(max=S - 1)  # [B, L]
    drafts = torch.where(j < lengths.unsqueeze(1), ctx.gather(1, index), 0)  # [B, L]
    return drafts, lengths
