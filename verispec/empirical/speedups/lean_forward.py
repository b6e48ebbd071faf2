"""A lean forward for a Llama-family draft model (``df=lean``), or target (``tf=lean``): the same
function as the transformers module's forward, in fewer ops.

Why: on a CPU an int8 draft's one-token forward is bound by per-op costs, not by its weights: each
dynamically quantized linear quantizes its input again, and each of the module's small ops (norms,
rotary embedding, mask building, cache bookkeeping) is a dispatch. This forward

- multiplies q, k and v by one linear (their weights stacked) and the MLP's gate and up by another,
  as gpt-fast's fused ``wqkv`` and vLLM's ``QKVParallelLinear`` / ``MergedColumnParallelLinear`` do.
  For an int8 dynamic linear (`quantize.quantize_draft`) the stacked layer keeps each row's int8
  weights and scale, and the input it quantizes is the same tensor, so its outputs are the separate
  layers' outputs exactly; for a float layer they agree up to the GEMM's summation order;
- builds the rotary embedding once per forward (the module's own ``rotary_emb``, so its scaling
  type is kept), norms with ``torch.rms_norm``, and attends with one SDPA call per layer (grouped
  keys and values, ``enable_gqa``), writing keys and values through the cache's ``update``, so it
  runs on every KV storage of the engine (a transformers ``DynamicCache`` or the static
  ``SlotCache``).

``scripted=True`` (bench ``df=scripted``) compiles each layer's two halves, before and after the
cache update, with TorchScript (``torch.jit.script``): the same ops run by TorchScript's
interpreter instead of Python, cutting the per-op dispatch a one-token int8 forward spends around
its GEMMs on a CPU; the cache update stays in Python, so every storage still works. torch 2.13 marks
``torch.jit`` deprecated in favour of ``torch.compile``, but ``torch.compile`` cannot trace the
int8 dynamic linear (its packed weights are a TorchScript object: a graph break at every linear);
the notice is silenced around that one call.

It changes the draft's q by float rounding at most, so every lossless rule stays lossless (a
verifier reads the q the tokens were drawn from; Leviathan et al. 2023, arXiv 2211.17192, Thm. 1).
On a TARGET (bench ``tf=lean``) it changes p by the same float rounding at most: a stacked float
linear computes each output as the separate layer does, over the same inputs, and only a GEMM
that orders a sum otherwise can round differently, as forwards of different row counts already do
(`linear_layout`). The output law is the target model's up to that rounding; where the GEMM keeps
the order, the logits are the module's bit for bit (docs/draft_forward.md says where that held).

Supported: decoder-only models whose layers are ``self_attn`` (``q_proj``, ``k_proj``, ``v_proj``,
``o_proj``), ``mlp`` (``gate_proj``, ``up_proj``, ``down_proj``, SiLU), ``input_layernorm`` and
``post_attention_layernorm`` (RMSNorm), every layer full attention (Qwen2, Llama, Mistral without
sliding windows).
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from typing import Optional

import torch

from .int8_head import int8_linear, is_quantized_linear

__all__ = ["LeanForward", "LeanOutput", "lean_view", "stack_linears", "supports", "DESCRIPTION",
           "SCRIPTED_DESCRIPTION", "TARGET_DESCRIPTION"]

#: What ``df=lean`` means, for reports (the bench's JSON).
DESCRIPTION = ("the engine runs the draft's forwards itself: q/k/v and gate/up each as one stacked linear (int8: "
               "the same rows and scales, so the same outputs), RMSNorm, rotary embedding and one SDPA call per "
               "layer, through the KV cache's update; the draft's function is unchanged up to float rounding; "
               "transformers' assisted generation (hf) runs its assistant's own forward")

#: What ``df=scripted`` means, for reports (the bench's JSON).
SCRIPTED_DESCRIPTION = ("as df=lean, with each decoder layer's two halves (norm, q/k/v and RoPE; attention, o, norm "
                        "and MLP) compiled by TorchScript (torch.jit.script) and the KV cache updated in Python "
                        "between them: the same ops and outputs, less interpreter time per op")

#: What ``tf=lean`` means, for reports (the bench's JSON).
TARGET_DESCRIPTION = ("the engine runs the target's forwards itself, as df=lean runs the draft's: q/k/v and gate/up "
                      "each as one stacked linear, RMSNorm, rotary embedding and one SDPA call per layer, through the "
                      "KV cache's update; the target's function is unchanged up to float rounding (the GEMM's "
                      "summation order); transformers' assisted generation (hf) runs its target's own forward")

_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj")


@dataclass
class LeanOutput:
    """What `LeanForward` returns, as the transformers output it stands for: logits [B, k, V] in
    the head's dtype (k = logits_to_keep, or every position) and the cache it appended to."""

    logits: torch.Tensor
    cache: object


