"""The one decode loop of the torch backend: the mirror of `verispec.reference.methods.Method`.

A `TorchMethod` is a drafter paired with a verifier, as a reference `Method` is. `decode(...)` runs
it on real causal LMs; one iteration, for every active row at once:

    drafter.draft(rows)                     -> DraftTree: tokens / parents / real [B, N], q [B, N, V]
                                               or point masses, paths [B, K, L]  (`drafters`)
    target kv.append(tree)                  -> ONE target forward over the tree -> p [B, N, V]
    verifier(p, tree, uniforms)             -> Verdict: accepted nodes, tau, correction/bonus token
                                               (`verifiers.nodes`, or `adapter.ReferenceVerifier` for
                                               any reference Method)
    target kv.commit(root + accepted path)  -> the target cache keeps exactly the emitted prefix
    drafter.accept(tree, verdict)           -> the draft cache keeps what it ran of the path

The first iteration's target forward also reads the prompt (every token but the last, which is
the first tree's root), as transformers' assisted generation does: the drafter drafts from the
prompt first, so no target forward is spent on the prompt alone (`decode(verify_in_prefill=False)`
runs a separate prefill instead).

Rows that reach `max_new_tokens`, or emit an end-of-sequence id (`decode(eos_token_id=...)`),
leave the batch (every storage drops them). Storages
(`verispec.empirical.kv`): "sequence" (B = 1), "padded" (compact), "vanilla" (padded, masked
slots kept), "packed" (EMS-SD). Prompts of different lengths work with every storage and method.

Probabilities: p = softmax(logits / T) in float64 (T = 0: one-hot argmax, ties to the lowest id).
Randomness: a `UniformSource`; drafters `take` what they draw, verifiers `peek` then `advance` by
what each row consumed, so a stream source (`NumpyUniforms`, B = 1) keeps the reference's order.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .validation import (check_eos, check_pair, check_positive, check_prompt, check_prompts, check_source,
                         check_temperature)
from .drafters import DraftTree, probabilities
from .kv import STORAGES, new_kv, storage_name
from .torch_method import TorchMethod, target_only_method
from .adapter import torch_method
from ..reference.methods import Method
from .model import CausalLM
from .speedups.graphs import RunGraphs

__all__ = ["TorchMethod", "DecodeStats", "DecodeResult", "DecodeRun", "Rows", "decode", "target_only_method",
           "check_verdict"]


@dataclass
class DecodeStats:
    """Counters of one decoding run.

    Attributes:
        method: method name ("target_only" for plain decoding).
        iterations: batched verification steps, one target forward each (with
            `verify_in_prefill`, the first one also reads the prompt; else a prefill precedes).
        target_forwards, draft_forwards: forward passes (prefills included).
        accepted_lengths: int64 [num_row_iterations]: tau of every (row, iteration); in the
            iteration where a row emits EOS, the tokens it emitted up to and including EOS, minus
            one (tokens after EOS are not counted).
        wall_time_s: seconds spent.
        storage: the KV storage. padded_kv_slots: cache slots written that hold no token of
            their row, or left in the cache masked (target + draft; `verispec.empirical.kv`).
        peak_kv_slots, peak_draft_kv_slots: the most slots a target / draft cache held.
        kv_trace: per iteration, (target cache slots after the commit, the active rows' true
            cached lengths); equal when nothing padded is kept.
        prefill_time_s: seconds until every model has read the prompt (part of wall_time_s): the
            prefills, and with `verify_in_prefill` the whole first iteration.
        prompt_call_tokens: int64 [B]: tokens each row emitted in the target forward that read
            its prompt (tau + 1 of the first iteration with `verify_in_prefill`; else 0).
        draft_rows: token rows fed to the draft model while drafting.
        captured_steps, replayed_steps: steps this call captured as CUDA graphs (or simulated
            captures), and replays of captured steps (`decode(graphs=...)`; 0 when eager).
        logs: the method's own counters, from its drafter's `logs()` (the one place for them):
            target-only (`RootOnly`): "top2_margins" float32 [B, N] (top-1 minus top-2 logit at
            every step, to tell near-ties apart when another decoder's greedy output diverges),
            "runner_up_tokens" int64 [B, N]; trees (`trees.TreeDrafter`), per (row, iteration) in
            the order of `accepted_lengths`: "predicted_acceptance" float64 (the tree's E[A]),
            "tree_sizes" and "layers" int64; adaptive chains: "chain_lengths", "caps" (and "leaves_kept",
            "leaf_tokens" with runner-up leaves); phrase pools: "pool_lookups", "pool_hits", "draft_pool_tokens",
            "verified_pool_tokens", "pool_phrases" and "target_phrases" (ints; the last: `ouroboros_phrase_method`).
    """

    method: str
    iterations: int = 0
    target_forwards: int = 0
    draft_forwards: int = 0
    accepted_lengths: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    wall_time_s: float = 0.0
    storage: str = ""
    padded_kv_slots: int = 0
    peak_kv_slots: int = 0
    peak_draft_kv_slots: int = 0
    kv_trace: list = field(default_factory=list)
    prefill_time_s: float = 0.0
    draft_rows: int = 0
    logs: dict = field(default_factory=dict)
    prompt_call_tokens: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    captured_steps: int = 0
    replayed_steps: int = 0

    @property
    def mean_accepted(self) -> float:
        """Mean accepted draft tokens per iteration, E[tau]."""
        n = self.accepted_lengths.numel()
        return float(self.accepted_lengths.double().mean()) if n else 0.0

    @property
    def block_efficiency(self) -> float:
        """Tokens emitted per target call, E[tau] + 1 (1 for target-only decoding)."""
        return self.mean_accepted + 1.0


@dataclass
class DecodeResult:
    """tokens: int64 [B, max_new_tokens], the generated tokens (prompt excluded); stats.
    lengths: int64 [B], the real tokens of each row: max_new_tokens, or with an EOS stop the
    tokens up to and including the first EOS, after which the row is padded with the (first) EOS
    id. None from a decoder that does not report it (then every row has max_new_tokens)."""

    tokens: torch.Tensor
    stats: DecodeStats
    lengths: torch.Tensor | None = None


#: Slots a row's context and committed cache get beyond prompt + N (a drafter's last tree); the
#: context's width is rounded up to a multiple of it.
ROOM = 64


class Rows:
    """The active rows: context (prompt + emitted tokens, right-padded) and the last token
    (emitted, not yet in the target cache); vocab_size: the target's V (drafters without a draft
    model bound their tokens by it)."""

    def __init__(self, tokens: torch.Tensor, lengths: torch.Tensor, N: int, room: int, vocab_size: int = 0):
        B, device = tokens.shape[0], tokens.device  # tokens [B, n] right-padded, lengths [B]
        self.prompt_len, self.N, self.vocab_size = lengths, N, vocab_size
        self.longest = tokens.shape[1]  # a bound of every prompt's length, known to the host
        width = -(-(self.longest + N + room + 1) // ROOM) * ROOM  # rounded: one shape for many prompts
        self.ctx = torch.cat([tokens, tokens.new_zeros(B, width - self.longest)], dim=1)  # [B, W]
        self.ctx_len = lengths.clone()  # [B]
        self.row_id = torch.arange(B, device=device)  # original index of each active row
        self.last = self.ctx[self.row_id, self.ctx_len - 1]  # [B]

    @property
    def remaining(self) -> torch.Tensor:
        """int64 [B]: tokens each active row has still to emit (>= 1)."""
        return self.N - (self.ctx_len - self.prompt_len)

    def emit(self, tree: DraftTree, verdict) -> None:
        """Append each row's accepted tokens and its correction/bonus token to its context."""
        nodes, tau, y = verdict.nodes, verdict.tau, verdict.token  # [B, D], [B], [B]
        accepted = tree.tokens.gather(1, nodes.clamp(min=0))  # [B, D]
        emitted = torch.cat([accepted, y.unsqueeze(1)], dim=1)  # [B, D + 1]
        rows = torch.arange(emitted.shape[0], device=emitted.device)
        emitted[rows, tau] = y
        # an active row holds < N new tokens, so it needs at most longest + N + D slots (host-known)
        need = self.longest + self.N + emitted.shape[1]
        if need > self.ctx.shape[1]:  # a drafter deeper than announced: grow the context
            self.ctx = torch.cat([self.ctx, self.ctx.new_zeros(self.ctx.shape[0], need - self.ctx.shape[1])], 1)
        j = torch.arange(emitted.shape[1], device=emitted.device)
        index = (self.ctx_len.unsqueeze(1) + j).clamp(max=self.ctx.shape[1] - 1)  # [B, D + 1]
        self.ctx.scatter_(1, index, torch.where(j <= tau.unsqueeze(1), emitted, self.ctx.gather(1, index)))
        self.ctx_len = self.ctx_len + tau + 1
        self.last = y

    def finish(self, done: torch.Tensor, out: torch.Tensor, N: int, pad=None) -> None:
        """Copy the first N generated tokens of the rows in `done` [B] into out [B0, N] (CPU);
        with `pad` (an int), positions past a row's context (a row cut at EOS) get `pad`."""
        index = self.prompt_len[done].unsqueeze(1) + torch.arange(N, device=done.device)  # [b, N]
        tokens = self.ctx[done].gather(1, index)  # [b, N]
        if pad is not None:
            tokens = torch.where(index < self.ctx_len[done].unsqueeze(1), tokens, pad)
        out[self.row_id[done].cpu()] = tokens.cpu()

    def stop_at(self, eos: torch.Tensor, before: torch.Tensor, tau: torch.Tensor, width: int):
        """Cut each row's tokens emitted this iteration (context positions before[b] ..
        before[b] + tau[b], within the first N generated; tau < width) at the first id in eos [k]:
        the row's context then ends with that EOS. Returns (stopped bool [B], the real tau [B]:
        tau, or the EOS's index among the emitted tokens)."""
        j = torch.arange(width, device=tau.device)
        pos = before.unsqueeze(1) + j  # [B, width], context positions of the emitted tokens
        ours = (j <= tau.unsqueeze(1)) & (pos - self.prompt_len.unsqueeze(1) < self.N)
        hit = ours & torch.isin(self.ctx.gather(1, pos.clamp(max=self.ctx.shape[1] - 1)), eos)
        stopped = hit.any(1)
        first = torch.where(stopped, hit.long().argmax(1), tau)  # argmax: the first EOS
        self.ctx_len = torch.where(stopped, before + first + 1, self.ctx_len)
        return stopped, first

    def select(self, keep: torch.Tensor) -> None:
        for name in ("prompt_len", "ctx", "ctx_len", "row_id", "last"):
            setattr(self, name, getattr(self, name)[keep])


class _Progress:
    """What every iteration records, kept on the device and read once at the end: tau [B0, N]
    (tau of each original row per iteration, -1 where the row had left), trace [N, 2] (target
    cache slots after the commit, the active rows' true cached lengths), the iteration count `it`,
    the rows done [B], and the EOS ids [k] (None: no EOS stop)."""

    def __init__(self, B: int, N: int, device, eos):
        self.it = torch.zeros((), dtype=torch.long, device=device)
        self.tau = torch.full((B, N), -1, dtype=torch.long, device=device)
        self.trace = torch.zeros(N, 2, dtype=torch.long, device=device)
        self.done = torch.zeros(B, dtype=torch.bool, device=device)
        self.eos = eos

    def record(self, rows: Rows, tau: torch.Tensor, slots, stopped: torch.Tensor) -> None:
        """One iteration: every active row's tau [B], the target's cached slots, rows stopped at EOS [B]."""
        self.done = stopped | (rows.ctx_len - rows.prompt_len >= rows.N)  # [B]
        self.tau.index_put_((rows.row_id, self.it.expand_as(rows.row_id)), tau)
        if not isinstance(slots, torch.Tensor):
            slots = torch.full((), slots, dtype=torch.long, device=tau.device)
        self.trace.index_copy_(0, self.it.view(1), torch.stack([slots, (rows.ctx_len - 1).sum()]).view(1, 2))
        self.it = self.it + 1


def _prompts(prompts, model: CausalLM):
    """(tokens int64 [B, n] right-padded, lengths [B]) from a list of 1-D tensors (lengths may
    differ) or an int tensor [B, n] / [n] (rows of equal length)."""
    if isinstance(prompts, (list, tuple)):
        return check_prompts(prompts, model)
    tokens = check_prompt(prompts, model)
    return tokens, torch.full((tokens.shape[0],), tokens.shape[1], dtype=torch.long, device=tokens.device)


def _below_prompt(parents: torch.Tensor, n: int, lengths: torch.Tensor) -> torch.Tensor:
    """Tree parents [B, W] renumbered after n prompt columns: each root hangs below its row's
    last unread prompt token (column lengths[b] - 1; -1 when the row has none)."""
    return torch.where(parents >= 0, parents + n, (lengths - 1).unsqueeze(1))


def _unread_prompt(tokens: torch.Tensor, lengths: torch.Tensor):
    """What the target reads with the first tree: (tokens [B, n], real [B, n]), every prompt token
    but the last (the first root), right-padded; n = max(lengths) - 1 >= 1 (tokens is right-padded
    to the longest prompt, so n is read off its shape, not off the device)."""
    n = tokens.shape[1] - 1
    return tokens[:, :n], torch.arange(n, device=tokens.device) < (lengths - 1).unsqueeze(1)


def _tree_forward(kv, tree: DraftTree, unread=None):
    """ONE target forward over every row's tree -> (logits [B, N, V] in node layout (rows of
    padding nodes are never read), order [B, W]: the node of each fed column).

    A static storage takes the tree as it is (padding nodes included: fixed shapes); the others
    get the real nodes packed to the left (parents precede children, so the order is kept).

    unread: None, or (tokens [B, n], real [B, n]): prompt tokens the target has not read yet (all
    but the last, which is the tree's root), right-padded. They go first in the same forward, as
    a chain the tree hangs below, and only the tree's columns get logits (the prompt's own rows
    are not needed): the target reads the prompt and verifies the first draft at once."""
    real = tree.real
    B, N = real.shape
    if kv.static:
        W, order = N, torch.arange(N, device=real.device).expand(B, N)
        tokens, parents, fed = tree.tokens, tree.parents, real
    else:
        W = int(real.sum(1).max())
        order = torch.sort((~real).long(), dim=1, stable=True).indices[:, :W]  # [B, W]
        where = torch.zeros(B, N, dtype=torch.long, device=real.device)
        where.scatter_(1, order, torch.arange(W, device=real.device).expand(B, W))
        parents = tree.parents.gather(1, order)  # [B, W], node ids
        parents = torch.where(parents >= 0, where.gather(1, parents.clamp(min=0)), -1)
        tokens, fed = tree.tokens.gather(1, order), real.gather(1, order)  # [B, W]
    if unread is None:
        logits = kv.append(tokens, parents, fed, chain=tree.chain)  # [B, W, V]
    else:
        prompt, on = unread  # [B, n]
        n = prompt.shape[1]
        chain = (torch.arange(n, device=real.device) - 1).expand(B, n)
        parents = _below_prompt(parents, n, on.sum(1))
        logits = kv.append(torch.cat([prompt, tokens], 1), torch.cat([chain, parents], 1),
                           torch.cat([on, fed], 1), logits_to_keep=W)  # [B, W, V]
    if W == N and (kv.static or bool(real.all())):  # node layout already
        return logits, order
    full = torch.zeros(B, N, logits.shape[-1], dtype=logits.dtype, device=logits.device)
    full.scatter_(1, order.unsqueeze(-1).expand(-1, -1, logits.shape[-1]), logits)
    return full, order


def check_verdict(verdict, tree: DraftTree, name: str) -> None:
    """ValueError unless the verdict is a root path of real, verifiable nodes of the tree (the
    engine checks the verdicts of verifiers that are not `trusted`)."""
    nodes, tau, y = verdict.nodes, verdict.tau, verdict.token
    B, N = tree.tokens.shape
    if nodes.dim() != 2 or nodes.shape[0] != B or tuple(tau.shape) != (B,) or tuple(y.shape) != (B,):
        raise ValueError(f"verifier {name!r}: expected nodes [B, D], tau [B], token [B]")
    on = nodes >= 0
    if bool((on.sum(1) != tau).any()) or bool((nodes >= N).any()):
        raise ValueError(f"verifier {name!r}: the accepted nodes do not match tau")
    okay = tree.real if tree.verifiable is None else tree.real & tree.verifiable
    parent_ok = tree.parents.gather(1, nodes.clamp(min=0)) == torch.cat([nodes.new_zeros(B, 1), nodes[:, :-1]], 1)
    if bool((on & ~(okay.gather(1, nodes.clamp(min=0)) & parent_ok)).any()):
        raise ValueError(f"verifier {name!r}: the accepted nodes are not a root path of the draft tree")


@dataclass(frozen=True)
class _Options:
    """A `decode` call's settings, checked: N, T, the uniform source, the storage, whether the
    first tree is verified with the prompt, the EOS ids (None: no stop), the graph mode (None:
    eager; `speedups.graphs.MODES`) and the per-iteration callback."""

    N: int
    T: float
    source: object
    storage: str
    verify_in_prefill: bool
    eos: torch.Tensor | None
    graphs: str | None
    on_step: object = None


class DecodeRun:
    """The state of one `decode` call (what `decode(on_step=...)` is given after each iteration):
    rows, target KV (`kv`), drafter, the device-side records (`progress`). An iteration is
    `draft_step()` -> `tree`, then `verify_step()`, each captured as a CUDA graph where the call
    allows it (`speedups.graphs`), then one host synchronisation: are all rows done?"""

    def __init__(self, target, draft, method, tokens, lengths, options: _Options):
        self.target, self.draft, self.method, self.o = target, draft, method, options
        self.source = options.source
        B, longest = tokens.shape
        start = time.perf_counter()
        self.kv = new_kv(options.storage, target, B)
        self.unread = None  # prompt tokens the target reads with the first tree: (tokens, real) [B, n]
        if options.verify_in_prefill and longest > 1:
            self.unread = _unread_prompt(tokens, lengths)
        else:
            self.kv.prefill(tokens, lengths - 1)
        self.drafter = method.drafter()
        self.drafter.start(draft, tokens, lengths, options.T, self.source, options.storage)
        for kv in (self.kv, getattr(self.drafter, "kv", None)):
            if kv is not None:  # a static storage: room for the longest committed prefix
                kv.reserve(longest + options.N + ROOM)
        self.prefill_s = time.perf_counter() - start
        self.rows = Rows(tokens, lengths, options.N, room=ROOM, vocab_size=target.vocab_size)
        self.progress = _Progress(B, options.N, tokens.device, options.eos)
        self.out = torch.zeros(B, options.N, dtype=torch.long)
        self.lengths = torch.full((B,), options.N, dtype=torch.long)  # real tokens per row (< N after EOS)
        self.first_tau = None  # tau of the iteration that read the prompt
        self.graphs = RunGraphs.for_run(self, options.graphs)  # None: every step eager

    @torch.no_grad()
    def step(self) -> bool:
        """One iteration for every active row; False once every row is done."""
        first, start = self.unread is not None, time.perf_counter()
        tree = self._step("draft", self.draft_step, self._roles())
        if not isinstance(tree, DraftTree):
            raise TypeError(f"drafter of {self.method.name!r} returned {type(tree).__name__}, not a DraftTree")
        if not getattr(self.drafter, "trusted", False):
            tree.check(self.target.vocab_size, self.rows.row_id.numel(),
                       getattr(self.method.verifier, "needs_q", True))
        self.tree = tree
        self._step("verify", self.verify_step, self._roles(tree))
        going = self._go_on()
        if first:  # this iteration read the prompt: its time and tokens are the prefill's
            self.prefill_s += time.perf_counter() - start
        if self.o.on_step is not None:
            self.o.on_step(self)
        return going

    def _roles(self, tree=None) -> dict:
        return {"drafter": self.drafter, "draft_kv": getattr(self.drafter, "kv", None), "rows": self.rows,
                "kv": self.kv, "progress": self.progress, "tree": tree}

    def _step(self, name: str, fn, roles: dict):
        """fn() eagerly, or through the captured steps (`speedups.graphs`) where the call allows."""
        if self.graphs is None or self.unread is not None:
            return fn()
        return self.graphs.step(name, fn, roles)

    def draft_step(self) -> DraftTree:
        """The drafter's tree for the active rows."""
        return self.drafter.draft(self.rows)

    def verify_step(self) -> None:
        """On `self.tree`: the target forward, the rule, the KV keep and the records."""
        rows, verifier, tree, unread = self.rows, self.method.verifier, self.tree, self.unread
        logits, order = _tree_forward(self.kv, tree, unread)
        if self.method.observe is not None:
            self.method.observe(logits, tree, rows)
        self.drafter.observe(logits, tree, rows)
        verdict = verifier(probabilities(logits, self.o.T), tree, self.source, self.o.T, rows)
        if not getattr(verifier, "trusted", False):
            check_verdict(verdict, tree, getattr(verifier, "name", self.method.name))
        keep = torch.zeros_like(tree.real)
        keep.scatter_(1, verdict.nodes.clamp(min=0), verdict.nodes >= 0)
        keep[:, 0] = True  # after the scatter: rows with tau = 0 scatter False onto column 0
        keep = keep.gather(1, order) & tree.real.gather(1, order)
        keep = keep if unread is None else torch.cat([unread[1], keep], 1)
        self.kv.commit(keep, prefix=tree.chain)
        self.drafter.accept(tree, verdict)
        before, tau = rows.ctx_len, verdict.tau
        rows.emit(tree, verdict)
        stopped = torch.zeros_like(tau, dtype=torch.bool)  # [B], rows stopped at EOS
        if self.progress.eos is not None:
            stopped, tau = rows.stop_at(self.progress.eos, before, tau, verdict.nodes.shape[1] + 1)
        if unread is not None:
            self.unread, self.first_tau = None, tau
        self.progress.record(rows, tau, self.kv.slots(), stopped)

    def _go_on(self) -> bool:
        """The iteration's one host synchronisation: are all rows done, is any? Rows done leave."""
        done = self.progress.done
        every, some = torch.stack([done.all(), done.any()]).tolist()
        if every:
            return False
        if some:
            self._finish(done)
            keep_rows = (~done).nonzero().squeeze(1)
            for part in (self.rows, self.kv, self.drafter):
                part.select(keep_rows)
            self.progress.done = done[keep_rows]
        return True

    def _finish(self, done: torch.Tensor) -> None:
        """Copy the rows in `done` [B] out to the host (tokens and lengths)."""
        rows, N = self.rows, self.o.N
        rows.finish(done, self.out, N, None if self.progress.eos is None else int(self.progress.eos[0]))
        self.lengths[rows.row_id[done].cpu()] = (rows.ctx_len - rows.prompt_len)[done].clamp(max=N).cpu()

    def close(self) -> None:
        """Copy the last rows out and give static buffers back."""
        self._finish(self.progress.done)
        for kv in (self.kv, getattr(self.drafter, "kv", None)):
            if kv is not None:
                kv.close()


def decode(target: CausalLM, draft: CausalLM | None, prompts, method, max_new_tokens: int,
           temperature: float = 0.0, uniforms=None, *, storage: str = "padded",
           verify_in_prefill: bool = True, eos_token_id=None, graphs=None, on_step=None) -> DecodeResult:
    """Speculative decoding of B prompts with one method: drafter -> one target tree forward ->
    verifier -> KV keep, until every row has `max_new_tokens` tokens or has emitted EOS.

    Args:
        target: `CausalLM`. draft: `CausalLM` on the same vocabulary and device (None for
            drafters without a draft model: prompt lookup, lookahead).
        prompts: list of B int tensors [n_b], n_b >= 1 (lengths may differ), or int [B, n] / [n].
        method: a `TorchMethod` (`verispec.empirical.methods.get(name, ...)`), or a reference
            `verispec.reference.methods.Method` (run through `verispec.empirical.adapter`).
        max_new_tokens: N >= 1. temperature: T >= 0 (0: greedy; every lossless method then
            reproduces target-only greedy decoding). uniforms: `UniformSource`, an int seed, or
            None (stream sources need B = 1). storage: one of `kv.STORAGES` ("static": the
            preallocated KV of `speedups.static_kv`, no host synchronisation in a step).
        verify_in_prefill: True (default): ONE target forward reads the prompt and verifies the
            drafter's first draft (as transformers' assisted generation does); False: a prefill
            forward first. Same output law; with shared uniforms, the same tokens up to float ties.
        eos_token_id: None (default: every row gets exactly N tokens), or the tokenizer's EOS
            id (an int, or a sequence of ids, any of which stops): a row stops in the iteration
            that emits it; accepted tokens after it are dropped, the row's output is padded
            with the (first) EOS id after it, `DecodeResult.lengths` counts its tokens up to and
            including EOS, and its stats count only those (`DecodeStats.accepted_lengths`). The
            law of the tokens up to EOS is unchanged (as transformers' `generate` stops).
        graphs: keyword only. None or True (default None): on CUDA with storage "static", the
            draft and verify steps of a method whose drafter and verifier are `capturable` are
            captured as CUDA graphs and replayed (`speedups.graphs`); eager elsewhere (the same
            code). False: always eager. "simulate": the capture protocol replayed op by op on
            any device (a check that a step is capturable, slow).
        on_step: keyword only. None, or a callable run after every iteration (with the run): e.g.
            `speedups.syncs.SyncCounter.mark` to count host synchronisations per iteration.

    Returns:
        `DecodeResult`: tokens int64 [B, N] on CPU, lengths int64 [B]; `DecodeStats`.

    Raises:
        TypeError / ValueError naming the argument: non-CausalLM models, vocabulary or device
        mismatch, bad prompts, N < 1, negative temperature, unknown storage, a stream source with
        B > 1, an EOS id that is not an int in [0, V), a bad `graphs`, a drafter returning a
        malformed tree, a verifier returning a non-path (both checked unless marked `trusted`).
    """
    method = _as_method(method)
    storage = storage_name(storage)
    tokens, lengths = _checked_inputs(target, draft, method, prompts, storage)
    N = check_positive(max_new_tokens, "max_new_tokens")
    T = check_temperature(temperature, "temperature")
    source = check_source(uniforms, tokens.shape[0], target.device)
    start, counts = time.perf_counter(), (target.forward_count, draft.forward_count if draft is not None else 0)
    if not isinstance(verify_in_prefill, bool):
        raise TypeError(f"verify_in_prefill: expected a bool, got {type(verify_in_prefill).__name__}")
    eos = check_eos(eos_token_id, target.vocab_size, target.device)
    options = _Options(N, T, source, storage, verify_in_prefill, eos, RunGraphs.mode(graphs, target.device), on_step)
    run = DecodeRun(target, draft, method, tokens, lengths, options)
    try:
        while run.step():
            pass
    finally:
        run.close()
    return DecodeResult(run.out, _stats(run, method, storage, draft, counts, start), run.lengths)


def _checked_inputs(target, draft, method: TorchMethod, prompts, storage: str):
    """`decode`'s models, storage and prompts checked -> (tokens [B, n], lengths [B])."""
    if not isinstance(target, CausalLM):
        raise TypeError(f"target: expected a CausalLM, got {type(target).__name__}")
    if draft is not None or getattr(method.drafter(), "needs_model", False):
        check_pair(target, draft)
    if storage not in STORAGES:
        raise ValueError(f"storage: expected one of {', '.join(STORAGES)}, got {storage!r}")
    tokens, lengths = _prompts(prompts, target)
    if storage == "sequence" and tokens.shape[0] != 1:
        raise ValueError(f"storage: 'sequence' holds one row, got a batch of {tokens.shape[0]}")
    return tokens, lengths


def _stats(run: DecodeRun, method: TorchMethod, storage: str, draft, counts, start) -> DecodeStats:
    drafter, progress = run.drafter, run.progress
    draft_kv = getattr(drafter, "kv", None)
    iterations = int(progress.it)
    tau = progress.tau[:, :iterations].t().reshape(-1).cpu()  # iteration-major, rows in order
    trace = [tuple(row) for row in progress.trace[:iterations].tolist()]
    first = run.first_tau.cpu() + 1 if run.first_tau is not None else torch.zeros(run.out.shape[0], dtype=torch.long)
    return DecodeStats(
        method.name, iterations=iterations, target_forwards=run.target.forward_count - counts[0],
        draft_forwards=(draft.forward_count - counts[1]) if draft is not None else 0,
        accepted_lengths=tau[tau >= 0], wall_time_s=time.perf_counter() - start, storage=storage,
        padded_kv_slots=run.kv.padded_slots + (draft_kv.padded_slots if draft_kv is not None else 0),
        peak_kv_slots=run.kv.peak_slots, peak_draft_kv_slots=draft_kv.peak_slots if draft_kv is not None else 0,
        kv_trace=trace, prefill_time_s=run.prefill_s, draft_rows=drafter.draft_rows, logs=drafter.logs(),
        prompt_call_tokens=first, **(run.graphs.counts() if run.graphs is not None else {}))


def _as_method(method) -> TorchMethod:
    """A TorchMethod as is; a reference Method through the adapter."""
    if isinstance(method, TorchMethod):
        return method
    if isinstance(method, Method):
        return torch_method(method)
    raise TypeError(f"method: expected a TorchMethod or a verispec.reference.methods.Method, "
                    f"got {type(method).__name__}")
