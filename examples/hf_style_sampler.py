"""An HF-style speculative sampler (logits in, processed by temperature), checked by sampling.

transformers' assisted generation verifies a candidate sequence with a function of the form
``_speculative_sampling(candidate_input_ids, candidate_logits, candidate_length, new_logits, ...)``:
softmax the draft ("candidate") and target ("new") logits, accept while r <= p(x) / q(x), then draw
the last token from max(p - q, 0) at the first rejection or from p after the whole candidate, using
the global torch RNG. This file writes a batched function in that style (it is not transformers'
code): it takes RAW logits and a temperature and applies softmax(logits / T) itself, so a
temperature applied to one side only is a bug the harness can see.

The adapter `as_harness_sampler(fn, temperature)` maps the harness's canonical call
``(draft_ids, draft_probs, target_probs, generator)`` onto it:

* logits = T * log(probs), so that softmax(logits / T) is exactly the harness's probabilities
  (log 0 = -inf gives probability 0);
* the function uses the global torch RNG, as transformers does; the adapter seeds it from the
  harness's generator inside ``torch.random.fork_rng()``, so runs are reproducible and the global
  state of the caller is left alone.

Run: python examples/hf_style_sampler.py     (needs torch)
"""

from __future__ import annotations

import torch

PAD = -1


def speculative_sampling(candidate_ids, candidate_logits, new_logits, temperature):
    """Batched speculative sampling, HF-style (Leviathan et al. 2023, arXiv:2211.17192, Alg. 1).

    Args:
        candidate_ids: int64 [batch, L], the draft tokens.
        candidate_logits: float [batch, L, V], the draft's raw logits at each draft position.
        new_logits: float [batch, L + 1, V], the target's raw logits (the last row follows the
            whole candidate).
        temperature: T > 0; both sides are processed as softmax(logits / T).

    Returns:
        (valid_tokens int64 [batch, L + 1] with -1 padding, n_matches int64 [batch]).
    """
    if not temperature > 0:
        raise ValueError(f"temperature: must be > 0, got {temperature!r}")
    batch, L = candidate_ids.shape
    q = torch.softmax(candidate_logits / temperature, dim=-1)  # [batch, L, V]
    p = torch.softmax(new_logits / temperature, dim=-1)  # [batch, L + 1, V]
    q_i = q.gather(-1, candidate_ids[..., None])[..., 0]  # [batch, L]
    p_i = p[:, :L].gather(-1, candidate_ids[..., None])[..., 0]  # [batch, L]
    r = torch.rand_like(p_i)  # global RNG, as in transformers  # [batch, L]
    is_accepted = r <= p_i / q_i  # [batch, L]
    n_matches = ((~is_accepted).cumsum(dim=-1) < 1).sum(dim=-1)  # accepted before the first rejection  # [batch]

    rows = torch.arange(batch, device=candidate_ids.device)
    p_next = p[rows, n_matches]  # [batch, V]
    q_next = torch.where((n_matches < L)[:, None], q[rows, n_matches.clamp(max=L - 1)], 0.0)  # [batch, V]
    p_prime = (p_next - q_next).clamp(min=0)  # the residual; = p_next after the whole candidate  # [batch, V]
    p_prime = p_prime / p_prime.sum(dim=-1, keepdim=True)
    t = torch.multinomial(p_prime, num_samples=1)  # [batch, 1]

    positions = torch.arange(L + 1, device=candidate_ids.device)  # [L + 1]
    valid = torch.full((batch, L + 1), PAD, dtype=torch.int64, device=candidate_ids.device)
    valid[:, :L] = torch.where(positions[:L] < n_matches[:, None], candidate_ids, PAD)
    valid.scatter_(1, n_matches[:, None], t)
    return valid, n_matches


def as_harness_sampler(fn, temperature: float):
    """Adapt ``fn(candidate_ids, candidate_logits, new_logits, temperature) -> (tokens, n_matches)``
    (global-RNG, logits in) to the harness's ``fn(draft_ids, draft_probs, target_probs, generator)``.

    The harness's probabilities become logits T * log(probs), which the function turns back into
    the same probabilities only if it applies softmax(logits / T) to both sides.
    """
    if not temperature > 0:
        raise ValueError(f"temperature: must be > 0, got {temperature!r}")

    def sampler(draft_ids, draft_probs, target_probs, generator):
        seed = int(torch.randint(2 ** 62, (1,), generator=generator))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            tokens, _ = fn(draft_ids, temperature * torch.log(draft_probs), temperature * torch.log(target_probs),
                           temperature)
        return tokens

    sampler.__qualname__ = getattr(fn, "__qualname__", "speculative_sampling")
    return sampler


if __name__ == "__main__":
    from verispec.testing import assert_sampler_lossless

    report = assert_sampler_lossless(as_harness_sampler(speculative_sampling, temperature=0.7), backend="torch")
    print(report)