def lean_view(draft, scripted: bool = False):
    """A view of a `CausalLM` (a draft; or a target, module docstring) whose forwards run
    `LeanForward` (``scripted``: its layers as TorchScript) in place of its transformers module (its
    ``runner``): it shares the model, its head subsets (`with_head_subset` on the view keeps the lean
    forward), its `forward_count` and its logits hooks, and keeps no prefill memo. The stacked
    layers are new weights: a view holds a second copy of q/k/v and gate/up.

    Raises:
        ValueError: a model `LeanForward` does not run (naming ``model``).
    """
    view = copy.copy(draft)
    view.runner = LeanForward(draft.model, scripted)
    view.reuse_prefills(False)
    return view


def supports(model) -> str:
    """"" if `model` (a transformers causal LM) has the layout `LeanForward` runs, else why not."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None or not hasattr(inner, "embed_tokens") or not hasattr(inner, "rotary_emb"):
        return "not a decoder-only model with model.layers, embed_tokens and rotary_emb"
    config = model.config
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"MLP activation {config.hidden_act!r} (SiLU only)"
    if any(kind != "full_attention" for kind in getattr(config, "layer_types", None) or ()):
        return "sliding-window attention layers"
    for layer in layers:
        attention, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        if attention is None or mlp is None or not all(hasattr(attention, n) for n in _ATTENTION) \
                or not all(hasattr(mlp, n) for n in _MLP):
            return "a layer without q/k/v/o and gate/up/down projections"
        if not (hasattr(layer, "input_layernorm") and hasattr(layer, "post_attention_layernorm")):
            return "a layer without input_layernorm and post_attention_layernorm"
    return ""


def stack_linears(layers) -> torch.nn.Module:
    """One linear layer whose output is the concatenation of `layers`' outputs (same input size).

    Args:
        layers: `torch.nn.Linear`s, or int8 dynamic linears (`torch.ao.nn.quantized.dynamic.Linear`
            with per-row scales), all of one kind; with or without bias (a missing one is zeros).

    Returns:
        a module of that kind, out_features = the sum of theirs. The int8 one keeps every row's
        int8 weights, scale and zero point, so its outputs equal the concatenated outputs exactly.

    Raises:
        TypeError: layers of mixed or other kinds. ValueError: different input sizes.
    """
    layers = list(layers)
    if len({layer.in_features for layer in layers}) != 1:
        raise ValueError("layers: every layer must take the same input size")
    if all(is_quantized_linear(layer) for layer in layers):
        return _stack_int8(layers)
    if not all(type(layer) is torch.nn.Linear for layer in layers):
        raise TypeError("layers: expected torch.nn.Linear or int8 dynamic linears, all of one kind")
    first = layers[0]
    weight = torch.cat([layer.weight.detach() for layer in layers])  # [sum N, K]
    biased = any(layer.bias is not None for layer in layers)
    out = torch.nn.utils.skip_init(torch.nn.Linear, first.in_features, weight.shape[0], bias=biased,
                                   device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        out.weight.copy_(weight)
        if biased:
            out.bias.copy_(torch.cat([_bias(layer) for layer in layers]))
    return out.requires_grad_(False)


def _bias(layer) -> torch.Tensor:
    """A layer's bias [out_features], detached; zeros (its weight's dtype and device) where it has none."""
    if is_quantized_linear(layer):  # an int8 dynamic linear's bias is float32 on the CPU
        bias = layer.bias()
        return torch.zeros(layer.out_features) if bias is None else bias.detach()
    weight = layer.weight
    return torch.zeros(layer.out_features, dtype=weight.dtype, device=weight.device) if layer.bias is None \
        else layer.bias.detach()


def _stack_int8(layers) -> torch.nn.Module:
    weights = [layer.weight() for layer in layers]
    if any(w.qscheme() not in (torch.per_channel_affine, torch.per_channel_symmetric) for w in weights):
        raise TypeError("layers: int8 linears with per-row weight scales only")
    biased = any(layer.bias() is not None for layer in layers)
    return int8_linear(torch.cat([w.int_repr() for w in weights]),  # int8 [sum N, K]
                       torch.cat([w.q_per_channel_scales() for w in weights]),
                       torch.cat([w.q_per_channel_zero_points() for w in weights]),
                       torch.cat([_bias(layer) for layer in layers]) if biased else None)


class _QKV(torch.nn.Module):
    """A layer's first half: RMSNorm, the stacked q/k/v linear and RoPE.
    x [B, n, H], cos / sin [B or 1, 1, n, D] (sin sign-folded) -> q [B, Hq, n, D], k and v [B, Hkv, n, D]."""

    def __init__(self, qkv: torch.nn.Module, norm: torch.Tensor, eps: float, n_heads: int, n_kv_heads: int,
                 head_dim: int):
        super().__init__()
        self.qkv, self.norm, self.eps = qkv, norm, eps  # qkv: [.., H] -> [.., (Hq + 2 Hkv) * D]
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        B, n = x.shape[0], x.shape[1]
        D, Hq, Hkv = self.head_dim, self.n_heads, self.n_kv_heads
        qk, v = self.qkv(_norm(x, self.norm, self.eps)).split([(Hq + Hkv) * D, Hkv * D], -1)
        qk = qk.view(B, n, Hq + Hkv, D).transpose(1, 2)  # [B, Hq + Hkv, n, D]: q's heads, then k's
        qk = qk * cos + qk.unflatten(-1, [2, D // 2]).flip(-2).flatten(-2) * sin  # RoPE, sin sign-folded
        q, k = qk.split([Hq, Hkv], 1)  # [B, Hq, n, D], [B, Hkv, n, D]
        return q, k, v.view(B, n, Hkv, D).transpose(1, 2)


class _AttendAndMLP(torch.nn.Module):
    """A layer's second half, after the cache took k and v: attention over the cache's keys and
    values (one SDPA call, grouped heads), the o projection, the residual, RMSNorm and the SiLU MLP
    (stacked gate/up, down) with its residual. x [B, n, H], q [B, Hq, n, D], keys / values
    [B, Hkv, S, D], mask: an additive [B, 1, n, S] or None (causal: SDPA's own flag) -> [B, n, H]."""

    def __init__(self, o: torch.nn.Module, gate_up: torch.nn.Module, down: torch.nn.Module, norm: torch.Tensor,
                 eps: float, scaling: float, grouped: bool):
        super().__init__()
        self.o, self.gate_up, self.down = o, gate_up, down  # gate_up: [.., H] -> [.., 2 I]
        self.norm, self.eps, self.scaling, self.grouped = norm, eps, scaling, grouped

    def forward(self, x: torch.Tensor, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                mask: Optional[torch.Tensor], causal: bool) -> torch.Tensor:
        B, n = x.shape[0], x.shape[1]
        attended = torch.nn.functional.scaled_dot_product_attention(
            q, keys, values, attn_mask=None if mask is None else mask.to(q.dtype), is_causal=causal,
            scale=self.scaling, enable_gqa=self.grouped)  # [B, Hq, n, D]
        x = x + self.o(attended.transpose(1, 2).reshape(B, n, -1))
        gate, up = self.gate_up(_norm(x, self.norm, self.eps)).chunk(2, -1)  # [B, n, I] each
        return x + self.down(torch.nn.functional.silu(gate) * up)


class LeanForward:
    """The lean forward of a model (module docstring); call it as the model:
    ``out = lean(input_ids=ids, cache=cache, position_ids=..., attention_mask=..., use_cache=True,
    logits_to_keep=k)``, ``out.logits``, ``out.cache``.

    Args:
        model: a transformers causal LM with the supported layout (`supports`). It is not changed;
            the stacked layers are new modules (the model's own stay for its own forward).
        scripted: run each layer's two halves (before and after the cache update) as TorchScript
            (module docstring); the same ops, so the same logits.

    Call arguments:
        input_ids: int64 [B, n]. cache: a transformers `Cache` (written through ``update``; a new
        ``DynamicCache`` when None). position_ids: int64 [B, n] or [1, n] (default: the cache's
        length + 0..n-1). attention_mask: None (causal over the cache and the new tokens), an
        additive float mask [B, 1, n, S] over the keys ``update`` returns, or {"full_attention":
        that mask}. logits_to_keep: k >= 1 runs the head on the last k positions only.

    Raises:
        ValueError: a model without the supported layout (naming what is missing); at call time, a
            2D (padding) attention mask, which this forward does not take.
    """

    def __init__(self, model, scripted: bool = False):
        reason = supports(model)
        if reason:
            raise ValueError(f"model: the lean forward does not run this model ({reason})")
        self.model, self.scripted = model, scripted
        config = model.config
        attention = model.model.layers[0].self_attn
        self.head_dim = attention.head_dim
        self.n_heads = config.num_attention_heads
        self.n_kv_heads = config.num_key_value_heads
        self.scaling = attention.scaling
        self.eps = model.model.layers[0].input_layernorm.variance_epsilon
        self.layers = [self._layer(layer) for layer in model.model.layers]
        # its own layers as one module, so a module-wide change reaches them (`linear_layout.model_layout`)
        self.module = torch.nn.ModuleList([half for layer in self.layers for half in layer])

    def _layer(self, layer) -> tuple:
        """A decoder layer's two halves (`_QKV`, `_AttendAndMLP`), scripted when `self.scripted`."""
        a, mlp = layer.self_attn, layer.mlp
        halves = (_QKV(stack_linears([a.q_proj, a.k_proj, a.v_proj]), layer.input_layernorm.weight, self.eps,
                       self.n_heads, self.n_kv_heads, self.head_dim),
                  _AttendAndMLP(a.o_proj, stack_linears([mlp.gate_proj, mlp.up_proj]), mlp.down_proj,
                                layer.post_attention_layernorm.weight, self.eps, self.scaling,
                                self.n_heads != self.n_kv_heads))
        if not self.scripted:
            return halves
        with warnings.catch_warnings():  # torch 2.13 marks torch.jit deprecated (module docstring)
            warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated")
            return tuple(torch.jit.script(half.eval()) for half in halves)

    @torch.no_grad()
    def __call__(self, input_ids, cache=None, position_ids=None, attention_mask=None, use_cache=True,
                 logits_to_keep: int = 0) -> LeanOutput:
        inner = self.model.model
        if cache is None:
            from transformers import DynamicCache

            cache = DynamicCache(config=self.model.config)
        B, n = input_ids.shape
        past = int(cache.get_seq_length()) if position_ids is None or attention_mask is None else 0
        if position_ids is None:
            position_ids = torch.arange(past, past + n, device=input_ids.device).unsqueeze(0)
        mask = self._mask(attention_mask, past, n, input_ids.device)
        x = inner.embed_tokens(input_ids)  # [B, n, H]
        cos, sin = inner.rotary_emb(x, position_ids)  # [B or 1, n, head_dim]
        half = self.head_dim // 2
        # rotate_half(x) * sin == flip of x's two halves * (-sin of the first half, sin of the second)
        cos, sin = cos.unsqueeze(1), torch.cat([-sin[..., :half], sin[..., half:]], -1).unsqueeze(1)
        for index, layer in enumerate(self.layers):
            x = self._block(layer, index, x, cos, sin, cache, mask)
        x = inner.norm(x[:, -logits_to_keep:] if logits_to_keep else x)
        return LeanOutput(self.model.get_output_embeddings()(x), cache)

    def _mask(self, attention_mask, past: int, n: int, device):
        """The additive mask SDPA takes, or None where SDPA's own causal flag is right."""
        if isinstance(attention_mask, dict):
            attention_mask = attention_mask["full_attention"]
        if attention_mask is not None:
            if attention_mask.dim() != 4:
                raise ValueError("attention_mask: the lean forward takes a 4D additive mask [B, 1, n, S] or None")
            return attention_mask
        if n == 1 or past == 0:
            return None  # one query sees every key; or plain causal (SDPA's is_causal, below)
        allowed = torch.ones(n, past + n, dtype=torch.bool, device=device).tril(past)  # [n, past + n]
        return torch.zeros(n, past + n, device=device).masked_fill_(~allowed, float("-inf"))

    @staticmethod
    def _block(layer: tuple, index: int, x, cos, sin, cache, mask):
        """One decoder layer (its two halves): x [B, n, H] -> [B, n, H]; keys and values appended
        to `cache` between them."""
        first, second = layer
        q, k, v = first(x, cos, sin)
        keys, values = cache.update(k, v, index)  # [B, Hkv, S, D] each
        return second(x, q, keys, values, mask, mask is None and x.shape[1] > 1)


def _norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as transformers' Llama-family layers compute it: normalised in float32, cast back to
    x's dtype, then scaled (in one op where x is float32 already)."""
    if x.dtype == torch.float32 and weight.dtype == torch.float32:
        return torch.rms_norm(x, [x.shape[-1]], weight, eps)
    return torch.rms_norm(x.float(), [x.shape[-1]], None, eps).to(x.dtype) * weight
