"""Check your own engine's speculative decoding end to end with `assert_engine_lossless`.

Any engine that can serve a Hugging Face checkpoint fits in one function with verispec's contract

    generate(prompt_ids, num_samples, num_tokens, seed) -> int array [num_samples, num_tokens]

(``prompt_ids`` a tuple of token ids; each row an independent request's first ``num_tokens``
generated tokens, sampled at T = 1 with no top-k/top-p and no end-of-sequence stop). verispec builds
a tiny seeded target/draft pair, your engine serves it, and the first N tokens are G-tested against
the exact target law of the same weights (float64).

Here the "engine" is transformers' assisted generation, written without verispec's own adapter
(`verispec.integrations.engines.TransformersEngine` also reports acceptance counters). For vLLM,
SGLang or llama.cpp, replace the body of `generate` with their call, e.g. vLLM:

    llm = LLM(model=pair.target_path, speculative_config={"method": "draft_model",
              "model": pair.draft_path, "num_speculative_tokens": 2}, skip_tokenizer_init=True)
    outs = llm.generate([TokensPrompt(prompt_token_ids=list(prompt_ids))] * num_samples,
                        SamplingParams(temperature=1.0, max_tokens=num_tokens, ignore_eos=True))
    return [list(o.outputs[0].token_ids) for o in outs]

Run: python examples/check_my_engine.py      (needs the torch extra; about a minute on a laptop CPU)
"""

from __future__ import annotations

import tempfile

import numpy as np
import torch
from transformers import AutoModelForCausalLM

from verispec.testing import EngineCheckSettings, assert_engine_lossless
from verispec.testing.tiny_pair import build_tiny_pair


def wrap_assisted_generation(target_path: str, draft_path: str, draft_length: int = 2):
    """transformers' assisted generation as a verispec ``generate`` callable (one request per call:
    assisted generation takes batch size 1)."""
    target = AutoModelForCausalLM.from_pretrained(target_path).eval()
    draft = AutoModelForCausalLM.from_pretrained(draft_path).eval()
    draft.generation_config.num_assistant_tokens = draft_length
    draft.generation_config.num_assistant_tokens_schedule = "constant"

    def generate(prompt_ids, num_samples, num_tokens, seed):
        torch.manual_seed(seed)
        prompt = torch.tensor([list(prompt_ids)])
        rows = [target.generate(prompt, assistant_model=draft, do_sample=True, max_new_tokens=num_tokens)
                for _ in range(num_samples)]
        return np.array([row[0, prompt.shape[1]:].tolist() for row in rows])

    return generate


if __name__ == "__main__":
    torch.set_num_threads(1)  # tiny models: thread hand-offs would cost more than the arithmetic
    with tempfile.TemporaryDirectory() as folder:
        pair = build_tiny_pair(folder)  # vocabulary 32, 2 layers; the draft = the target's LM head + noise
        generate = wrap_assisted_generation(pair.target_path, pair.draft_path)
        report = assert_engine_lossless(generate, pair, EngineCheckSettings(tv=0.2))  # raises if the law differs
        print(report)
