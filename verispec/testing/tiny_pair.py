"""A tiny seeded target/draft pair of causal LMs in Hugging Face format, for checking whole engines.

`build_tiny_pair(folder)` writes two Llama-architecture models (``folder/target`` and
``folder/draft``: config.json, generation_config.json, model.safetensors) that any engine loading HF
checkpoints can serve, with no hub and no tokenizer (vLLM runs them with ``skip_tokenizer_init=True``;
prompts are token ids). Both are built from one seed, so the pair is the same on every run of the
same torch version:

- the target: `TinyPairConfig` sizes (vocabulary 32, 2 layers, 2 heads of dim 32 by default: vLLM's
  CPU attention takes head sizes 32, 64, 80, ...), its LM head scaled by ``logit_scale`` so that each
  conditional puts most of its mass on a few tokens: the law of the first N tokens then has few
  cells worth testing, and a G-test needs few samples;
- the draft: the target with its LM head plus Gaussian noise (std ``draft_noise`` times the head's
  std), so that q is near p but not equal: acceptance is neither 0 nor 1.

No beginning/end-of-sequence token is declared, so generation never stops early and no
end-of-sequence logits processor changes the law. `load_tiny_pair(folder)` reads a pair back.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from ..reference.models import check_positive_int

__all__ = ["TinyPairConfig", "TinyPair", "build_tiny_pair", "load_tiny_pair", "PAIR_FILE"]

#: The file beside the two models that records how they were built.
PAIR_FILE = "verispec_pair.json"


@dataclass(frozen=True)
class TinyPairConfig:
    """The sizes and seed of a tiny pair (see the module docstring)."""

    vocab_size: int = 32
    hidden_size: int = 64
    intermediate_size: int = 128
    num_layers: int = 2
    num_heads: int = 2
    head_dim: int = 32
    max_positions: int = 64
    logit_scale: float = 35.0
    draft_noise: float = 0.45
    seed: int = 0

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "head_dim",
                     "max_positions"):
            check_positive_int(getattr(self, name), name, minimum=2 if name == "vocab_size" else 1)
        check_positive_int(self.seed, "seed", minimum=0)
        for name in ("logit_scale", "draft_noise"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"{name}: expected a number >= 0, got {value!r}")


@dataclass(frozen=True)
class TinyPair:
    """A built pair: folder (holds ``target/``, ``draft/`` and `PAIR_FILE`) and its config."""

    folder: str
    config: TinyPairConfig

    @property
    def target_path(self) -> str:
        return os.path.join(self.folder, "target")

    @property
    def draft_path(self) -> str:
        return os.path.join(self.folder, "draft")

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size


def _llama_config(config: TinyPairConfig):
    from transformers import LlamaConfig  # optional dependency

    return LlamaConfig(vocab_size=config.vocab_size, hidden_size=config.hidden_size,
                       intermediate_size=config.intermediate_size, num_hidden_layers=config.num_layers,
                       num_attention_heads=config.num_heads, num_key_value_heads=config.num_heads,
                       head_dim=config.head_dim, max_position_embeddings=config.max_positions,
                       tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)


def _save(model, path: str) -> None:
    from transformers import GenerationConfig  # optional dependency

    model.generation_config = GenerationConfig(bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model.save_pretrained(path)


def build_tiny_pair(folder: str, config: TinyPairConfig | None = None) -> TinyPair:
    """Build the pair of `config` (default `TinyPairConfig()`) and save it under `folder`.

    Returns:
        the `TinyPair`. The models are float32; their weights depend only on `config` (the seed)
        and the torch version. Needs torch and transformers.

    Raises:
        TypeError / ValueError: an invalid config field (naming it).
    """
    import torch  # optional dependency
    from transformers import LlamaForCausalLM  # optional dependency

    config = TinyPairConfig() if config is None else config
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        target = LlamaForCausalLM(_llama_config(config)).float().eval()
        draft = LlamaForCausalLM(_llama_config(config)).float().eval()
        with torch.no_grad():
            target.lm_head.weight.mul_(config.logit_scale)
            draft.load_state_dict(target.state_dict())
            head = target.lm_head.weight
            draft.lm_head.weight.add_(torch.randn_like(head) * config.draft_noise * head.std())
    os.makedirs(folder, exist_ok=True)
    pair = TinyPair(os.path.abspath(folder), config)
    _save(target, pair.target_path)
    _save(draft, pair.draft_path)
    with open(os.path.join(folder, PAIR_FILE), "w") as handle:
        json.dump(asdict(config), handle, indent=2, sort_keys=True)
    return pair


def load_tiny_pair(folder: str) -> TinyPair:
    """The pair `build_tiny_pair` saved under `folder`.

    Raises:
        FileNotFoundError: `folder` holds no `PAIR_FILE`.
    """
    with open(os.path.join(folder, PAIR_FILE)) as handle:
        return TinyPair(os.path.abspath(folder), TinyPairConfig(**json.load(handle)))
