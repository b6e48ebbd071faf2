"""A thin wrapper around a `transformers` causal LM for speculative decoding.

`CausalLM` runs three kinds of forward passes against a KV cache (`transformers.DynamicCache`):

- `prefill(input_ids)`: a fresh cache from a prompt;
- `chain(cache, tokens)`: append tokens (ordinary causal attention);
- `tree(cache, tokens, parents, ...)`: append a token *tree* in one pass, each token attending to the
  valid cached positions and to its own ancestors only (a 4D additive mask, `tree_attention_mask`,
  and position_ids = prefix length + depth);

and edits caches in place: `crop_cache` (drop the tail), `gather_cache` (keep given positions per
row: the accepted path of a tree), `select_cache_rows` (batch axis).
Works on CPU and CUDA, in float32 and bfloat16; logits are returned in float32.
`with_head_subset(S)` gives a view whose output layer runs over the token ids S only (FR-Spec,
arXiv 2502.14856; for draft models: `verispec.empirical.speedups.draftvocab`).
"""

from __future__ import annotations

import copy
import inspect

import torch

from .speedups.draftvocab import check_subset
from .speedups.int8_head import is_quantized_linear, subset_head

__all__ = ["CausalLM", "tree_attention_mask", "tree_ancestors", "additive_mask", "cache_length", "crop_cache",
           "gather_cache", "select_cache_rows", "visible_slots"]


# --- KV-cache editing ---

def _layers(cache):
    """(keys, values, setter) per initialised layer of a `DynamicCache` (`cache.layers`)."""
    if not hasattr(cache, "layers"):
        raise TypeError(f"cache: expected a transformers DynamicCache, got {type(cache).__name__}")
    out = []
    for layer in cache.layers:
        if getattr(layer, "is_sliding", False):
            raise ValueError("cache: sliding-window cache layers cannot be edited position-wise")
        if not getattr(layer, "is_initialized", True) or layer.keys is None or layer.keys.numel() == 0:
            continue

        def setter(k, v, layer=layer):
            layer.keys, layer.values = k, v

        out.append((layer.keys, layer.values, setter))
    return out


def cache_length(cache) -> int:
    """Number of positions held by the cache (the sequence axis, -2, of every layer's keys)."""
    if cache is None:
        return 0
    return int(cache.get_seq_length())


def crop_cache(cache, length: int) -> None:
    """Keep the first `length` positions of every layer (in place); ValueError unless 0 <= length <=
    the cache length. `DynamicCache.crop` takes a negative count to drop (a positive length raises)."""
    current = cache_length(cache)
    if not 0 <= length <= current:
        raise ValueError(f"length: must lie in [0, {current}] (the cache length), got {length}")
    if length < current:
        cache.crop(length - current)


def gather_cache(cache, positions: torch.Tensor) -> None:
    """Keep, per batch row, the cache positions `positions` (in that order), in place.

    Args:
        cache: a DynamicCache. positions: int64 [B, n] (or [n], same for every row), indices
        on the sequence axis; a row's valid positions must come first when rows keep different
        numbers of positions (pad with any index and mask the padding out).

    When every row keeps 0..n-1 this is `crop_cache(cache, n)` (no copy); when every row keeps
    0..a-1 in place, only the positions after a are moved (a commit that drops a few slots near
    the end of a long cache copies those few, not the cache).
    """
    if positions.dim() == 1:
        positions = positions.unsqueeze(0)
    n = positions.shape[1]
    in_place = positions == torch.arange(n, device=positions.device)  # [B, n]
    if bool(in_place.all()):
        crop_cache(cache, n)
        return
    lead = int(in_place.all(0).long().cumprod(0).sum())  # positions 0..lead-1 stay where they are
    tail = positions[:, lead:]  # [B, n - lead]
    for keys, values, setter in _layers(cache):
        B, H, _, D = keys.shape
        index = tail.to(keys.device).expand(B, n - lead)[:, None, :, None].expand(B, H, n - lead, D)
        moved_keys = keys.gather(2, index)
        moved_values = values.gather(2, index.expand(B, values.shape[1], n - lead, values.shape[3]))
        if lead == 0:
            setter(moved_keys, moved_values)
            continue
        with torch.inference_mode():  # the cache's tensors come from inference-mode forwards
            keys[:, :, lead:n] = moved_keys
            values[:, :, lead:n] = moved_values
        setter(keys[:, :, :n], values[:, :, :n])


