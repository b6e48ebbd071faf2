"""Captured steps: the engine's draft step and verify step replayed as CUDA graphs.

A step (`verispec.empirical.engine`: the drafter's `draft`; the target forward, the rule, the KV
keep and the bookkeeping) is a fixed sequence of kernels once its shapes are fixed (the static
storage, `speedups.static_kv`, and a drafter and verifier that read no value back). As vLLM and
gpt-fast do, the engine captures it once per shape into a `torch.cuda.CUDAGraph` and replays it:
one launch per step instead of one per op, and the host never waits for the device inside a step.

How a step is captured (`StepGraphs.run`):
1. The first time a step's signature (`key`) comes, it runs eagerly (a warm-up) under a watch: a host synchronisation (`speedups.syncs.SyncCounter`), an op on a host
   tensor during a CUDA run, or a change to its objects other than tensors and counters marks the
   signature as not capturable; it then always runs eagerly. The uniforms it draws are recorded.
2. The second time, its state is copied into static input tensors (every tensor attribute of the
   objects it uses, the `roles`), and the step is captured. Then, and every later time: the current
   state is copied into those inputs, fresh uniforms fill a static buffer (`BufferedUniforms`: the
   step's draws come from it, in the order it takes them), the graph is replayed, the objects'
   attributes are pointed at the graph's outputs, and the integer counters the step bumps (forward
   counts, draft rows) are bumped by what the capture saw.
   The state's copy-in makes a graph independent of the objects of one call: a graph captured for
   one prompt serves every later prompt of the same shapes (the KV buffers are pooled per model,
   `static_kv.lease_cache`).

At T > 0 a replayed step draws other uniforms than the eager step would (one draw for the step
instead of one per request): the same law, another realisation. At T = 0 no draw matters.

``mode="simulate"`` runs the same protocol on any device without CUDA: the capture executes the
step while recording every aten op (raising on a host synchronisation, as a CUDA capture would),
and a replay re-executes the recorded ops on the same tensors, writing each result into the tensor
the capture produced. A step that is only correct when its Python code runs (a value baked into
the capture, state kept outside the roles) goes wrong under the simulation as it would on a GPU:
the CPU test of captured decoding.
"""

from __future__ import annotations

import dataclasses
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..uniforms import UniformSource
from .syncs import SYNC_OPS, SyncCounter, from_host

__all__ = ["StepGraphs", "RunGraphs", "BufferedUniforms", "NotCapturable", "MODES"]

#: "cuda": torch.cuda.CUDAGraph; "simulate": the recorded-op replay (any device, for tests).
MODES = ("cuda", "simulate")


class NotCapturable(RuntimeError):
    """A step read a value back, or changed its objects in a way a replay cannot repeat."""


class BufferedUniforms(UniformSource):
    """A step's uniforms: while `recording`, passes the real source's through and notes each
    request's size; while serving, hands out consecutive slices of `buffer` [rows, n] (filled
    from the real source before every replay). Unused uniforms are dropped, as by `TorchUniforms`."""

    def __init__(self, source: UniformSource):
        self.source, self.recording, self.requests, self.buffer, self.offset = source, True, [], None, 0

    def peek(self, rows: int, n: int, device=None) -> torch.Tensor:
        if self.recording:
            self.requests.append((rows, n))
            return self.source.peek(rows, n, device)
        out = self.buffer[:rows, self.offset:self.offset + n]  # [rows, n]
        self.offset += n
        return out

    def size(self) -> tuple[int, int]:
        """(rows, uniforms per row) the step draws."""
        return max((r for r, _ in self.requests), default=1), sum(n for _, n in self.requests)


# --- the simulated graph ---

class _Recorder(TorchDispatchMode):
    def __init__(self, ops: list):
        super().__init__()
        self.ops = ops

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in SYNC_OPS:
            raise NotCapturable(f"{func} inside a captured step (it reads a value back)")
        out = func(*args, **kwargs)
        if from_host(func, args, out):
            raise NotCapturable(f"{func} of host data inside a captured step (a blocking copy)")
        self.ops.append((func, args, kwargs, out, _kind(func, args, out)))
        return out


