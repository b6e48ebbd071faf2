"""Where one speculative-decoding iteration spends its time, apart from the forwards.

Runs one method on the engine (`verispec.empirical.engine.decode`) with timestamps around every
target and draft forward (forward hooks), the drafter's draft/accept and the verifier, and splits
each iteration into:

    draft forwards | draft overhead (drafting outside the draft forwards)
    pre-target     (tree checks, packing the tree, attention masks)
    target forward
    post-target    (logits back to node layout, float64 probabilities over the vocabulary)
    verifier       (the rule)
    bookkeeping    (KV commit, draft-cache update, emitting tokens, finished rows)

Each part is reported as seconds per iteration and as a fraction of one target forward; the
verifier's overhead is post-target + verifier (the goal: under 5% of a target forward). On CUDA
every timestamp synchronises the device, which serialises the run: the split is honest, the
total is not the bench's. Timings mean something only on a quiet machine.

    python3 benchmarks/profile_iteration.py [--method block] [--param draft_length=4] [--tokens 64]
        [--temperature 0] [--dtype auto] [--device cpu] [--threads 2] [--tiny]

``--tiny`` uses two random 2-layer models (a smoke run, no download). Writes
benchmarks/results/profile_iteration.json (or --output).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from verispec._io import write_json_atomic  # noqa: E402
from verispec.empirical import engine, methods  # noqa: E402

PARTS = ("draft_forwards", "draft_overhead", "pre_target", "target_forward", "post_target", "verifier",
         "bookkeeping")


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


def profile(target, draft, prompt, method, max_new_tokens: int, temperature: float = 0.0, seed: int = 0) -> dict:
    """Decode `prompt` with `method` (a TorchMethod) under the timeline; returns per-part means
    (seconds per iteration), their fractions of one target forward, the verifier's overhead
    fraction ((post_target + verifier) / target_forward) and the iteration count."""
    timeline = Timeline(cuda=str(target.device).startswith("cuda"))
    timed = engine.TorchMethod(method.name, lambda: _TimedDrafter(method.drafter(), timeline),
                               _TimedVerifier(method.verifier, timeline), method.params, method.observe)
    handles = _hook(target, timeline, "targetfw") + (_hook(draft, timeline, "draftfw") if draft is not None else [])
    try:
        result = engine.decode(target, draft, prompt, timed, max_new_tokens, temperature, uniforms=seed,
                               storage="sequence")
        timeline.mark("end")
    finally:
        for handle in handles:
            handle.remove()
    first = next(i for i, (name, _) in enumerate(timeline.events) if name == "draft_start")
    iterations = split_iterations(timeline.events[first:])
    mean = {part: sum(it[part] for it in iterations) / len(iterations) for part in PARTS}
    forward = mean["target_forward"]
    return {"iterations": len(iterations), "block_efficiency": result.stats.block_efficiency,
            "seconds_per_iteration": mean, "fraction_of_target_forward": {p: mean[p] / forward for p in PARTS},
            "verifier_overhead_fraction": (mean["post_target"] + mean["verifier"]) / forward,
            "non_forward_fraction": (sum(mean.values()) - mean["target_forward"] - mean["draft_forwards"]) / forward}


def _tiny_pair():
    import transformers

    from verispec.empirical.model import CausalLM

    config = transformers.Qwen2Config(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=64, max_position_embeddings=256)
    return CausalLM.from_config(config, seed=0), CausalLM.from_config(config, seed=1), None


def _param(text: str):
    key, _, value = text.partition("=")
    try:
        return key, int(value)
    except ValueError:
        try:
            return key, float(value)
        except ValueError:
            return key, value


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="block")
    parser.add_argument("--param", action="append", default=[], help="method parameter key=value (repeatable)")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--tiny", action="store_true", help="random tiny models (smoke run)")
    parser.add_argument("--output",
                        default=os.path.join(os.path.dirname(__file__), "results", "profile_iteration.json"))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from verispec.empirical.hardware import host_info, resolve_dtype

    dtype, reason = resolve_dtype(args.dtype, args.device)
    if args.tiny:
        target, draft, tokenizer = _tiny_pair()
        prompt = torch.arange(1, 40).unsqueeze(0) % target.vocab_size
    else:
        from verispec.empirical.prompts import humaneval_prompts
        from verispec.empirical.weights import load_pair

        pair = load_pair(dtype=getattr(torch, dtype), device=args.device, progress=False)
        target, draft = pair.target, pair.draft
        prompt = pair.tokenizer(humaneval_prompts(1)[0]["prompt"], return_tensors="pt").input_ids.to(args.device)
    method = methods.get(args.method, **dict(_param(p) for p in args.param))
    profile(target, draft, prompt, method, 4, args.temperature)  # warm-up
    out = profile(target, draft, prompt, method, args.tokens, args.temperature)
    out.update(method=args.method, params=method.params, tokens=args.tokens, temperature=args.temperature,
               dtype=str(target.dtype).removeprefix("torch."), dtype_reason=reason if not args.tiny else "tiny models",
               device=args.device, threads=torch.get_num_threads(), machine=platform.machine(), tiny=args.tiny,
               **host_info(args.device))
    print(f"{args.method} {method.params}: {out['iterations']} iterations, seconds per iteration and fraction of "
          "one target forward:")
    for part in PARTS:
        print(f"  {part:15} {out['seconds_per_iteration'][part] * 1e3:9.3f} ms  "
              f"{out['fraction_of_target_forward'][part]:7.1%}")
    print(f"verifier overhead (post-target + verifier): {out['verifier_overhead_fraction']:.1%} of a target forward")
    write_json_atomic(args.output, out)
    print(f"results: {args.output}")
    return out


if __name__ == "__main__":
    main()
