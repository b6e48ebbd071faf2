"""The exact law of a model's first two sampled tokens, which the distribution tests compare against."""

import torch

from verispec.empirical.drafters import probabilities


def exact_two_token_law(target, prompt, temperature):
    """p(y1 | prompt) p(y2 | prompt, y1) from the model's softmax at `temperature`.

    Args:
        target: a `verispec.empirical.model.CausalLM` over an 8-token vocabulary.
        prompt: int64 [1, n] (or [n]) token ids. temperature: > 0.

    Returns:
        float [8, 8] numpy array, rows y1 and columns y2, summing to 1.
    """
    prompt = prompt.reshape(1, -1)  # [1, n]
    with torch.no_grad():
        first, _ = target.prefill(prompt)
        p1 = probabilities(first[0, -1], temperature)  # [8]
        seconds, _ = target.prefill(torch.cat([prompt.expand(8, -1), torch.arange(8).unsqueeze(1)], dim=1))
        p2 = probabilities(seconds[:, -1], temperature)  # [8, 8]
    return (p1.unsqueeze(1) * p2).numpy()
