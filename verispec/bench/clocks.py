"""Timing and memory of one bench record: `PhaseClock` (one timed span split where the method has
read the prompt), `PeakMemory` (peak CUDA allocation or process RSS) and `prefill_only_seconds`
(a prefill-only forward timed on its own, for the derived all-tokens rate)."""

from __future__ import annotations

import os
import threading
import time

import torch

__all__ = ["PeakMemory", "PhaseClock", "prefill_only_seconds"]


class PeakMemory:
    """Peak memory over a block: CUDA allocator peak, or the process RSS sampled every 5 ms on
    CPU (Linux /proc; None elsewhere). `peak_mb` after exit."""

    def __init__(self, device: str):
        self.cuda = str(device).startswith("cuda")
        self.peak_mb = None
        self._stop = threading.Event()

    @staticmethod
    def _rss_mb():
        try:
            with open("/proc/self/statm") as handle:
                return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
        except (OSError, ValueError, IndexError):
            return None

    def _sample(self):
        while not self._stop.wait(0.005):
            rss = self._rss_mb()
            if rss is not None:
                self.peak_mb = max(self.peak_mb or 0.0, rss)

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            self.peak_mb = self._rss_mb()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize()
            self.peak_mb = torch.cuda.max_memory_allocated() / 2 ** 20
        else:
            self._stop.set()
            self._thread.join()
        return False


class PhaseClock:
    """One timed span of a method, split where it has read the prompt.

    Forward hooks on the models note when the first forward of each model ends; the split is the
    latest of those (our methods: the target's then the draft's prefill; transformers' assisted
    generation: its first target call, which reads the prompt with the first candidates). A
    `CausalLM`'s logits hook notes it too, for forwards that do not call the module (a draft's
    lean forward, `verispec.empirical.speedups.lean_forward`).
    `prefill_s` + `decode_s` = `total_s`, all measured (perf_counter; CUDA synchronised at the
    start, at the first forwards and at the end).
    """

    def __init__(self, models, device="cpu"):
        self.models = [m for m in models if m is not None]
        self.cuda = str(device).startswith("cuda")
        self.first_end: dict = {}

    def _now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def _hook(self, index):
        def hook(*_):
            if index not in self.first_end:
                self.first_end[index] = self._now()
        return hook

    def __enter__(self):
        self._hooks = [self._hook(i) for i in range(len(self.models))]
        self._handles = [m.model.register_forward_hook(hook) for m, hook in zip(self.models, self._hooks)]
        for m, hook in zip(self.models, self._hooks):
            m.logits_hooks.append(hook)  # returns None: the logits stay as they are
        self.start = self._now()
        return self

    def __exit__(self, *exc):
        self.end = self._now()
        for handle in self._handles:
            handle.remove()
        for m, hook in zip(self.models, self._hooks):
            m.logits_hooks.remove(hook)
        return False

    @property
    def total_s(self) -> float:
        return self.end - self.start

    @property
    def prefill_s(self) -> float:
        return (max(self.first_end.values()) - self.start) if self.first_end else 0.0

    @property
    def decode_s(self) -> float:
        return self.total_s - self.prefill_s


def prefill_only_seconds(pair, ids, with_draft: bool, device) -> float:
    """Seconds of a prefill-only forward of the prompt `ids` [1, n] by the target (and the
    draft), fresh caches: the prefill cost of a method whose prompt-reading call also verified a
    draft (the peer; ours), for the derived `tokens_per_s_all` of its record."""
    cuda = str(device).startswith("cuda")
    with torch.inference_mode():
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        for model in (pair.target, pair.draft) if with_draft else (pair.target,):
            model.model(input_ids=ids, use_cache=True)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start