def select_cache_rows(cache, rows: torch.Tensor) -> None:
    """Keep only batch rows `rows` (int64 [b], repeats allowed), in place."""
    for keys, values, setter in _layers(cache):
        index = rows.to(keys.device)
        setter(keys.index_select(0, index), values.index_select(0, index))


# --- Tree masks ---

def tree_ancestors(parents: torch.Tensor, prior: torch.Tensor | None = None, *, check: bool = True) -> torch.Tensor:
    """Which nodes each node of a forest descends from (itself included).

    Args:
        parents: int64 [B, N]: the parent of new node j, indexed in the numbering of the prior
            nodes followed by the new ones (so parents[b, j] < M + j), -1 for a root.
        prior: optional bool [B, M, M], the ancestry of M nodes appended earlier (this function's
            output for them): new nodes may hang below them.

    Returns:
        bool [B, M + N, M + N]: [b, i, k] is True when node k is node i or one of its ancestors.

        check: raise on a bad parent index (reads a value back: a host sync); off where the
            parents were checked before.

    Raises:
        ValueError: a parent index not smaller than its child's.
    """
    B, N = parents.shape
    device = parents.device
    M = 0 if prior is None else prior.shape[1]
    if check and bool((parents >= M + torch.arange(N, device=device)).any()):
        raise ValueError("parents: every node's parent must come before it (parents[b, j] < j)")
    ancestors = torch.eye(M + N, dtype=torch.bool, device=device).expand(B, M + N, M + N).clone()
    if prior is not None:
        ancestors[:, :M, :M] = prior
    rows = torch.arange(B, device=device)
    for j in range(N):
        parent = parents[:, j]  # [B]
        inherited = ancestors[rows, parent.clamp(min=0)]  # [B, M + N]
        ancestors[:, M + j] |= inherited & (parent >= 0).unsqueeze(1)
    return ancestors


def tree_attention_mask(parents: torch.Tensor, past_valid: torch.Tensor | int, dtype: torch.dtype) -> torch.Tensor:
    """The 4D additive mask of a token tree appended to a cache.

    Args:
        parents: int64 [B, N]: parents[b, j] < j is the index (within the new block) of node j's
            parent, -1 for a node attached directly to the cached prefix (the root).
        past_valid: bool [B, S] (which cached positions each row may see), or an int S (all valid).
        dtype: the model's dtype (the mask is 0 where allowed and finfo(dtype).min elsewhere).

    Returns:
        [B, 1, N, S + N] float mask.

    Raises:
        ValueError: a parent index not smaller than its child's.
    """
    ancestors = tree_ancestors(parents)  # [B, N, N]
    if isinstance(past_valid, int):
        past_valid = torch.ones(parents.shape[0], past_valid, dtype=torch.bool)
    allowed = visible_slots(past_valid.to(parents.device), ancestors)  # [B, N, S + N]
    return additive_mask(allowed, dtype).unsqueeze(1)


