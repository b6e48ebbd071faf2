"""Where one speculative-decoding iteration spends its time, apart from the forwards.

Runs methods on the engine (`verispec.empirical.engine.decode`, one row, "sequence" storage) with
timestamps around every target and draft forward (forward hooks on the transformers model, so the
LM head is inside the forward and the float32 cast of its logits outside), the drafter's draft /
accept and the verifier, and splits each iteration into:

    draft forwards | draft overhead (drafting outside the draft forwards: draft q, draws, masks)
    pre-target     (tree checks, packing the tree, attention masks)
    target forward
    post-target    (logits to node layout, probabilities over the vocabulary)
    verifier       (the rule)
    bookkeeping    (KV commit, draft-cache update, emitting tokens, finished rows)

Each part is reported per iteration and as a fraction of one target forward (the mean target
forward of the same run); the verifier's overhead is post-target + verifier (the goal: under 5%
of a target forward); everything that is not a forward is `non_forward_fraction`. Fractions are
the median over `--repeats` runs (every run is kept in the JSON). `--ops N` adds one run under
torch.profiler and lists the N aten ops with the most self time outside the forwards.

On CUDA every timestamp synchronises the device, which serialises the run: the split is honest,
the total is not the bench's. Absolute times mean something only on a quiet machine; the JSON
records the load average before and after, and `--label` (e.g. "quiet" or "contended").

    python3 benchmarks/profile_iteration.py [--method block --method hybrid ...] [--param block:draft_length=4]
        [--tokens 64] [--prompts 1] [--repeats 3] [--temperature 0] [--dtype auto] [--device cpu]
        [--threads 2] [--ops 15] [--label quiet] [--before OLD.json] [--code DIR] [--tiny [--vocab V]]
        [--kit .replay/ouroboros]

`--code DIR` imports verispec from another checkout (e.g. an export of an older commit, for a
before/after on the same host); `--before OLD.json` copies that run's summary into the output
and reports the change. `--tiny` uses two random 1-layer models (no download; `--vocab 151936`
makes the per-iteration overhead dominate). `--kit` builds the real pair's architectures with
random weights from a `benchmarks/gpu_replay.py` kit (for a GPU the weights cannot reach): the
split of an iteration holds, its accepted lengths are the random models'. Writes benchmarks/results/profile_iteration_<device>.json
(or --output).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import types

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PARTS = ("draft_forwards", "draft_overhead", "pre_target", "target_forward", "post_target", "verifier",
         "bookkeeping")
#: The runners the bench compares with the peer, with the bench's parameters.
DEFAULT_METHODS = ("block", "adaptive", "hybrid", "prompt_lookup")
DEFAULT_PARAMS = {"block": {"draft_length": 4}, "adaptive": {"draft_length": 4}, "hybrid": {"draft_length": 4},
                  "token": {"draft_length": 4}}


class Timeline:
    """Named timestamps (perf_counter; CUDA synchronised first when `cuda`)."""

    def __init__(self, cuda: bool = False):
        self.cuda, self.events = cuda, []

    def mark(self, name: str) -> None:
        if self.cuda:
            torch.cuda.synchronize()
        self.events.append((name, time.perf_counter()))


class _TimedDrafter:
    """A drafter proxy marking draft() and accept(); every other attribute is the drafter's."""

    def __init__(self, inner, timeline: Timeline):
        self.__dict__.update(_inner=inner, _timeline=timeline)

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def __setattr__(self, name, value):
        setattr(self._inner, name, value)

    def draft(self, rows):
        self._timeline.mark("draft_start")
        tree = self._inner.draft(rows)
        self._timeline.mark("draft_end")
        return tree

    def accept(self, tree, verdict):
        self._timeline.mark("accept_start")
        self._inner.accept(tree, verdict)
        self._timeline.mark("accept_end")


class _TimedVerifier:
    def __init__(self, inner, timeline: Timeline):
        self.inner, self.timeline = inner, timeline
        self.needs_q = getattr(inner, "needs_q", True)
        self.name = getattr(inner, "name", "verifier")

    def __call__(self, *args, **kwargs):
        self.timeline.mark("verify_start")
        verdict = self.inner(*args, **kwargs)
        self.timeline.mark("verify_end")
        return verdict


