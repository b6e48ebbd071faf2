"""Projected GPU timings of the real pair: its recorded greedy decisions replayed on the same architectures.

Why: the lent GPU machines reach no package registry and take at most 64 MiB of files per call, so
the real pair (1.6 GB of weights) cannot travel there. What can travel is what the weights decide at
T = 0: a few tokens and their probabilities per position of every forward.

How:
1. ``record`` (here, on the real pair, any device): runs a T = 0 bench (``verispec bench``, or its
   batched sweep) with a forward hook on each model that keeps, for every forward in call order and
   at every position it returns: the target's argmax token and its softmax probability; the
   draft's top 64 tokens, their logits and the row's logsumexp (a draft tree ranks the draft's top-n
   children, which an argmax alone would not replay). It writes a kit folder: that trace, the
   recorded run's JSON, its prompts, both models' ``config.json`` and the tokenizer files (no weights).
2. ``replay`` (on the GPU): builds both architectures from their configs with random weights (the
   target from any ``config.json`` with ``--target-config``), and replaces each forward's logits
   [B, q, V] by a float32 row: the target's is 0 everywhere but at the recorded argmax, set so that
   softmax gives that token the recorded probability; the draft's holds the recorded top-64 logits
   and shares the rest of the mass evenly among the other tokens. Every greedy decision is the real
   pair's (and so is transformers' assisted-generation confidence, which reads that probability),
   so the replay makes the recorded run's forwards with their shapes, and times them. The
   replacement runs on the device (`DeviceTrace`), inside the engine's captured steps too. Each
   record of a ``verispec bench`` preset starts at its own recorded forward, so a replay may run a
   subset of the recorded records; a record whose forwards leave their recorded [B, q] or count, or
   whose tokens differ from the recorded ones, stops the run (`ReplayDesync`), or with
   ``strict=False`` is listed in the file's "projection" ("out_of_step") and the others kept.
   A draft tree replays its recorded ranks exactly, but its probabilities only to float32
   round-off: products of them that tie within ~1e-7 may rank otherwise (flat distributions of
   random tiny models do; the test pair's peaked ones do not).

What the projection leaves out, and the result files say so ("projection" in the JSON):
- Sampling (T = 1): a sampled decision reads the whole distribution (V = 151,936 probabilities per
  position, about 0.6 MB), far beyond what one call carries; only T = 0 is replayed.
- The GPU's own bf16 numerics: the replay follows the CPU run's argmax, near-ties included, where a
  GPU forward might break a near-tie the other way.
- The cost of the model's own bf16 logits cast to float32 (the replacement is already float32); it
  pays instead one fill and one scatter per forward, for the baseline and every method alike.

Usage::

    python3 benchmarks/gpu_replay.py record ouroboros batched            # kits in .replay/<preset>
    python3 benchmarks/gpu_replay.py replay ouroboros batched --device cuda  # -> benchmarks/results/
    python3 benchmarks/gpu_replay.py record graphs trees                 # the engine's GPU kits
    python3 benchmarks/gpu_replay.py replay graphs trees --device cuda --graphs both \
        --target-config benchmarks/configs/qwen2.5-7b-instruct.json       # another target, same decisions
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import math
import os
import shutil
import sys
import types
from dataclasses import replace

import torch

from verispec import bench
from verispec.atomic import write_json_atomic
from verispec.bench import batched as batched_bench
from verispec.bench import run as run_module
from verispec.bench.records import RecordKey, record_key
from verispec.bench.weights import DEFAULT_DRAFT, DEFAULT_TARGET, ModelPair, convert_gguf
from verispec.empirical.model import CausalLM

#: The tables a GPU run is asked for, at T = 0: the two of the first H100 run, as their CPU files
#: ran them; "graphs" (the engine's captured steps against target-only and transformers' assisted
#: generation: 3 HumanEval prompts, 128 tokens, L = 4) and "trees" (OPT-Tree at its default n = 50
#: on the same prompts: its draft's top-k trace is what replays its trees; pinned to its fixed node
#: budget, pol=fixed, as the kits recorded it before the bench's default became pol=auto).
PRESETS = {
    "graphs": bench.BenchConfig(prompts=3, max_new_tokens=128, temperatures=(0.0,), draft_length=4, num_paths=3,
                                dtype="bfloat16", seed=0, methods=("block", "token", "hf")),
    "trees": bench.BenchConfig(prompts=3, max_new_tokens=128, temperatures=(0.0,), draft_length=4, num_paths=3,
                               dtype="bfloat16", seed=0, methods=("opt_tree:n=50,pol=fixed",)),
    "ouroboros": bench.BenchConfig(prompts=10, max_new_tokens=128, temperatures=(0.0,), draft_length=4,
                                   num_paths=3, dtype="bfloat16", seed=0,
                                   methods=("ouroboros_phrase", "lookahead", "block", "hf")),
    "batched": batched_bench.BatchedBenchConfig(prompts=8, max_new_tokens=64, batch_sizes=(1, 2, 4, 8),
                                                batches=2, methods=("block",), temperatures=(0.0,),
                                                draft_length=4, dtype="bfloat16", seed=0),
}
#: Methods whose records a kit holds under another label: {preset: {replay label: recorded label}}.
#: A method the bench now runs otherwise by default is pinned to the behaviour it was recorded with
#: by naming the parameter, which changes its label (say a kit recorded "opt_tree:n=50" before a
#: bench default "pol=auto": {"trees": {"opt_tree:n=50,pol=fixed": "opt_tree:n=50"}}).
RECORDED_AS = types.MappingProxyType({"trees": {"opt_tree:n=50,pol=fixed": "opt_tree:n=50"}})
ROLES = ("target", "draft")


class ReplayDesync(RuntimeError):
    """The replay asked for a forward the recorded run did not make (or made with another shape)."""


class _Hooks:
    """One forward hook per model of a pair; `paused()` lets forwards through untouched (warm-ups,
    which are neither recorded nor replayed)."""

    def __init__(self, pair):
        self.active = True
        self.handles = [getattr(pair, role).model.register_forward_hook(self._hook(role)) for role in ROLES]

    def _hook(self, role):
        def hook(module, args, output):
            return self.on_forward(role, output) if self.active else None
        return hook

    @contextlib.contextmanager
    def paused(self):
        active, self.active = self.active, False
        try:
            yield
        finally:
            self.active = active

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()

    def begin(self) -> None:
        """A measured record starts (`warm_ups_paused`)."""

    def end(self) -> None:
        """A measured record ends."""


#: Tokens kept per position of the draft's forwards: a draft tree (OPT-Tree) ranks the draft's
#: top-n children by probability (n <= 64), so an argmax alone would not replay it. The target's
#: forwards keep their argmax only (every rule at T = 0 reads that alone).
DRAFT_TOP_K = 64


class Recorder(_Hooks):
    """Keeps each forward's decisions: trace[role] is a list, in call order, of entries. The
    target's: (argmax int32 [B, q, 1], its probability float32 [B, q, 1]). The draft's: (its top
    `DRAFT_TOP_K` tokens int32 [B, q, k] in descending order, their logits float32 [B, q, k], the
    row's logsumexp float32 [B, q]): the logits themselves, so that a replay ranks them exactly as
    the recorded run did (an OPT-Tree ranks products of the draft's probabilities)."""

    def __init__(self, pair):
        self.trace = {role: [] for role in ROLES}
        super().__init__(pair)

    def on_forward(self, role, output):
        logits = output.logits.detach().float()  # [B, q, V]
        if role == "target":
            top = logits.argmax(-1, keepdim=True)  # [B, q, 1]; the first maximum, as the engine's argmax
            p = torch.softmax(logits.double(), -1).gather(-1, top)  # as the engine's `probabilities`
            self.trace[role].append((top.to(torch.int32).cpu(), p.float().cpu()))
            return
        k = min(DRAFT_TOP_K, logits.shape[-1])
        top = torch.sort(logits, dim=-1, descending=True, stable=True).indices[..., :k]  # ties: lower id first
        lse = torch.logsumexp(logits.double(), -1)  # [B, q]
        self.trace[role].append((top.to(torch.int32).cpu(), logits.gather(-1, top).cpu(), lse.float().cpu()))


def trace_entry(entry):
    """A trace entry as recorded: (ids [B, q, 1], probabilities [B, q, 1]) or (ids, logits
    [B, q, k], logsumexp [B, q]); kits recorded before top-k traces hold ([B, q], [B, q]): k = 1."""
    if len(entry) == 2 and entry[0].dim() == 2:
        return entry[0].unsqueeze(-1), entry[1].unsqueeze(-1)
    return tuple(entry)


def entry_logits(entry, vocab_size: int):
    """(x float32 [B, q, k], rest float32 [B, q]) of a trace entry: the recorded top-k logits and a
    logit for every other token that keeps the row's normaliser (logits entries), or, for an argmax
    and its probability (k = 1), `replacement_logit` against a rest of 0."""
    if len(entry) == 2:
        p = entry[1]  # [B, q, k]
        if p.shape[-1] != 1:  # top-k probabilities: a trace format no recorder writes any more
            raise ValueError(f"a probability trace entry holds one token per position, not {p.shape[-1]}: "
                             "re-record the kit (the draft's top-k is kept as logits and logsumexp)")
        return replacement_logit(p[..., 0], vocab_size).unsqueeze(-1), torch.zeros(p.shape[:-1])
    _, x, lse = entry
    k = x.shape[-1]
    left = (torch.exp(lse.double()) - torch.exp(x.double()).sum(-1)).clamp_min(1e-30) / max(vocab_size - k, 1)
    rest = torch.minimum(torch.log(left), x[..., -1].double() - 1e-3)  # below the k-th: the ranks hold
    return x.float(), rest.float()


class DeviceTrace:
    """One model's recorded decisions on the device, replayed forward by forward with tensor ops only
    (so a replay inside a captured CUDA graph reads the decision of the forward it is at).

    tokens / logits: int64 / float32 [total], every position's top-k tokens and their logits
    (`entry_logits`), flattened in call order; rest: float32 [positions], the logit of
    every other token; offsets / rows / shapes: int64 [F] / [F] / [F, 2] (where forward i starts in
    tokens and in rest, its [B, q]); next: forwards replayed (set per record by `Replayer.begin`);
    active: a bool flag (False: forwards pass untouched, the benches' warm-ups); bad: a forward whose
    [B, q] differs from the recorded one, or one past the recorded forwards."""

    def __init__(self, records: list, vocab_size: int, device):
        records = [trace_entry(entry) for entry in records] or [(torch.zeros(1, 1, 1, dtype=torch.int32),
                                                                 torch.ones(1, 1, 1))]
        self.count, self.k = len(records), records[0][0].shape[-1]
        x, rest = zip(*(entry_logits(entry, vocab_size) for entry in records))
        self.tokens = torch.cat([entry[0].reshape(-1) for entry in records]).to(device, torch.long)  # [total]
        self.logits = torch.cat([v.reshape(-1) for v in x]).to(device)  # [total]
        self.rest = torch.cat([r.reshape(-1) for r in rest]).to(device)  # [positions]
        sizes = torch.tensor([entry[0].shape[0] * entry[0].shape[1] for entry in records], dtype=torch.long)
        self.rows = (sizes.cumsum(0) - sizes).to(device)  # [F]
        self.offsets = self.rows * self.k  # [F]
        self.shapes = torch.tensor([list(entry[0].shape[:2]) for entry in records], dtype=torch.long).to(device)
        self.next = torch.zeros((), dtype=torch.long, device=device)
        self.active = torch.ones((), dtype=torch.bool, device=device)
        self.bad = torch.zeros((), dtype=torch.bool, device=device)

    def replace(self, logits: torch.Tensor) -> torch.Tensor:
        """The recorded decision for this forward: logits float32 [B, q, V] -> [B, q, V] (the rest
        logit everywhere but the recorded top-k's replacement logits) while active, unchanged otherwise."""
        B, q, V = logits.shape
        k, device = self.k, logits.device
        at = self.next.clamp(max=self.count - 1).view(1)  # [1]
        index = (self.offsets.index_select(0, at) + torch.arange(B * q * k, device=device)).clamp(
            max=self.tokens.numel() - 1)  # [B q k]
        row = (self.rows.index_select(0, at) + torch.arange(B * q, device=device)).clamp(max=self.rest.numel() - 1)
        top = self.tokens.index_select(0, index).view(B, q, k)
        value = self.logits.index_select(0, index).view(B, q, k)
        shape = self.shapes.index_select(0, at)[0]  # [2]
        in_step = (shape[0] == B) & (shape[1] == q) & (self.next < self.count)
        self.bad |= self.active & ~in_step
        self.next += self.active.long()
        rest = self.rest.index_select(0, row).view(B, q, 1)  # [B, q, 1]
        replaced = rest.expand(B, q, V).clone().scatter_(-1, top, value)  # [B, q, V]
        return torch.where(self.active, replaced, logits.float())


def record_offsets(recorded: dict) -> dict:
    """{record key: {role: (first forward, forwards, forwards of the prefill timed alone)}} of a
    `verispec bench` run, from its JSON (and "total": {role: forwards}):
    records in run order (prompts, then temperatures, then target-only and the methods, as
    `run_bench` runs them), each followed by the prompt's prefill timed alone where its first call
    emitted tokens (one target forward, and one draft forward if it drafted)."""
    run, records = recorded["last_run"], recorded["records"]
    out, at = {}, {role: 0 for role in ROLES}
    for task in run["prompts"]:
        for T in run["temperatures"]:
            for label in run["methods"]:
                key = record_key(label, T, task)
                record = records[key]
                counts = {"target": record["target_forwards"], "draft": record["draft_forwards"]}
                alone = {"target": 1, "draft": 1 if record["draft_forwards"] else 0} if record["prompt_call_tokens"] \
                    else {"target": 0, "draft": 0}
                out[key] = {role: (at[role], counts[role], alone[role]) for role in ROLES}
                for role in ROLES:
                    at[role] += counts[role] + alone[role]
    out["total"] = at
    return out


class Replayer(_Hooks):
    """Replaces each forward's logits by the recorded decision (module docstring, step 2): the
    engine's forwards through `CausalLM.logits_hooks` (captured with the steps), every other
    forward (transformers' assisted generation, a prefill timed alone) through a forward hook on the
    model. Both read one `DeviceTrace` per model.

    With `offsets` (`record_offsets` of the recorded run) and `sequence` (the record keys the
    replay runs, in order), each record starts at its own recorded forward (`begin`), so a record
    out of step leaves the others in step, and a replay may run a subset of the recorded records.

    Raises:
        ReplayDesync: a trace holding other than the recorded run's number of forwards.
    """

    def __init__(self, pair, trace: dict, offsets: dict | None = None, sequence=()):
        self.pair, self.offsets, self.sequence, self.done = pair, offsets, list(sequence), []
        if offsets is not None and {role: len(trace[role]) for role in ROLES} != offsets["total"]:
            raise ReplayDesync(f"the trace holds {({role: len(trace[role]) for role in ROLES})} forwards, the "
                               f"recorded run made {offsets['total']}")
        self.traces = {role: DeviceTrace(trace[role], getattr(pair, role).vocab_size, getattr(pair, role).device)
                       for role in ROLES}
        self.logits_hooks = {}
        for role in ROLES:
            self.logits_hooks[role] = self._engine_hook(role)
            getattr(pair, role).logits_hooks.append(self.logits_hooks[role])
        super().__init__(pair)

    def _engine_hook(self, role):
        def hook(lm, logits):
            return self.traces[role].replace(logits)
        return hook

    def begin(self) -> None:
        """A measured record starts: every trace to its first recorded forward (device-side)."""
        if self.offsets is None or not self.active:
            return
        key = self.sequence[len(self.done)]
        for role, trace in self.traces.items():
            trace.next.fill_(self.offsets[key][role][0])
            trace.bad.zero_()
        self.done.append((key, None))

    def end(self) -> None:
        """A measured record ends: where each trace stopped, and whether a forward was out of step."""
        if self.offsets is None or not self.active:
            return
        key = self.done[-1][0]
        self.done[-1] = (key, {role: (t.next.clone(), t.bad.clone()) for role, t in self.traces.items()})

    @contextlib.contextmanager
    def paused(self):
        """Forwards pass untouched: the module hooks return at once, and the engine's logits hooks
        (which captured steps replay without Python) read a device flag that is now False."""
        for trace in self.traces.values():
            trace.active.fill_(False)
        try:
            with super().paused():
                yield
        finally:
            for trace in self.traces.values():
                trace.active.fill_(True)

    def on_forward(self, role, output):
        if getattr(self.pair, role).in_forward:  # an engine forward: its logits hook replaces them
            return None
        output.logits = self.traces[role].replace(output.logits)
        return output

    def remove(self) -> None:
        super().remove()
        for role, hook in self.logits_hooks.items():
            getattr(self.pair, role).logits_hooks.remove(hook)

    def used(self) -> dict:
        """Forwards replayed per model."""
        if self.offsets is None:
            return {role: int(trace.next) for role, trace in self.traces.items()}
        return {role: sum(sum(self.offsets[key][role][1:]) for key, _ in self.done) for role in ROLES}

    def left(self) -> dict:
        """Recorded forwards not replayed, per model (all zero after a whole replay in step)."""
        if self.offsets is None:
            return {role: trace.count - int(trace.next) for role, trace in self.traces.items()}
        return {role: 0 for role in ROLES}

    def out_of_step(self) -> list:
        """The records (with offsets; else the models) whose replay met a forward of another [B, q]
        than recorded or one too many, or stopped short of their recorded forwards."""
        if self.offsets is None:
            return [role for role, trace in self.traces.items() if bool(trace.bad)]
        out = []
        for key, ends in self.done:
            for role, (stop, bad) in ends.items():
                first, count, _ = self.offsets[key][role]
                if bool(bad) or int(stop) != first + count:
                    out.append(key)
                    break
        return out


def replacement_logit(p: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The logit x that gives one token softmax probability p against V - 1 logits of 0:
    p = e^x / (e^x + V - 1), so x = log(p / (1 - p)) + log(V - 1). Kept above 0 so that the token
    stays the unique argmax; p is capped below 1 so that x is finite.

    Args: p: float [B, q] (recorded probabilities); vocab_size: V. Returns: float32 [B, q]."""
    p = p.double().clamp(1e-12, 1 - 2 ** -30)
    return (torch.log(p) - torch.log1p(-p) + math.log(vocab_size - 1)).clamp_min(1e-3).float()


@contextlib.contextmanager
def warm_ups_paused(hooks):
    """The benches' warm-ups (run_bench's `warm_up`; the batched bench's T = 1 `run_batch` calls)
    run with the hooks paused (the presets measure T = 0 only); each measured `run_method` call
    of `verispec bench` is bracketed by `hooks.begin()` / `hooks.end()`."""
    warm_up, run_batch, run_method = run_module.warm_up, batched_bench.run_batch, run_module.run_method

    def paused_warm_up(*args, **kwargs):
        with hooks.paused():
            return warm_up(*args, **kwargs)

    def run_batch_t0(label, pair, batch, config, T):
        if T == 0.0:
            return run_batch(label, pair, batch, config, T)
        with hooks.paused():
            return run_batch(label, pair, batch, config, T)

    def bracketed(*args, **kwargs):
        hooks.begin()
        try:
            return run_method(*args, **kwargs)
        finally:
            hooks.end()

    run_module.warm_up, batched_bench.run_batch, run_module.run_method = paused_warm_up, run_batch_t0, bracketed
    try:
        yield
    finally:
        run_module.warm_up, batched_bench.run_batch, run_module.run_method = warm_up, run_batch, run_method


def run_preset(name: str, config, pair, prompts, output: str, plot: bool) -> dict:
    """The preset's bench (`name`: "ouroboros" runs `verispec bench`, "batched" its batched sweep)
    on `pair`, into a fresh file `output`."""
    runner = batched_bench.run_batched_bench if name == "batched" else bench.run_bench
    return runner(config, output, fresh=True, pair=pair, prompts=prompts, plot=plot)


def record_run(name: str, config, pair, prompts, output: str) -> tuple[dict, dict]:
    """Step 1 on a loaded pair: (the run's results, its trace)."""
    recorder = Recorder(pair)
    try:
        with warm_ups_paused(recorder):
            results = run_preset(name, config, pair, prompts, output, plot=False)
    finally:
        recorder.remove()
    return results, recorder.trace


def replay_sequence(config, prompts) -> list:
    """The record keys `verispec bench` runs for `config` on `prompts`, in order."""
    labels = list(dict.fromkeys(["target_only"] + [bench.parse_method(m, config.draft_length, config.num_paths).label
                                                   for m in config.methods]))
    return [record_key(label, T, p["task_id"]) for p in prompts for T in config.temperatures for label in labels]


def replay_run(name: str, config, pair, prompts, trace: dict, recorded: dict, output: str,
               plot: bool = True, strict: bool = True, recorded_as: dict | None = None) -> dict:
    """Step 2 on a loaded pair of the recorded architectures; returns the results with their
    "projection" block (also written to `output`). A `verispec bench` preset replays record by
    record (`Replayer`), so its config may run a subset of the recorded methods and prompts;
    `recorded_as` maps a replay label to the label the kit recorded it under (`RECORDED_AS`).

    Raises:
        ReplayDesync: a replay record the kit does not hold (always); a forward out of step with
            the trace, recorded forwards left over, or a record whose tokens differ from the
            recorded run's: with strict=False these records are listed in the projection block
            ("out_of_step") instead, the others kept.
    """
    batched = name == "batched"
    recorded = relabelled(recorded, recorded_as or {})
    offsets = None if batched else record_offsets(recorded)
    sequence = () if batched else replay_sequence(config, prompts)
    missing = [key for key in sequence if key not in offsets]
    if missing:
        raise ReplayDesync(f"the kit holds no record {missing[0]!r} (recorded: {sorted(recorded['records'])}); a "
                           f"method recorded under another label is mapped by `recorded_as`")
    replayer = Replayer(pair, trace, offsets, sequence)
    try:
        with warm_ups_paused(replayer):
            results = run_preset(name, config, pair, prompts, output, plot)
    finally:
        replayer.remove()
    left, want, got = replayer.left(), tokens_of(recorded), tokens_of(results)
    want = want if batched else {key: want[key] for key in got if key in want}
    differ = sorted(key for key in want if got.get(key) != want[key])
    bad = replayer.out_of_step()
    problems = any(left.values()) or differ or set(got) != set(want) or bad
    if problems and strict:
        raise ReplayDesync(f"replay out of step: forwards left {left}, a forward of another shape or one too "
                           f"many in {bad}, records whose tokens differ {differ}")
    results["projection"] = {
        "what": "projected: both architectures with random weights, each forward's logits replaced by the "
                "top tokens and their probabilities recorded on the real pair (benchmarks/gpu_replay.py)",
        "recorded_on": recorded["environment"], "recorded_config": recorded["config"],
        "forwards_replayed": replayer.used(), "records_token_identical": len(want) - len(set(differ) | set(bad)),
        "out_of_step": sorted(set(differ) | set(bad)),
        "not_projected": ["T = 1 (sampling reads whole distributions)", "the GPU's own bf16 near-ties"],
    }
    write_json_atomic(output, results)
    return results


def relabelled(recorded: dict, recorded_as: dict) -> dict:
    """The recorded run's JSON with its labels renamed to the replay's: `recorded_as` maps a replay
    label to the label the kit recorded it under (`RECORDED_AS`); records and their order kept."""
    if not recorded_as:
        return recorded
    back = {kit: now for now, kit in recorded_as.items()}
    records = {}
    for text, record in recorded["records"].items():
        key = RecordKey.parse(text)
        records[str(key.relabelled(back.get(key.label, key.label)))] = record
    run = {**recorded["last_run"], "methods": [back.get(m, m) for m in recorded["last_run"]["methods"]]}
    return {**recorded, "records": records, "last_run": run}


def tokens_of(results: dict) -> dict:
    """Record key -> its tokens (a list, or a list of rows in the batched bench)."""
    return {key: record["tokens"] for key, record in results["records"].items()}


def save_kit(kit: str, trace: dict, prompts: list, sources: dict) -> None:
    """Write a recorded run's trace and prompts into `kit` (its JSON is already there, as
    recorded.json), with each model's JSON files from sources[role] (a transformers folder): no
    weights, and the tokenizer (shared by the pair) once, under target/."""
    torch.save(trace, os.path.join(kit, "trace.pt"))
    write_json_atomic(os.path.join(kit, "prompts.json"), prompts)
    for role, source in sources.items():
        os.makedirs(os.path.join(kit, role), exist_ok=True)
        for entry in os.listdir(source):
            if not entry.endswith(".json") or "safetensors" in entry or (role == "draft" and "token" in entry):
                continue
            if entry == "tokenizer.json":  # 11 MB for the pair's vocabulary, 2 MB gzipped: kits travel
                with open(os.path.join(source, entry), "rb") as src, \
                        gzip.open(os.path.join(kit, role, entry + ".gz"), "wb") as dst:
                    shutil.copyfileobj(src, dst)
            else:
                shutil.copy(os.path.join(source, entry), os.path.join(kit, role, entry))


def kit_tokenizer(folder: str):
    """The tokenizer of a kit's model folder (`save_kit`: tokenizer.json gzipped, read through a
    temporary copy of the folder; a folder with a plain tokenizer.json is read as it is)."""
    import tempfile

    from transformers import AutoTokenizer

    packed = os.path.join(folder, "tokenizer.json.gz")
    if not os.path.exists(packed):
        return AutoTokenizer.from_pretrained(folder)
    with tempfile.TemporaryDirectory() as tmp:
        for entry in os.listdir(folder):
            if entry != "tokenizer.json.gz":
                shutil.copy(os.path.join(folder, entry), os.path.join(tmp, entry))
        with gzip.open(packed, "rb") as src, open(os.path.join(tmp, "tokenizer.json"), "wb") as dst:
            shutil.copyfileobj(src, dst)
        return AutoTokenizer.from_pretrained(tmp)


def record(name: str, kit: str, threads: int = 2) -> None:
    """Step 1 on the real pair, written as a kit (module docstring)."""
    from verispec.bench.prompts import humaneval_prompts
    from verispec.bench.weights import load_pair

    config = replace(PRESETS[name], threads=threads)
    os.makedirs(kit, exist_ok=True)
    pair = load_pair(config.target, config.draft, dtype=torch.bfloat16)
    prompts = humaneval_prompts(config.prompts)
    _, trace = record_run(name, config, pair, prompts, os.path.join(kit, "recorded.json"))
    sources = {"target": str(convert_gguf(DEFAULT_TARGET)), "draft": str(convert_gguf(DEFAULT_DRAFT))}
    save_kit(kit, trace, prompts, sources)
    print(f"{name}: {sum(len(v) for v in trace.values())} forwards recorded into {kit}")


@contextlib.contextmanager
def assisted_generation_as_recorded(sklearn_available: bool):
    """transformers' assisted generation adapts its confidence threshold (an ROC curve) only where
    scikit-learn is installed; the replay takes the recorded host's branch (the recorded run's
    environment says whether it had scikit-learn), or its hf records would draft otherwise."""
    from transformers.generation import candidate_generator

    original = candidate_generator.is_sklearn_available
    candidate_generator.is_sklearn_available = lambda: sklearn_available
    try:
        yield
    finally:
        candidate_generator.is_sklearn_available = original


def target_config(kit: str, path: str | None, vocab_size: int):
    """The target's transformers config: the kit's (the recorded target), or the `config.json` at
    `path` (any architecture, e.g. benchmarks/configs/qwen2.5-7b-instruct.json) with its vocabulary
    set to `vocab_size`, the recorded pair's: the tokenizer's ids. Returns (config, note)."""
    from transformers import AutoConfig

    if path is None:
        return AutoConfig.from_pretrained(os.path.join(kit, "target")), "the recorded target's config.json"
    config = AutoConfig.from_pretrained(path)
    note = f"{path}"
    if config.vocab_size != vocab_size:
        # Qwen2.5-7B's embedding has 152,064 rows for a tokenizer of 151,665 ids (padded to a multiple
        # of 128); the 0.5B draft's 151,936. No token id reaches the rows past the tokenizer's, and
        # transformers' assisted generation treats models of unequal vocab_size as models of
        # different tokenizers (another algorithm), so the projected target keeps the draft's rows.
        note += f", vocab_size {config.vocab_size} -> {vocab_size} (the recorded pair's token ids)"
        config.vocab_size = vocab_size
    return config, note


def random_pair(kit: str, device: str, target_path: str | None = None, shrink=None):
    """Both architectures from the kit's configs (the target's from `target_path` when given,
    `target_config`), random weights, bf16, built on `device`; `shrink(config, role)` may edit a
    config first (smaller layers for a dry run: the vocabulary, hence every forward's shape, stays).
    Returns (ModelPair, a note on what the target is)."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    draft_config = AutoConfig.from_pretrained(os.path.join(kit, "draft"))
    configs = {"target": target_config(kit, target_path, draft_config.vocab_size), "draft": (draft_config, "")}
    models = []
    for seed, role in enumerate(ROLES):
        config = configs[role][0] if shrink is None else shrink(configs[role][0], role)
        torch.manual_seed(seed)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
        model.generation_config = GenerationConfig.from_pretrained(os.path.join(kit, role))  # the hf peer's
        models.append(CausalLM(model, name=f"{role} architecture, random weights"))
    pair = ModelPair(*models, kit_tokenizer(os.path.join(kit, "target")))
    return pair, configs["target"][1] + (" (shrunk)" if shrink is not None else "")


def forward_costs(pair, device: str, context: int = 118, rows=(1, 2, 4, 8, 16, 32, 64), repeats: int = 10) -> dict:
    """Seconds per forward of each model appending `rows` new tokens to a `context`-token cache
    (118: HumanEval's median prompt), the median of `repeats` after one warm-up (CUDA synchronised);
    what a method's extra rows cost on this device. {role: {rows: s}}."""
    import statistics
    import time

    from verispec.empirical.model import crop_cache

    def now():
        if str(device).startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter()

    out = {}
    for role in ROLES:
        model = getattr(pair, role)
        _, cache = model.prefill(torch.arange(1, context + 1, device=model.device).unsqueeze(0) % model.vocab_size)
        out[role] = {}
        for r in rows:
            tokens = torch.arange(1, r + 1, device=model.device).unsqueeze(0) % model.vocab_size  # [1, r]
            seconds = []
            for _ in range(repeats + 1):
                start = now()
                model.chain(cache, tokens)
                seconds.append(now() - start)
                crop_cache(cache, context)
            out[role][str(r)] = statistics.median(seconds[1:])
    return out


def load_kit(kit: str) -> tuple[dict, list, dict]:
    """(recorded results, prompts, trace) of a kit folder."""
    loaded = []
    for name in ("recorded.json", "prompts.json"):
        with open(os.path.join(kit, name)) as handle:
            loaded.append(json.load(handle))
    recorded, prompts = loaded
    return recorded, prompts, torch.load(os.path.join(kit, "trace.pt"))


def device_slug(device: str) -> str:
    """The device's name as it goes into result file names: "cpu" for any non-CUDA device, else the
    CUDA device's name lower-cased with spaces as dashes (e.g. "nvidia-h200")."""
    if str(device).startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device)).lower().replace(" ", "-")
    return "cpu"


def replay(presets, kit_root: str, device: str, out_dir: str, target_path: str | None = None,
           graphs=(True,), plot: bool = True) -> dict:
    """Step 2 (module docstring) for each preset, from ``kit_root/<preset>``, on one pair built on
    `device` (the target from `target_path` when given, `target_config`): `replay_on`. Returns
    {(preset, graphs): results}."""
    pair, note = random_pair(os.path.join(kit_root, presets[0]), device, target_path)
    tag = "" if target_path is None else "_" + os.path.splitext(os.path.basename(target_path))[0]
    return replay_on(pair, note, presets, kit_root, out_dir, graphs, plot, tag)


def replay_on(pair, note: str, presets, kit_root: str, out_dir: str, graphs=(True,), plot: bool = True,
              tag: str = "", strict: bool = True) -> dict:
    """Replay each preset on a built pair, once per CUDA-graph setting in `graphs` (`replay_one`);
    writes ``out_dir/bench_<preset><tag>_<device name>[_eager]_projected.json`` (+ PNG when `plot`)
    with the forward costs of both models on that device. Returns {(preset, graphs): results}."""
    device = str(pair.target.device)
    done, outputs, slug = {}, {}, device_slug(device)
    for name in presets:
        kit = load_kit(os.path.join(kit_root, name))
        for on in graphs:
            output = os.path.join(out_dir, f"bench_{name}{tag}_{slug}{'' if on else '_eager'}_projected.json")
            done[name, on], outputs[name, on] = replay_one(pair, note, name, kit, on, output, plot, strict), output
    costs = forward_costs(pair, device)  # after the runs: the replays' hooks are off
    for key, results in done.items():
        results["forward_costs_s"] = costs
        write_json_atomic(outputs[key], results)
    return done


def replay_one(pair, note: str, name: str, kit: tuple, graphs: bool, output: str, plot: bool = False,
               strict: bool = True) -> dict:
    """One preset's replay (`replay_run`, `RECORDED_AS`'s labels) on a built pair from a loaded kit
    (`load_kit`), the engine's CUDA graphs on or off, the bench's file at `output`; the results say
    which target ("projection"/"target": `note`)."""
    recorded, prompts, trace = kit
    config = replace(PRESETS[name], device=str(pair.target.device), threads=0)
    if hasattr(config, "graphs"):
        config = replace(config, graphs=graphs)
    with assisted_generation_as_recorded(recorded["environment"]["scikit_learn"] is not None):
        results = replay_run(name, config, pair, prompts, trace, recorded, output, plot, strict, RECORDED_AS.get(name))
    results["projection"]["target"] = note
    print(f"{name} (graphs {'on' if graphs else 'off'}): {results['projection']['forwards_replayed']} forwards "
          f"replayed, {results['projection']['records_token_identical']} records token-identical -> {output}",
          flush=True)
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("step", choices=("record", "replay"))
    parser.add_argument("presets", nargs="+", choices=sorted(PRESETS))
    parser.add_argument("--kit-root", default=".replay", help="kits live in KIT_ROOT/<preset> (default .replay)")
    parser.add_argument("--device", default="cuda", help="replay: the device (default cuda)")
    parser.add_argument("--out-dir", default=os.path.join("benchmarks", "results"), help="replay: where results go")
    parser.add_argument("--threads", type=int, default=2, help="record: torch threads (default 2)")
    parser.add_argument("--target-config", help="replay: a config.json for the target (any architecture; the "
                                                "vocabulary is set to the recorded pair's), e.g. "
                                                "benchmarks/configs/qwen2.5-7b-instruct.json")
    parser.add_argument("--graphs", default="on", choices=("on", "off", "both"),
                        help="replay: the engine's CUDA graphs (default on; both: one file each)")
    parser.add_argument("--no-plot", action="store_true", help="replay: no PNG")
    args = parser.parse_args(argv)
    if args.step == "record":
        for name in args.presets:
            record(name, os.path.join(args.kit_root, name), args.threads)
    else:
        graphs = {"on": (True,), "off": (False,), "both": (True, False)}[args.graphs]
        replay(args.presets, args.kit_root, args.device, args.out_dir, args.target_config, graphs, not args.no_plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