def _storages(values) -> set:
    return {v.untyped_storage().data_ptr() for v in values if isinstance(v, torch.Tensor)}


def _kind(func, args, out) -> str:
    """"mutate" (writes an input), "view" (returned an alias of an input: `to`, `reshape` and the
    like may or may not, so the capture's own outputs decide) or "fresh"."""
    schema = func._schema
    if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
        return "mutate"
    if any(r.alias_info is not None for r in schema.returns):
        inputs = _storages([a for a in args if isinstance(a, torch.Tensor)]
                           + [t for a in args if isinstance(a, (list, tuple)) for t in a])
        if _storages(out if isinstance(out, (list, tuple)) else [out]) <= inputs:
            return "view"
    return "fresh"


class _SimulatedGraph:
    """Capture = run and record the aten ops; replay = rerun them into the captured tensors."""

    def __init__(self):
        self.ops = []

    def capture(self, fn):
        with _Recorder(self.ops):
            return fn()

    def replay(self) -> None:
        for func, args, kwargs, out, kind in self.ops:
            if kind == "view":
                continue
            result = func(*args, **kwargs)
            if kind == "fresh":
                for mine, new in zip(out if isinstance(out, (tuple, list)) else (out,),
                                     result if isinstance(result, (tuple, list)) else (result,)):
                    if isinstance(mine, torch.Tensor):
                        mine.copy_(new)


class _CudaGraph:
    def __init__(self):
        self.graph = torch.cuda.CUDAGraph()

    def capture(self, fn):
        with torch.cuda.graph(self.graph):
            result = fn()
        self.graph.replay()  # a capture records the kernels without running them
        return result

    def replay(self) -> None:
        self.graph.replay()


# --- state: the tensor attributes of the roles ---

def _state(roles: dict) -> dict:
    """{(role, attribute): tensor} for every tensor attribute of the role objects."""
    return {(role, name): value for role, obj in roles.items() if obj is not None
            for name, value in vars(obj).items() if isinstance(value, torch.Tensor)}


def _scalars(roles: dict, models) -> dict:
    """{(role, attribute): int or float} of the roles (bools excluded), and each model's forward count."""
    out = {(role, name): value for role, obj in roles.items() if obj is not None
           for name, value in vars(obj).items() if type(value) in (int, float)}
    out.update({("model", i): m.forward_count for i, m in enumerate(models)})
    return out


def _others(roles: dict) -> dict:
    """{(role, attribute): (identity, length)} of every other attribute: a change is not replayable
    (but for an object's `memos`: attributes that cache values made from shapes alone)."""
    return {(role, name): (id(value), len(value) if isinstance(value, (list, dict)) else None)
            for role, obj in roles.items() if obj is not None for name, value in vars(obj).items()
            if not isinstance(value, torch.Tensor) and type(value) not in (int, float)
            and name not in getattr(obj, "memos", ())}


def _memos(roles: dict) -> dict:
    """{(role, attribute): a copy} of every `memos` dict of the roles (filled from shapes alone)."""
    return {(role, name): dict(getattr(obj, name)) for role, obj in roles.items() if obj is not None
            for name in getattr(obj, "memos", ())}


def _undo(roles: dict, models, state: dict, scalars: dict, memos: dict) -> None:
    """Put the roles back as they were before a failed capture: its tensors, counters and memos
    (a capture runs no kernel: what it made holds nothing)."""
    _bind(roles, state)
    for (role, name), value in scalars.items():
        if role == "model":
            models[name].forward_count = value
        else:
            setattr(roles[role], name, value)
    for (role, name), value in memos.items():
        setattr(roles[role], name, value)


def _bind(roles: dict, tensors: dict) -> None:
    for (role, name), value in tensors.items():
        setattr(roles[role], name, value)


def _flatten(result):
    """(tensor fields, template) of a step's result: a dataclass (a draft tree) or None."""
    if result is None:
        return {}, None
    return {f.name: getattr(result, f.name) for f in dataclasses.fields(result)
            if isinstance(getattr(result, f.name), torch.Tensor)}, result