def _hook(model, timeline: Timeline, tag: str):
    module = model.model
    return [module.register_forward_pre_hook(lambda *a: timeline.mark(f"{tag}_start")),
            module.register_forward_hook(lambda *a: timeline.mark(f"{tag}_end"))]


def split_iterations(events) -> list[dict]:
    """Per iteration (from one draft_start to the next, the last to "end"): seconds of every part
    of `PARTS` (they sum to the iteration's span)."""
    starts = [i for i, (name, _) in enumerate(events) if name == "draft_start"]
    out = []
    for k, i in enumerate(starts):
        j = starts[k + 1] if k + 1 < len(starts) else len(events) - 1
        span = events[i:j + 1]
        at = {}
        draft_fw, target_fw, open_ = 0.0, 0.0, {}
        for name, t in span:
            at.setdefault(name, t)
            if name.endswith("_start") and name.split("_")[0] in ("draftfw", "targetfw"):
                open_[name.split("_")[0]] = t
            elif name == "draftfw_end":
                draft_fw += t - open_.pop("draftfw")
            elif name == "targetfw_end":
                target_fw += t - open_.pop("targetfw")
        total = span[-1][1] - span[0][1]
        drafting = at["draft_end"] - at["draft_start"]
        parts = {"draft_forwards": draft_fw, "draft_overhead": drafting - draft_fw,
                 "pre_target": at["targetfw_start"] - at["draft_end"], "target_forward": target_fw,
                 "post_target": at["verify_start"] - at["targetfw_end"],
                 "verifier": at["verify_end"] - at["verify_start"]}
        parts["bookkeeping"] = total - sum(parts.values())
        out.append(parts)
    return out


def _summary(iterations: list[dict]) -> dict:
    """Means per iteration of every part, their fractions of one target forward, the verifier's
    overhead fraction ((post_target + verifier) / target_forward) and the non-forward fraction."""
    if not iterations:
        raise ValueError("--tokens: too few to leave an iteration after the one that reads the prompt")
    mean = {part: sum(it[part] for it in iterations) / len(iterations) for part in PARTS}
    forward = mean["target_forward"]
    return {"iterations": len(iterations), "seconds_per_iteration": mean,
            "fraction_of_target_forward": {p: mean[p] / forward for p in PARTS},
            "verifier_overhead_fraction": (mean["post_target"] + mean["verifier"]) / forward,
            "non_forward_fraction": (sum(mean.values()) - mean["target_forward"] - mean["draft_forwards"]) / forward}


def _timed_method(method, timeline: Timeline):
    from verispec.empirical import engine

    return engine.TorchMethod(method.name, lambda: _TimedDrafter(method.drafter(), timeline),
                              _TimedVerifier(method.verifier, timeline), method.params, method.observe)


def profile(target, draft, prompts, method, max_new_tokens: int, temperature: float = 0.0, seed: int = 0) -> dict:
    """Decode each prompt (a [1, n] tensor, or a list of them) with `method` (a TorchMethod)
    under the timeline; returns `_summary` of all their iterations, the block efficiency and the
    generated tokens (one list per prompt)."""
    from verispec.empirical import engine

    prompts = [prompts] if isinstance(prompts, torch.Tensor) else list(prompts)
    timeline = Timeline(cuda=str(target.device).startswith("cuda"))
    handles = _hook(target, timeline, "targetfw") + (_hook(draft, timeline, "draftfw") if draft is not None else [])
    iterations, tokens, taus = [], [], []
    try:
        for prompt in prompts:
            timeline.events = []
            result = engine.decode(target, draft, prompt, _timed_method(method, timeline), max_new_tokens,
                                   temperature, uniforms=seed, **eager_storage(engine))
            timeline.mark("end")
            first = next(i for i, (name, _) in enumerate(timeline.events) if name == "draft_start")
            # the first iteration's target forward reads the prompt too (`engine.decode`): not a typical one
            iterations += split_iterations(timeline.events[first:])[1:]
            tokens.append(result.tokens[0].tolist())
            taus.append(result.stats.accepted_lengths)
    finally:
        for handle in handles:
            handle.remove()
    out = _summary(iterations)
    out.update(block_efficiency=float(torch.cat(taus).double().mean()) + 1.0, tokens=tokens)
    return out