def visible_slots(valid: torch.Tensor, ancestry: torch.Tensor) -> torch.Tensor:
    """What each new node of an append may attend to: valid bool [B, S0] (the cached slots each
    row sees), ancestry bool [B, n, m] (the new nodes' rows of the ancestry of the m appended
    slots, which follow the cached ones) -> bool [B, n, S0 + m]."""
    B, n = ancestry.shape[:2]
    return torch.cat([valid.unsqueeze(1).expand(B, n, valid.shape[1]), ancestry], dim=2)


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """0 where `allowed` (bool, any shape), finfo(dtype).min elsewhere: transformers adds it to the
    attention scores (a bool mask under eager attention is silently wrong in transformers 5.x,
    docs/real_models.md)."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(
        ~allowed, torch.finfo(dtype).min)


def _linear_rows(full: torch.nn.Linear, ids: torch.Tensor) -> torch.nn.Linear:
    """A frozen linear layer over the rows `ids` [|S|] of `full` (weight [|S|, H], contiguous)."""
    head = torch.nn.utils.skip_init(torch.nn.Linear, full.in_features, ids.numel(), bias=full.bias is not None,
                                    device=full.weight.device, dtype=full.weight.dtype)
    index = ids.to(full.weight.device)
    with torch.no_grad():
        head.weight.copy_(full.weight.index_select(0, index))
        if full.bias is not None:
            head.bias.copy_(full.bias.index_select(0, index))
    return head.requires_grad_(False)


# --- The wrapper ---

class CausalLM:
    """A `transformers` causal LM prepared for speculative decoding.

    Args:
        model: a `PreTrainedModel` with a causal-LM head (e.g. from `AutoModelForCausalLM`). name: a label.

    Attributes:
        vocab_size: V, the number of logits per position.
        device, dtype: of the model's parameters.
        forward_count: forward passes run so far (prefill, chain and tree each count 1).
        logits_hooks: functions `hook(lm, logits) -> logits or None` applied in order to the
            float32 logits of every forward (a returned tensor replaces them). They run inside
            captured steps too (`verispec.empirical.speedups.graphs`), so a hook meant to act on
            every replay must be tensor operations on the device (no value read back).
        in_forward: True while `forward` runs the model (module forward hooks can tell the
            engine's forwards from other callers').
        cache_pool: {(batch, capacity): [caches]} kept for reuse by the static storage
            (`verispec.empirical.speedups.static_kv`).
        runner: None, or a callable run with the module's keyword arguments in its place (`speedups.lean_forward`).

    Raises:
        TypeError: `model` is not a torch module with a `config`.
        ValueError: FlashAttention-2 (tree masks need 4D float masks; use "sdpa" or "eager").
    """

    def __init__(self, model, name: str | None = None):
        if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
            raise TypeError(f"model: expected a transformers causal LM, got {type(model).__name__}")
        attn = getattr(model.config, "_attn_implementation", None)
        if attn is not None and "flash" in str(attn):
            raise ValueError(f"model: attention implementation {attn!r} takes 2D masks only; load it "
                             "with attn_implementation='sdpa' or 'eager' for tree verification")
        self.model = model.eval()
        self.name = name or type(model).__name__
        parameter = next(model.parameters())
        self.device, self.dtype = parameter.device, parameter.dtype
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        self.vocab_size = int(head.out_features if head is not None else model.config.vocab_size)
        self._forwards = [0]  # shared with `with_head_subset` views: their forwards count here
        self.logits_hooks, self.in_forward, self.cache_pool, self.runner = [], False, {}, None
        self._prefill_memo: dict | None = None
        self._head_subset = None  # (ids [|S|], the head over S) on a `with_head_subset` view
        self._subset_heads: dict = {}  # the last gathered head per subset (rows copied once)
        # Models whose forward lacks `logits_to_keep` get their logits sliced instead.
        self._takes_logits_to_keep = "logits_to_keep" in inspect.signature(model.forward).parameters

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, dtype=torch.bfloat16, device="cpu",
                        attn_implementation: str = "sdpa", **kwargs) -> "CausalLM":
        """Load with `AutoModelForCausalLM.from_pretrained(..., dtype=dtype)` and move to `device`."""
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype,
                                                     attn_implementation=attn_implementation, **kwargs)
        return cls(model.to(device), name=str(name_or_path))

    @classmethod
    def from_config(cls, config, *, seed: int = 0, dtype=torch.float32, device="cpu",
                    attn_implementation: str = "sdpa") -> "CausalLM":
        """A randomly initialised model from a transformers config (seeded with torch.manual_seed)."""
        from transformers import AutoModelForCausalLM

        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn_implementation)
        return cls(model.to(device), name=f"{type(config).__name__}(seed={seed})")

    def new_cache(self):
        """An empty `DynamicCache` for this model."""
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    # -- forwards --------------------------------------------------------------------------------

    def _check_ids(self, ids, name):
        if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"{name}: expected an int64 tensor of token ids")
        if ids.dim() != 2 or ids.shape[1] == 0:
            raise ValueError(f"{name}: expected shape [batch, length >= 1], got {tuple(ids.shape)}")
        if bool(((ids < 0) | (ids >= self.vocab_size)).any()):
            raise ValueError(f"{name}: token ids must lie in [0, {self.vocab_size})")
        return ids.to(self.device, torch.long)

    @torch.no_grad()  # not inference mode: its tensors would keep torch.compile's inductor out of the steps
    def forward(self, input_ids: torch.Tensor, cache=None, *, position_ids=None, attention_mask=None,
                logits_to_keep: int = 0):
        """One forward pass; returns (logits float32 [B, q, V], cache). A new cache when None.

        logits_to_keep: k >= 1 runs the output layer on the last k positions only, so logits are
        [B, k, V] (a prefill reads none of its prompt's rows); 0: every position.
        """
        kwargs = dict(input_ids=input_ids, cache=cache, position_ids=position_ids,
                      attention_mask=attention_mask, use_cache=True)
        keep = logits_to_keep if 0 < logits_to_keep < input_ids.shape[1] else 0
        if keep and self._takes_logits_to_keep:
            kwargs["logits_to_keep"], keep = keep, 0
        self.forward_count += 1
        self.in_forward = True
        try:
            logits, cache = self._run(kwargs, keep)
        finally:
            self.in_forward = False
        for hook in self.logits_hooks:
            replaced = hook(self, logits)
            logits = logits if replaced is None else replaced
        return logits, cache

    def _run(self, kwargs: dict, keep: int):
        """The model's forward -> (logits float32 [B, q, V] (the last `keep` positions if keep), cache)."""
        run = self.runner or self.model
        if self._head_subset is None:
            out = run(**kwargs)
            return (out.logits[:, -keep:] if keep else out.logits).float(), out.cache
        ids, head = self._head_subset
        full = self.model.get_output_embeddings()
        # The output layer is swapped for the rows S during the call, which the module or the runner reads
        self.model.set_output_embeddings(head)
        try:
            out = run(**kwargs)
        finally:
            self.model.set_output_embeddings(full)
        part = (out.logits[:, -keep:] if keep else out.logits).float()  # [B, q, |S|]
        logits = part.new_full((*part.shape[:-1], self.vocab_size), float("-inf"))  # [B, q, V]
        return logits.index_copy_(-1, ids, part), out.cache

    def with_head_subset(self, subset) -> "CausalLM":
        """A view of this model whose logits are computed over the token ids `subset` only.

        FR-Spec (Zhao et al. 2025, arXiv 2502.14856): the output layer runs over the rows S of its
        weight (gathered once per subset; int8 rows at the same scale for an int8 head) and the
        logits are scattered into a full-V float32 tensor filled with -inf, so softmax gives q over
        S, exactly zero outside S, and drafters, rules and KV code need no change. The view shares
        the model and its `forward_count`, and keeps no prefill memo. Meant for a DRAFT model: a
        restricted target would change the output law.

        Args:
            subset: token ids, a 1-D integer tensor or sequence (any order, repeats allowed).

        Returns:
            a `CausalLM` view; `forward`/`chain`/`tree`/`prefill` return logits float32 [B, q, V].

        Raises:
            TypeError: `subset` not integer ids, or a model without output embeddings.
            ValueError: `subset` empty, not 1-D, or an id outside [0, V).
        """
        ids = check_subset(subset, self.vocab_size, "subset")
        full = self.model.get_output_embeddings() if hasattr(self.model, "get_output_embeddings") else None
        if not isinstance(full, torch.nn.Linear) and not is_quantized_linear(full):
            raise TypeError(f"model: a head subset needs a torch.nn.Linear output layer, got {type(full).__name__}")
        key = ids.numpy().tobytes()
        if key not in self._subset_heads:  # keep the last subset's head only
            head = subset_head(full, ids) if is_quantized_linear(full) else _linear_rows(full, ids)
            self._subset_heads = {key: (ids.to(self.device), head)}
        view = copy.copy(self)
        view._head_subset = self._subset_heads[key]
        view._prefill_memo, view._subset_heads, view.cache_pool = None, {}, {}
        return view

    def prefill(self, input_ids: torch.Tensor, logits_to_keep: int = 0):
        """A fresh cache holding `input_ids` [B, n]; returns (logits [B, n, V], cache), or
        [B, k, V] for the last k positions with logits_to_keep = k >= 1 (as `forward`). With
        `reuse_prefills()` on, a prompt seen before gets a deep copy of its stored cache (still
        counted as one forward): benchmarks time every method from the same prefilled state."""
        ids = self._check_ids(input_ids, "input_ids")
        if self._prefill_memo is None:
            return self.forward(ids, logits_to_keep=logits_to_keep)
        key = (tuple(ids.shape), tuple(ids.flatten().tolist()), logits_to_keep)
        if key not in self._prefill_memo:
            self._prefill_memo[key] = self.forward(ids, logits_to_keep=logits_to_keep)
        else:
            self.forward_count += 1
        logits, cache = self._prefill_memo[key]
        return logits.clone(), copy.deepcopy(cache)

    def reuse_prefills(self, enabled: bool = True) -> None:
        """Turn prefill memoisation on (a fresh, empty memo) or off (memo dropped)."""
        self._prefill_memo = {} if enabled else None

    def chain(self, cache, tokens: torch.Tensor) -> torch.Tensor:
        """Append `tokens` [B, q] to `cache` (causal; every cached position visible); returns
        logits [B, q, V]: row i is the next-token distribution after tokens[:, :i+1]."""
        logits, _ = self.forward(self._check_ids(tokens, "tokens"), cache)
        return logits

    def tree(self, cache, tokens: torch.Tensor, parents: torch.Tensor, *,
             past_valid: torch.Tensor | None = None, past_lengths: torch.Tensor | None = None) -> torch.Tensor:
        """Append a token tree to `cache` in one forward pass.

        Args:
            cache: DynamicCache holding S positions per row.
            tokens: int64 [B, N], the new tokens (node j of the tree is tokens[:, j]).
            parents: int64 [B, N], parents[b, j] < j (-1: attached to the cached prefix).
            past_valid: optional bool [B, S]: which cached positions each row may attend to
                (default: all).
            past_lengths: optional int64 [B]: each row's prefix length, i.e. the position id of
                depth 0 (default: past_valid.sum(-1), or S).

        Returns:
            logits float32 [B, N, V]: row j is the next-token distribution after the prefix and
            node j's root path. The cache grows by N positions (all rows).
        """
        tokens = self._check_ids(tokens, "tokens")
        if not isinstance(parents, torch.Tensor) or tuple(parents.shape) != tuple(tokens.shape):
            raise ValueError(f"parents: expected shape {tuple(tokens.shape)} (as tokens)")
        parents = parents.to(self.device, torch.long)
        S = cache_length(cache)
        if past_valid is not None:
            if tuple(past_valid.shape) != (tokens.shape[0], S):
                raise ValueError(f"past_valid: expected shape [{tokens.shape[0]}, {S}] (batch, cache length)")
            past_valid = past_valid.to(self.device, torch.bool)
        if past_lengths is None:
            past_lengths = past_valid.sum(-1) if past_valid is not None else torch.full(
                (tokens.shape[0],), S, dtype=torch.long, device=self.device)
        mask = tree_attention_mask(parents, S if past_valid is None else past_valid, self.dtype)
        depth = tree_ancestors(parents).sum(-1) - 1  # [B, N], root = 0
        position_ids = past_lengths.to(self.device).unsqueeze(1) + depth
        logits, _ = self.forward(tokens, cache, position_ids=position_ids, attention_mask=mask)
        return logits

    @property
    def forward_count(self) -> int:
        """Forward passes run so far by this model and its `with_head_subset` views."""
        return self._forwards[0]

    @forward_count.setter
    def forward_count(self, value: int) -> None:
        self._forwards[0] = value

    @property
    def head_subset(self) -> torch.Tensor | None:
        """The token ids S of a `with_head_subset` view (int64 [|S|], sorted), else None."""
        return None if self._head_subset is None else self._head_subset[0]

    @property
    def head_subset_layer(self) -> torch.nn.Module | None:
        """The output layer over S of a `with_head_subset` view (|S| output rows), else None."""
        return None if self._head_subset is None else self._head_subset[1]

    def __repr__(self):
        subset = "" if self._head_subset is None else f", head_subset={self._head_subset[0].numel()} ids"
        return (f"CausalLM({self.name!r}, vocab_size={self.vocab_size}{subset}, dtype={self.dtype}, "
                f"device={self.device})")