@dataclasses.dataclass
class _Entry:
    graph: object
    inputs: dict
    outputs: dict
    deltas: dict
    template: object
    fields: dict
    uniforms: BufferedUniforms | None


class StepGraphs:
    """The captured steps of one target model, by signature (module docstring).

    Args:
        mode: "cuda" or "simulate" (`MODES`).

    Attributes:
        captured: {key: entry}. eager: signatures found not capturable. replays, captures: counts.
        failures: the captures that failed after a clean warm-up (those steps then run eagerly, warned).
    """

    def __init__(self, mode: str):
        if mode not in MODES:
            raise ValueError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")
        self.mode = mode
        self.captured, self.warm, self.eager = {}, {}, set()
        self.replays = self.captures = 0
        self.failures = []  # captures that failed (their steps run eagerly)

    def run(self, name, fn, roles: dict, models=(), sources=()):
        """Run step `fn()` (returning a dataclass or None) on the objects `roles` ({name: object};
        the step reads and writes their attributes), capturing it as described in the module
        docstring. `name`: what, besides the roles' tensor shapes, tells apart steps that run
        other code (hashable). `models`: the `CausalLM`s it runs (their forward counts are
        replayed); `sources`: (object, attribute) pairs holding the `UniformSource` it draws from."""
        state = _state(roles)
        key = (name, tuple(sorted((path, tuple(t.shape), t.dtype) for path, t in state.items())))
        if key in self.eager:
            return fn()
        entry = self.captured.get(key)
        if entry is not None:
            return self._replay(entry, state, roles, models, sources)
        if key not in self.warm:
            return self._warm_up(key, fn, roles, sources)
        return self._capture(key, fn, state, roles, models, sources)

    def _warm_up(self, key, fn, roles, sources):
        before = _others(roles)
        buffered = self._swap_sources(sources)
        counter = SyncCounter()
        try:
            with counter, _HostTensorWatch(self.mode == "cuda") as watch:
                result = fn()
        finally:
            self._restore(sources, buffered)
        if counter.total or watch.found or _others(roles) != before:
            self.eager.add(key)
        else:
            self.warm[key] = buffered
        return result

    def _swap_sources(self, sources, buffered: BufferedUniforms | None = None):
        """Point every (object, attribute) of `sources` at one BufferedUniforms of its source."""
        for obj, name in sources:
            current = getattr(obj, name)
            if buffered is None:
                buffered = BufferedUniforms(current)
            buffered.source = current if not isinstance(current, BufferedUniforms) else current.source
            setattr(obj, name, buffered)
        return buffered

    @staticmethod
    def _restore(sources, buffered) -> None:
        for obj, name in sources:
            setattr(obj, name, buffered.source)

    def _capture(self, key, fn, state, roles, models, sources):
        """Capture step `fn` keyed `key`; `state`: the roles' tensors (`_state`) before it runs."""
        recorded = self.warm.pop(key)
        inputs = {path: tensor.clone() for path, tensor in state.items()}
        before, memos = _scalars(roles, models), _memos(roles)
        _bind(roles, inputs)
        uniforms = None
        if recorded is not None:
            uniforms = BufferedUniforms(recorded.source)
            rows, n = recorded.size()
            uniforms.buffer = recorded.source.peek(rows, n, _device(state))
            uniforms.recording = False
            self._swap_sources(sources, uniforms)
        graph = _CudaGraph() if self.mode == "cuda" else _SimulatedGraph()
        try:
            result = graph.capture(fn)
        except Exception as error:  # noqa: BLE001 - a capture the warm-up did not foresee: run eagerly
            failed = error
        else:
            failed = None
        if uniforms is not None:
            self._restore(sources, uniforms)
        if failed is not None:
            _undo(roles, models, state, before, memos)
            self.eager.add(key)
            self.failures.append(f"{key[0]}: {type(failed).__name__}: {failed}")
            warnings.warn(f"speedups.graphs: step {key[0]!r} could not be captured, it runs eagerly: {failed}")
            return fn()
        after = _scalars(roles, models)
        fields, template = _flatten(result)
        entry = _Entry(graph, inputs, _state(roles), {k: after[k] - before[k] for k in after if k in before},
                       template, fields, uniforms)
        self.captured[key] = entry
        self.captures += 1
        return result

    def _replay(self, entry: _Entry, state, roles, models, sources):
        for path, tensor in state.items():  # the key fixes the paths and shapes
            static = entry.inputs[path]
            if static is not tensor:
                static.copy_(tensor)
        if entry.uniforms is not None:
            source = getattr(*sources[0])
            rows, n = entry.uniforms.buffer.shape
            entry.uniforms.buffer.copy_(source.peek(rows, n, entry.uniforms.buffer.device))
        entry.graph.replay()
        self.replays += 1
        _bind(roles, entry.outputs)
        for (role, name), delta in entry.deltas.items():
            if role == "model":
                models[name].forward_count += delta
            elif delta:
                setattr(roles[role], name, getattr(roles[role], name) + delta)
        if entry.template is None:
            return None
        return dataclasses.replace(entry.template, **entry.fields)


