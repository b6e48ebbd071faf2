"""Input checks shared by the torch decoders: a `ValueError` / `TypeError` naming the argument."""

from __future__ import annotations

import torch

from .model import CausalLM
from .uniforms import as_uniform_source

__all__ = ["check_temperature", "check_int", "check_positive", "check_pair", "check_prompt", "check_prompts", "check_source",
           "check_eos"]


def check_temperature(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
    if not (value >= 0 and value != float("inf")):
        raise ValueError(f"{name}: must be finite and >= 0, got {value!r}")
    return float(value)


def check_int(value, name: str, minimum: int) -> int:
    """`value` if it is an int >= `minimum`, else TypeError / ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name}: must be >= {minimum}, got {value}")
    return value


def check_positive(value, name):
    """`value` if it is an int >= 1, else TypeError / ValueError naming `name`."""
    return check_int(value, name, 1)


def check_eos(value, vocab_size: int, device) -> torch.Tensor | None:
    """`eos_token_id` of `engine.decode`: None, or an int / non-empty sequence of ints in
    [0, vocab_size) (several ids: any of them stops a row) -> int64 [k] on `device`."""
    if value is None:
        return None
    ids = [value] if isinstance(value, int) and not isinstance(value, bool) else value
    if isinstance(ids, torch.Tensor):
        ids = ids.reshape(-1).tolist()
    if isinstance(ids, (str, bytes)) or not isinstance(ids, (list, tuple)) or not ids or any(
            isinstance(t, bool) or not isinstance(t, int) for t in ids):
        raise TypeError(f"eos_token_id: expected None, an int or a non-empty sequence of ints, got {value!r}")
    if any(not 0 <= t < vocab_size for t in ids):
        raise ValueError(f"eos_token_id: ids must lie in [0, {vocab_size}) (the target's vocabulary), got {value!r}")
    return torch.tensor(ids, dtype=torch.long, device=device)


def check_pair(target, draft) -> None:
    """TypeError / ValueError unless target and draft are `CausalLM`s on one vocabulary and device."""
    for name, model in (("target", target), ("draft", draft)):
        if not isinstance(model, CausalLM):
            raise TypeError(f"{name}: expected a CausalLM, got {type(model).__name__}")
    if draft.vocab_size != target.vocab_size:
        raise ValueError(f"draft: vocab_size {draft.vocab_size} differs from target's {target.vocab_size}")
    if draft.device != target.device:
        raise ValueError(f"draft: on {draft.device}, target on {target.device}")


def check_prompt(prompt_ids, model: CausalLM):
    if not isinstance(prompt_ids, torch.Tensor):
        prompt_ids = torch.as_tensor(prompt_ids, dtype=torch.long)
    if prompt_ids.dim() == 1:
        prompt_ids = prompt_ids.unsqueeze(0)
    if prompt_ids.dim() != 2 or prompt_ids.shape[1] == 0 or prompt_ids.shape[0] == 0:
        raise ValueError(f"prompt_ids: expected shape [batch, length >= 1], got {tuple(prompt_ids.shape)}")
    if prompt_ids.is_floating_point():
        raise TypeError("prompt_ids: expected integer token ids")
    if bool(((prompt_ids < 0) | (prompt_ids >= model.vocab_size)).any()):
        raise ValueError(f"prompt_ids: token ids must lie in [0, {model.vocab_size})")
    return prompt_ids.to(model.device, torch.long)


def check_prompts(prompts, model: CausalLM) -> tuple[torch.Tensor, torch.Tensor]:
    """A non-empty list of 1-D integer tensors with ids in [0, V) -> (tokens int64 [B, n], right-
    padded with 0, lengths int64 [B]) on the model's device. Vectorised: law tests pass ~10^5."""
    if not isinstance(prompts, (list, tuple)):
        raise TypeError(f"prompts: expected a list of 1-D token-id tensors, got {type(prompts).__name__}")
    if not prompts:
        raise ValueError("prompts: expected at least one prompt")
    for i, p in enumerate(prompts):
        if not isinstance(p, torch.Tensor) or p.is_floating_point() or p.is_complex() or p.dtype == torch.bool:
            raise TypeError(f"prompts[{i}]: expected an integer torch.Tensor of token ids")
        if p.dim() != 1 or p.numel() == 0:
            raise ValueError(f"prompts[{i}]: expected shape [length >= 1], got {tuple(p.shape)}")
    lengths = torch.tensor([p.numel() for p in prompts])  # [B]
    flat = torch.cat(prompts).long().cpu()  # [total]
    bad = ((flat < 0) | (flat >= model.vocab_size)).nonzero()
    if bad.numel():
        row = int(torch.searchsorted(lengths.cumsum(0), bad[0, 0], right=True))
        raise ValueError(f"prompts[{row}]: token ids must lie in [0, {model.vocab_size})")
    B, n = len(prompts), int(lengths.max())
    rows = torch.repeat_interleave(torch.arange(B), lengths)  # [total]
    cols = torch.arange(flat.numel()) - torch.repeat_interleave(lengths.cumsum(0) - lengths, lengths)
    tokens = torch.zeros(B, n, dtype=torch.long)
    tokens[rows, cols] = flat
    return tokens.to(model.device), lengths.to(model.device)


def check_source(uniforms, batch: int, device):
    source = as_uniform_source(uniforms, device)
    if source.is_stream and batch != 1:
        raise ValueError("uniforms: a stream source serves one row; use TorchUniforms for a batch")
    return source
