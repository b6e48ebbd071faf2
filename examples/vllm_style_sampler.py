"""A vLLM-style batched rejection sampler, checked with `verispec.testing.assert_sampler_lossless`.

An inference engine verifies drafts in one batched kernel. This example follows the conventions of
vLLM's v1 engine (vllm/v1/sample/rejection_sampler.py), written here from their description:

* the rejection sampler receives the target probabilities of the L draft positions only; the bonus
  token is sampled beforehand, by the engine's ordinary sampler, from the target's distribution
  after the whole draft, and passed in as ``bonus_ids``;
* the uniforms are float64 (a float32 uniform is exactly 0 often enough to accept a token the target
  gives probability 0);
* a draft token is accepted while p(x) / q(x) >= u;
* the correction ("recovered") token is drawn from max(p - q, 0) by an exponential race,
  argmax_v r(v) / E(v) with E(v) ~ Exp(1) i.i.d., which picks v with probability r(v) / sum(r)
  without normalising. One race per row is shared by all positions: only the first rejected
  position emits a token, and the race is independent of the uniforms that choose it;
* the output is [batch, L + 1] with -1 (a placeholder) after the last emitted token.

The adapter `as_harness_sampler` turns this signature into the harness's canonical one
``fn(draft_ids, draft_probs, target_probs, generator)``: it samples the bonus token from the last
target position with the harness's generator, as the engine's sampler would, and passes the first L
positions on.

Run: python examples/vllm_style_sampler.py     (needs torch; about half a minute on a laptop CPU)
"""

from __future__ import annotations

import torch

PLACEHOLDER_TOKEN_ID = -1


def rejection_sample(draft_ids, draft_probs, target_probs, bonus_ids, generator):
    """Batched speculative sampling in vLLM's style (Leviathan et al. 2023, arXiv:2211.17192, Alg. 1).

    Args:
        draft_ids: int64 [batch, L], drawn from draft_probs.
        draft_probs: float [batch, L, V], q at each draft position.
        target_probs: float [batch, L, V], p at each draft position (not the bonus position).
        bonus_ids: int64 [batch, 1], the token to emit when all L draft tokens are accepted.
        generator: torch.Generator for the uniforms and the exponential race.

    Returns:
        int64 [batch, L + 1]: accepted draft tokens, the recovered or bonus token, then -1.
    """
    batch, L = draft_ids.shape
    index = draft_ids.unsqueeze(-1)  # [batch, L, 1]
    p_x = target_probs.gather(-1, index).squeeze(-1).double()  # [batch, L]
    q_x = draft_probs.gather(-1, index).squeeze(-1).double()  # [batch, L]
    u = torch.rand((batch, L), dtype=torch.float64, generator=generator, device=draft_ids.device)  # [batch, L]
    accepted = p_x >= u * q_x  # p/q >= u, with q(x) > 0 because x was drawn from q  # [batch, L]

    residual = (target_probs - draft_probs).clamp_min(0)  # [batch, L, V]
    race = torch.empty((batch, 1, residual.shape[-1]), dtype=torch.float32, device=draft_ids.device)
    race.exponential_(generator=generator)  # one Exp(1) vector per row  # [batch, 1, V]
    recovered = (residual / race).argmax(-1)  # [batch, L]

    rejected = ~accepted  # [batch, L]
    tau = torch.where(rejected.any(-1), rejected.int().argmax(-1), L)  # accepted length  # [batch]
    positions = torch.arange(L + 1, device=draft_ids.device)  # [L + 1]
    out = torch.full((batch, L + 1), PLACEHOLDER_TOKEN_ID, dtype=torch.int64, device=draft_ids.device)
    out[:, :L] = torch.where(positions[:L] < tau[:, None], draft_ids, PLACEHOLDER_TOKEN_ID)
    last = torch.where(tau == L, bonus_ids[:, 0],
                       recovered.gather(1, tau.clamp(max=L - 1)[:, None])[:, 0])  # [batch]
    out.scatter_(1, tau[:, None], last[:, None])
    return out


def as_harness_sampler(rejection_sample_fn):
    """Adapt a vLLM-style ``rejection_sample(draft_ids, draft_probs, target_probs, bonus_ids,
    generator)`` to the harness's ``fn(draft_ids, draft_probs, target_probs [batch, L + 1, V],
    generator)``: the bonus token is drawn here from target_probs[:, L], as the engine's own sampler
    draws it, and the sampler sees the first L target positions."""

    def sampler(draft_ids, draft_probs, target_probs, generator):
        bonus_ids = torch.multinomial(target_probs[:, -1], 1, generator=generator)  # [batch, 1]
        return rejection_sample_fn(draft_ids, draft_probs, target_probs[:, :-1], bonus_ids, generator)

    sampler.__qualname__ = getattr(rejection_sample_fn, "__qualname__", "rejection_sample")
    return sampler


if __name__ == "__main__":
    from verispec.testing import assert_sampler_lossless

    # default sweep: V = 2, 3; i.i.d., Markov and random-tree pairs at T = 1, 0, 0.5; L = 2, N = 4;
    # alpha = 1e-6 for the whole run, power 0.9 against any law at TV >= 0.01
    report = assert_sampler_lossless(as_harness_sampler(rejection_sample), backend="torch")
    print(report)