def _device(state: dict):
    return next(iter(state.values())).device if state else None


class _HostTensorWatch(TorchDispatchMode):
    """During a CUDA warm-up: notes an op on a host tensor (a CUDA graph would not replay it)."""

    def __init__(self, active: bool):
        super().__init__()
        self.active, self.found = active, False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.active and not self.found:
            flat = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, torch.Tensor)]
            self.found = any(a.device.type == "cpu" and a.dim() > 0 for a in flat)
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        return super().__enter__() if self.active else self

    def __exit__(self, *exc):
        return super().__exit__(*exc) if self.active else False


class RunGraphs:
    """One `engine.decode` call's use of its target's `StepGraphs` (kept in the target's
    `cache_pool`, so later calls reuse the captured steps): which calls qualify (`for_run`), each
    step's signature (`step`), and what the call captured and replayed (`counts`)."""

    def __init__(self, run, graphs: StepGraphs):
        self.run, self.graphs = run, graphs
        self.start = (graphs.captures, graphs.replays)

    @staticmethod
    def mode(graphs, device) -> str | None:
        """`decode`'s `graphs` -> a mode of `MODES`, or None (eager). None or True: "cuda" on a
        CUDA device, eager elsewhere; False: eager; "simulate": the simulation on any device.

        Raises:
            ValueError: any other value.
        """
        if graphs == "simulate":
            return "simulate"
        if graphs is None or graphs is True:
            return "cuda" if torch.device(device).type == "cuda" else None
        if graphs is False:
            return None
        raise ValueError(f"graphs: expected None, True, False or 'simulate', got {graphs!r}")

    @classmethod
    def for_run(cls, run, mode: str | None) -> "RunGraphs | None":
        """None unless the call can use captured steps: a mode, a static storage, a drafter and a
        verifier marked `capturable`, no `observe`, and a source that is not a stream (a stream's
        order of draws lives on the host)."""
        drafter, method = run.drafter, run.method
        if mode is None or not getattr(run.kv, "static", False) or method.observe is not None:
            return None
        if not (getattr(drafter, "capturable", False) and getattr(method.verifier, "capturable", False)):
            return None
        if getattr(run.source, "is_stream", True):
            return None
        return cls(run, run.target.cache_pool.setdefault(("graphs", mode), StepGraphs(mode)))

    def step(self, name: str, fn, roles: dict):
        """Run step `name` (`fn`, on `roles`) through the captured steps (`StepGraphs.run`)."""
        run, drafter, verifier = self.run, self.run.drafter, self.run.method.verifier
        key = (name, run.o.T, type(drafter).__name__, drafter.capture_key(), type(verifier).__name__,
               getattr(verifier, "name", None), id(run.target), id(run.draft), id(run.kv.cache),
               id(getattr(getattr(drafter, "kv", None), "cache", None)))
        models = [m for m in (run.target, run.draft) if m is not None]
        return self.graphs.run(key, fn, roles, models, [(run, "source"), (drafter, "source")])

    def counts(self) -> dict:
        """Steps captured and replays of captured steps since the call began."""
        return {"captured_steps": self.graphs.captures - self.start[0],
                "replayed_steps": self.graphs.replays - self.start[1]}