def eager_storage(engine) -> dict:
    """`decode`'s storage arguments for the timeline split: the bench's static KV run eagerly (an
    older checkout, `--code`, without it: "sequence")."""
    if "static" in getattr(engine, "STORAGES", ()):
        return {"storage": "static", "graphs": False}
    return {"storage": "sequence"}


@contextlib.contextmanager
def stubbed_forwards(models):
    """Every model's forward returns logits of zeros of the shape it would return, running no layer
    and writing no KV: what is left of a decode is everything outside the forwards (the engine's
    ops, captured steps included). The decisions change (every argmax is token 0), the shapes of a
    fixed-shape iteration (target-only, token, block) do not."""
    patched = []
    for lm in models:
        module = lm.model

        def stub(input_ids=None, cache=None, logits_to_keep=0, lm=lm, **kwargs):
            q = logits_to_keep if logits_to_keep else input_ids.shape[1]
            return types.SimpleNamespace(logits=torch.zeros(input_ids.shape[0], q, lm.vocab_size, dtype=lm.dtype,
                                                            device=lm.device), cache=cache)

        module.forward = stub  # an instance attribute: nn.Module.__call__ runs it
        patched.append(module)
    try:
        yield
    finally:
        for module in patched:
            del module.forward


def _per_iteration(target, draft, prompts, method, tokens: int, temperature: float) -> float:
    """Seconds per iteration after the one that reads the prompt (the decode phase), over the
    prompts, CUDA graphs on where the device has them (the bench's setting)."""
    from verispec.empirical import engine

    seconds, iterations = 0.0, 0
    for prompt in prompts:
        result = engine.decode(target, draft, prompt, method, tokens, temperature, uniforms=0, storage="static",
                               graphs=True)  # the run ends with a host sync: the time is the device's
        seconds += result.stats.wall_time_s - result.stats.prefill_time_s
        iterations += result.stats.iterations - 1
    return seconds / max(iterations, 1)


def outside_share(target, draft, prompts, method, tokens: int, temperature: float, repeats: int) -> dict:
    """The share of decode time outside the forwards, for a method whose iterations have fixed
    shapes: seconds per iteration of the bench's decode (static KV, CUDA graphs where the device has
    them) and of the same decode with the forwards stubbed (`stubbed_forwards`), each the median of
    `repeats` runs after a warm-up (captures) run; share = stubbed / full, both measured."""
    models = [m for m in (target, draft) if m is not None]

    def graphs_out() -> dict:  # the target's captured steps, taken out of its pool
        return {key: target.cache_pool.pop(key) for key in list(target.cache_pool) if key[0] == "graphs"}

    kept = graphs_out()  # captured before: the stubbed decode must capture its own steps
    full = [_per_iteration(target, draft, prompts, method, tokens, temperature) for _ in range(repeats + 1)]
    decode_graphs = graphs_out()
    with stubbed_forwards(models):
        stub = [_per_iteration(target, draft, prompts, method, tokens, temperature) for _ in range(repeats + 1)]
    graphs_out()  # the stubbed steps' graphs are dropped
    target.cache_pool.update({**decode_graphs, **kept})
    full_s, stub_s = statistics.median(full[1:]), statistics.median(stub[1:])
    return {"seconds_per_iteration": full_s, "outside_seconds_per_iteration": stub_s, "outside_share": stub_s / full_s,
            "graphs": str(target.device).startswith("cuda"), "runs": {"full": full[1:], "stubbed": stub[1:]},
            "how": "measured: decode seconds per iteration (after the prompt's), static KV, CUDA graphs on CUDA; "
                   "the same with every model forward replaced by a stub returning zero logits of its shape; "
                   "share = stubbed / full"}


