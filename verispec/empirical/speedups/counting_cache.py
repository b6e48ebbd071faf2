"""`CountingCache`: a transformers `DynamicCache` that counts the KV slots a forward really writes, so
a storage's padded slots are measured from its cache writes rather than set by construction
(EMS-SD's accounting, Ni et al. 2024, arXiv 2405.07542).

A module of its own because it subclasses a transformers class at import: `attention` and `kv`
import it only where a cache is made, so importing them does not import transformers. The class
is defined once, at this module's import (no class built per call, no module-level cache).
"""

from __future__ import annotations

from transformers import DynamicCache

__all__ = ["CountingCache"]


class CountingCache(DynamicCache):
    """A `DynamicCache` that counts the sequence slots written to it (per forward: the batch x
    new positions of layer 0's write; all layers write the same) and reports the slots it holds.

    Attributes:
        slots_written: int, total batch x positions written since creation.
    """

    slots_written = 0

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        if layer_idx == 0:  # key_states [B, H_kv, n, D]
            self.slots_written += int(key_states.shape[0] * key_states.shape[-2])
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)

    def slots_held(self) -> int:
        """batch x sequence length of the cache now (every slot, visible or masked)."""
        for layer in getattr(self, "layers", []):
            keys = getattr(layer, "keys", None)
            if keys is not None and keys.dim() == 4:
                return int(keys.shape[0] * keys.shape[2])
        return 0