class _OpClock:
    """Forward hooks that wrap every forward in a torch.profiler range named `forward`."""

    def __init__(self, models):
        from torch.autograd.profiler import record_function

        self.open, self.handles = [], []
        for model in models:
            module = model.model
            self.handles.append(module.register_forward_pre_hook(
                lambda *a: self.open.append(record_function("forward").__enter__())))
            self.handles.append(module.register_forward_hook(
                lambda *a: self.open.pop().__exit__(None, None, None)))

    def remove(self):
        for handle in self.handles:
            handle.remove()


def top_ops(target, draft, prompt, method, max_new_tokens: int, temperature: float, count: int) -> dict:
    """One decode under torch.profiler: the `count` aten ops with the most self CPU time spent
    outside the forwards -> {"iterations", "ops": [{"name", "calls", "self_ms_per_iteration"}]}."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from verispec.empirical import engine

    clock = _OpClock([m for m in (target, draft) if m is not None])
    try:
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            result = engine.decode(target, draft, prompt, method, max_new_tokens, temperature, uniforms=0,
                                   **eager_storage(engine))
    finally:
        clock.remove()
    totals = {}
    for event in prof.events():
        parent, inside = event.cpu_parent, event.name == "forward"
        while parent is not None and not inside:
            inside, parent = parent.name == "forward", parent.cpu_parent
        if not inside:
            calls, self_us = totals.get(event.name, (0, 0.0))
            totals[event.name] = (calls + 1, self_us + event.self_cpu_time_total)
    n = max(result.stats.iterations, 1)
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][1])[:count]
    return {"iterations": result.stats.iterations,
            "ops": [{"name": name, "calls": calls, "self_ms_per_iteration": us / 1e3 / n}
                    for name, (calls, us) in ranked]}


def _tiny_pair(vocab: int = 64):
    import transformers

    from verispec.empirical.model import CausalLM

    config = transformers.Qwen2Config(vocab_size=vocab, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=64, max_position_embeddings=512)
    target = CausalLM.from_config(config, seed=0)
    draft = CausalLM.from_config(config, seed=0)  # the target's weights, nudged: most drafts accepted
    with torch.no_grad():
        generator = torch.Generator().manual_seed(1)
        for parameter in draft.model.parameters():
            parameter.add_(1e-3 * torch.randn(parameter.shape, generator=generator))
    return target, draft


def _param(text: str):
    """"[method:]key=value" -> (method or None, key, int / float / str value)."""
    head, _, value = text.partition("=")
    method, _, key = head.rpartition(":")
    for kind in (int, float):
        try:
            return method or None, key, kind(value)
        except ValueError:
            pass
    return method or None, key, value


def _median_summary(runs: list[dict]) -> dict:
    """Per part, the median over runs of seconds per iteration and of the fraction."""
    keys = ("verifier_overhead_fraction", "non_forward_fraction")
    return {"seconds_per_iteration": {p: statistics.median(r["seconds_per_iteration"][p] for r in runs) for p in PARTS},
            "fraction_of_target_forward": {p: statistics.median(r["fraction_of_target_forward"][p] for r in runs)
                                           for p in PARTS},
            **{k: statistics.median(r[k] for r in runs) for k in keys},
            "iterations": runs[0]["iterations"], "block_efficiency": runs[0]["block_efficiency"]}


def _git_commit(code_dir: str) -> str | None:
    try:
        return subprocess.run(["git", "-C", code_dir, "describe", "--always", "--dirty"], capture_output=True,
                              text=True, check=True).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def _load(args):
    """(target, draft, prompts [1, n] list, dtype reason)."""
    from verispec.empirical.speedups.hardware import resolve_dtype

    dtype, reason = resolve_dtype(args.dtype, args.device)
    if args.tiny:
        target, draft = _tiny_pair(args.vocab)
        base = (torch.arange(1, 48) * 7919) % target.vocab_size
        prompt = torch.cat([base, base[:16]]).unsqueeze(0)  # a repeat: prompt lookup finds matches
        return target, draft, [prompt] * args.prompts, "tiny models"
    from verispec.bench.prompts import humaneval_prompts
    from verispec.bench.weights import load_pair

    if args.kit:  # the pair's architectures, random weights (benchmarks/gpu_replay.py's kit)
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from gpu_replay import random_pair

        pair, note = random_pair(args.kit, args.device, args.target_config)
        reason = f"the kit's architectures, random weights, bf16 (target: {note})"
        with open(os.path.join(args.kit, "prompts.json")) as handle:
            texts = json.load(handle)[:args.prompts]
    else:
        pair = load_pair(dtype=getattr(torch, dtype), device=args.device, progress=False)
        texts = humaneval_prompts(args.prompts)
    prompts = [pair.tokenizer(p["prompt"], return_tensors="pt").input_ids.to(args.device) for p in texts]
    return pair.target, pair.draft, prompts, reason


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", action="append", default=[], help=f"repeatable (default: {DEFAULT_METHODS})")
    parser.add_argument("--param", action="append", default=[],
                        help="[method:]key=value method parameter (repeatable; default draft_length=4)")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=1, help="HumanEval prompts 0..n-1 per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per method (fractions: the median)")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--ops", type=int, default=0, help="list the N costliest ops outside the forwards")
    parser.add_argument("--label", default="", help='e.g. "quiet" or "contended" (recorded)')
    parser.add_argument("--before", help="a JSON of this script (older code) to compare with")
    parser.add_argument("--code", help="import verispec from this checkout instead of this one")
    parser.add_argument("--tiny", action="store_true", help="random tiny models (smoke run)")
    parser.add_argument("--vocab", type=int, default=64, help="vocabulary of the --tiny models")
    parser.add_argument("--kit", help="a benchmarks/gpu_replay.py kit: the pair's architectures with random "
                                      "weights (where the weights cannot travel; the split holds, tau does not)")
    parser.add_argument("--outside", action="store_true",
                        help="also the share of decode time outside the forwards with the bench's setting "
                             "(static KV, CUDA graphs on CUDA): a decode with the forwards stubbed against the "
                             "full one (methods of fixed shapes: target_only, token, block)")
    parser.add_argument("--target-config", help="with --kit: the target from this config.json (gpu_replay.py)")
    parser.add_argument("--output", help="default: benchmarks/results/profile_iteration_<device>.json")
    return parser


def _use_code(code: str | None) -> str:
    """Put the verispec to profile first on sys.path; returns its checkout directory."""
    path = os.path.abspath(code or ROOT)
    if code is not None and not os.path.isdir(os.path.join(path, "verispec")):
        raise SystemExit(f"--code: no verispec package in {path}")
    loaded = sys.modules.get("verispec")
    if loaded is not None and not os.path.abspath(loaded.__file__).startswith(path + os.sep):
        raise SystemExit(f"--code: verispec is already imported from {os.path.dirname(loaded.__file__)}")
    sys.path.insert(0, path)
    return path


def _methods(args) -> list:
    """[(name, TorchMethod)] for the requested methods and their parameters."""
    from verispec.empirical import methods

    names = args.method or list(DEFAULT_METHODS)
    out = []
    for name in names:
        params = dict(DEFAULT_PARAMS.get(name, {}))
        for owner, key, value in map(_param, args.param):
            if owner in (None, name):
                params[key] = value
        out.append((name, methods.get(name, **params)))
    return out


def _compare(after: dict, before: dict) -> dict:
    """Per method in both: verifier overhead and non-forward fractions before / after, and
    whether the generated tokens are the same."""
    out = {}
    for name, run in after.items():
        old = before.get(name)
        if old is None:
            continue
        out[name] = {key: {"before": old["median"][key], "after": run["median"][key]}
                     for key in ("verifier_overhead_fraction", "non_forward_fraction")}
        out[name]["draft_overhead_fraction"] = {
            "before": old["median"]["fraction_of_target_forward"]["draft_overhead"],
            "after": run["median"]["fraction_of_target_forward"]["draft_overhead"]}
        out[name]["same_tokens"] = old["tokens"] == run["tokens"]
    return out


def with_before(out: dict, before: dict) -> dict:
    """Add to `out` (this script's JSON) the summary of an earlier run `before` ("before") and,
    per method in both, the fractions before / after and whether the tokens are the same
    ("change")."""
    out["before"] = {key: before.get(key) for key in ("commit", "code", "label", "load_average_before",
                                                      "load_average_after", "time_utc")}
    out["before"]["methods"] = {name: {"median": run["median"], "tokens": run["tokens"]}
                                for name, run in before["methods"].items()}
    out["change"] = _compare(out["methods"], before["methods"])
    return out


def _print(name: str, method, run: dict) -> None:
    median = run["median"]
    print(f"{name} {method.params}: {median['iterations']} iterations per run, block efficiency "
          f"{median['block_efficiency']:.2f}; median over {len(run['runs'])} runs, per iteration:")
    for part in PARTS:
        print(f"  {part:15} {median['seconds_per_iteration'][part] * 1e3:9.3f} ms  "
              f"{median['fraction_of_target_forward'][part]:7.1%}")
    print(f"  verifier overhead (post-target + verifier): {median['verifier_overhead_fraction']:.1%}; "
          f"everything but forwards: {median['non_forward_fraction']:.1%} of a target forward")
    if "outside_forwards" in run:
        outside = run["outside_forwards"]
        print(f"  bench setting: {outside['seconds_per_iteration'] * 1e3:.3f} ms per iteration, "
              f"{outside['outside_seconds_per_iteration'] * 1e3:.3f} ms with the forwards stubbed: "
              f"{outside['outside_share']:.1%} of decode time outside the forwards")
    for op in run.get("top_ops", {}).get("ops", []):
        print(f"    {op['name']:40} {op['calls']:6d} calls  {op['self_ms_per_iteration']:8.3f} ms/iteration")


def main(argv=None) -> dict:
    args = _parser().parse_args(argv)
    before = None
    if args.before:  # read first: a long run must not fail at its end
        with open(args.before) as handle:
            before = json.load(handle)
    code = _use_code(args.code)
    from verispec.atomic import write_json_atomic
    from verispec.empirical import engine

    if args.threads:
        torch.set_num_threads(args.threads)
    target, draft, prompts, reason = _load(args)
    output = args.output or os.path.join(ROOT, "benchmarks", "results",
                                         f"profile_iteration_{args.device.split(':')[0]}.json")
    load_before, results, todo = os.getloadavg(), {}, _methods(args)
    for name, method in todo:
        engine.decode(target, draft, prompts[0], method, 4, args.temperature, uniforms=0, **eager_storage(engine))
        runs = [profile(target, draft, prompts, method, args.tokens, args.temperature) for _ in range(args.repeats)]
        results[name] = {"params": method.params, "runs": runs, "median": _median_summary(runs),
                         "tokens": runs[0]["tokens"]}
        if args.outside:
            results[name]["outside_forwards"] = outside_share(target, draft, prompts, method, args.tokens,
                                                              args.temperature, args.repeats)
        if args.ops:
            results[name]["top_ops"] = top_ops(target, draft, prompts[0], method, args.tokens, args.temperature,
                                               args.ops)
        _print(name, method, results[name])
        out = _record(args, results, target, reason, load_before, code, complete=len(results) == len(todo))
        if before is not None:
            with_before(out, before)
        write_json_atomic(output, out)  # after every method: a long run interrupted keeps what it measured
    print(f"results: {os.path.normpath(output)}")
    return out


def _record(args, results, target, reason, load_before, code, complete: bool) -> dict:
    from verispec.empirical.speedups.hardware import host_info

    return {"methods": results, "complete": complete, "tokens": args.tokens, "prompts": args.prompts,
            "repeats": args.repeats, "temperature": args.temperature,
            "dtype": str(target.dtype).removeprefix("torch."), "dtype_reason": reason, "device": args.device,
            "threads": torch.get_num_threads(), "machine": platform.machine(), "tiny": args.tiny,
            "vocab_size": target.vocab_size, "label": args.label, "load_average_before": list(load_before),
            "load_average_after": list(os.getloadavg()), "code": code, "commit": _git_commit(code),
            "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **host_info(args.device)}


if __name__ == "__main__":
    main()
