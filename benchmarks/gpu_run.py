"""The engine's GPU run in one command: the real pair's recorded T = 0 decisions replayed with
CUDA graphs on and off, on the pair's own 1.5B target and on a 7B-configuration target, and the share
of decode time outside the forwards. Every figure is projected (random weights, recorded decisions:
`benchmarks/gpu_replay.py`).

Targets: the kit's recorded 1.5B ("kit"), and each `--target-config` (e.g. Qwen2.5-7B-Instruct's
config.json with the draft's vocabulary: "7b"), each with its own 0.5B draft, built once and kept.
Parts, in this order (`plan`), so that a run cut short has the issue's bars first:
1. the kit "graphs" (target-only, block, token, transformers' assisted generation `hf`;
   HumanEval/0-2, 128 tokens, L = 4) replayed with the engine's captured steps, on every target;
2. `profile_iteration.outside_share` for target-only and block on every target: decode seconds per
   iteration with the bench's setting, and with every forward stubbed, whose ratio is the share of
   decode time outside the forwards;
3. "graphs" eagerly (`--no-graphs`); then "trees" (target-only, OPT-Tree at n = 50) with graphs on
   and off;
4. both models' forward costs.
Each replay checks every record token-identical to the recorded run and in step with its forwards
(a record out of step is listed in its "projection", the others kept).

Files (rewritten after every part, so a run cut short leaves what it measured):
``gpu_run_<target>_<device>.json`` per target (every replay's bench results, the profiles, the
forward costs, each part's seconds) and ``gpu_run_summary_<device>.json`` (decode tokens/s per
replay, the acceptance ratios of the issue, each derived from the measured decode tokens/s of one
replay: block / target-only, block / hf; the outside shares; what `--budget-s` skipped).

    python3 benchmarks/gpu_run.py --out OUT [--device cuda] [--kit-root .replay]
        [--target-config benchmarks/configs/qwen2.5-7b-instruct.json] [--budget-s S] [--tiny]

`--tiny` shrinks every architecture (2-3 layers, hidden 64; the vocabulary, hence every forward's
shape, stays): a dry run of the whole command on a CPU. `--make-tiny-kit` first records the kits
on tiny random models with a byte-level tokenizer (HumanEval/0-2, as the presets): the whole path,
recording included, with no model weights at all.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_replay  # noqa: E402
import profile_iteration  # noqa: E402

from verispec.atomic import write_json_atomic  # noqa: E402
from verispec.bench.records import RecordKey  # noqa: E402
from verispec.empirical import methods  # noqa: E402
from verispec.empirical.speedups.hardware import host_info  # noqa: E402
from verispec.reference import registry  # noqa: E402

#: The kits replayed (KIT_ROOT/<preset>): the chains and the peers; OPT-Tree (a top-k trace).
PRESETS = ("graphs", "trees")
#: The methods whose share of decode time outside the forwards is measured (fixed-shape iterations).
PROFILED = ("target_only", "block")
#: The issue's GPU acceptance: (name, numerator, denominator, target, at least).
ACCEPTANCE = (("block_vs_target_only_7b", "block", "target_only", "7b", 2.0),
              ("block_vs_target_only_1.5b", "block", "target_only", "kit", 1.1),
              ("block_vs_hf_7b", "block", "hf", "7b", 1.2),
              ("block_vs_hf_1.5b", "block", "hf", "kit", 1.2))


def make_tiny_kit(kit_root: str) -> None:
    """Record the presets on two tiny random Qwen2 models (vocabulary 256, a byte-level tokenizer)
    into KIT_ROOT/<preset>: `gpu_replay.record_run` + `save_kit`, as `gpu_replay.py record` does."""
    import types

    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from verispec.bench.prompts import humaneval_prompts
    from verispec.empirical.model import CausalLM

    sources = {role: os.path.join(kit_root, "sources", role) for role in gpu_replay.ROLES}
    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok)
    tokenizer.save_pretrained(sources["target"])
    lms = []
    for seed, role in enumerate(gpu_replay.ROLES):
        config = transformers.Qwen2Config(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                          num_key_value_heads=2, intermediate_size=128, tie_word_embeddings=False)
        lms.append(CausalLM.from_config(config, seed=seed, dtype=torch.bfloat16))
        lms[-1].model.config.save_pretrained(sources[role])
        lms[-1].model.generation_config.save_pretrained(sources[role])
    pair, prompts = types.SimpleNamespace(target=lms[0], draft=lms[1], tokenizer=tokenizer), humaneval_prompts(3)
    for preset in PRESETS:
        kit = os.path.join(kit_root, preset)
        os.makedirs(kit, exist_ok=True)
        _, trace = gpu_replay.record_run(preset, gpu_replay.PRESETS[preset], pair, prompts,
                                         os.path.join(kit, "recorded.json"))
        gpu_replay.save_kit(kit, trace, prompts, sources)


def shrink(config, role: str):
    """A dry-run architecture: 2 layers (3 for a target from another config), hidden 64, the
    vocabulary kept."""
    config.hidden_size, config.intermediate_size = 64, 128
    config.num_attention_heads, config.num_key_value_heads = 4, 2
    config.num_hidden_layers = 2 if role == "draft" else 3
    config.head_dim = 16
    config.layer_types = ["full_attention"] * config.num_hidden_layers
    return config


def _prompts(pair, prompts: list, count: int) -> list:
    """The first `count` of a kit's prompts (as `gpu_replay.load_kit` returns them), tokenized:
    int64 [1, n] each on the pair's device."""
    return [pair.tokenizer(p["prompt"], return_tensors="pt").input_ids.to(pair.target.device) for p in prompts[:count]]


def plan(targets, presets) -> list:
    """The run's parts in the order that keeps the issue's bars first, should the device's time run
    out: the first preset with graphs on for every target, the iteration profiles, the first preset
    eagerly, every other preset on and off, then the forward costs. [(part, target)], a part being
    "<preset>_graphs", "<preset>_eager", "profile" or "costs"."""
    first, rest = presets[0], presets[1:]
    parts = [(f"{first}_graphs", t) for t in targets] + [("profile", t) for t in targets]
    parts += [(f"{first}_eager", t) for t in targets]
    parts += [(f"{p}_{mode}", t) for p in rest for mode in ("graphs", "eager") for t in targets]
    return parts + [("costs", t) for t in targets]


def rates(results: dict) -> dict:
    """{method label: decode tokens/s} of a bench file's T = 0 summary."""
    return {row["runner"]: row["tokens_per_s"] for row in results["summary"] if row["temperature"] == 0.0}


def profile_target(pair, prompts: list, args) -> dict:
    """`profile_iteration.outside_share` of each `PROFILED` method on the pair (random weights), on
    the first `args.profile_prompts` of a kit's `prompts`."""
    prompts = _prompts(pair, prompts, args.profile_prompts)
    out = {}
    for name in PROFILED:
        needs_draft = registry.spec(name).needs_draft
        method = methods.get(name, **({"draft_length": 4} if needs_draft else {}))
        draft = pair.draft if needs_draft else None
        out[name] = profile_iteration.outside_share(pair.target, draft, prompts, method, args.profile_tokens, 0.0,
                                                    args.repeats)
        print(f"{name}: {out[name]['outside_share']:.1%} of decode time outside the forwards "
              f"({out[name]['seconds_per_iteration'] * 1e3:.2f} ms per iteration)", flush=True)
    return out


class Run:
    """The run's state: the targets' pairs (built on first use, all kept: a 7B configuration, the
    1.5B and two 0.5B drafts take about 20 GB in bf16), the kits (loaded once), and one record per
    target written after every part (`gpu_run_<target>_<device>.json`), with the summary."""

    def __init__(self, args, targets: dict):
        self.args, self.paths, self.pairs, self.kits = args, targets, {}, {}
        self.scratch = tempfile.mkdtemp(prefix="gpu_run_")  # the benches' own files (resume files)
        self.records = {label: {"target": None, "replays": {}, "parts_s": {}} for label in targets}
        self.start, self.skipped = time.perf_counter(), []

    def pair(self, label: str):
        if label not in self.pairs:
            start = time.perf_counter()
            kit = os.path.join(self.args.kit_root, self.args.presets[0])
            self.pairs[label] = gpu_replay.random_pair(kit, self.args.device, self.paths[label],
                                                       shrink if self.args.tiny else None)
            self.records[label].update(target=self.pairs[label][1], build_s=time.perf_counter() - start)
        return self.pairs[label]

    def kit(self, preset: str) -> tuple:
        if preset not in self.kits:
            self.kits[preset] = gpu_replay.load_kit(os.path.join(self.args.kit_root, preset))
        return self.kits[preset]

    def part(self, part: str, label: str) -> None:
        """Run one part on one target and write the files."""
        if self.args.budget_s and time.perf_counter() - self.start > self.args.budget_s:
            self.skipped.append(f"{part} {label}")
            return
        pair, note = self.pair(label)
        start, record = time.perf_counter(), self.records[label]
        if part == "profile":
            # the first preset's kit is loaded (and cached) by its replays, which the plan puts first
            record["outside_forwards"] = profile_target(pair, self.kit(self.args.presets[0])[1], self.args)
        elif part == "costs":
            record["forward_costs_s"] = gpu_replay.forward_costs(pair, str(pair.target.device))
        else:
            preset, mode = part.rsplit("_", 1)
            output = os.path.join(self.scratch, f"{preset}_{label}_{mode}.json")
            record["replays"][part] = gpu_replay.replay_one(pair, note, preset, self.kit(preset), mode == "graphs",
                                                           output, strict=False)
        record["parts_s"][part] = time.perf_counter() - start
        self.write()

    def write(self) -> dict:
        """Every target's file and the summary (derived from what ran so far)."""
        slug = gpu_replay.device_slug(self.args.device)
        for label, record in self.records.items():
            write_json_atomic(os.path.join(self.args.out, f"gpu_run_{label}_{slug}.json"), record)
        summary = {"what": "projected: random weights replaying the real pair's recorded T = 0 decisions "
                           "(benchmarks/gpu_replay.py); ratios derived from measured decode tokens/s",
                   "device_name": _device_name(self.args.device), "tiny": self.args.tiny,
                   "targets": {label: digest(record) for label, record in self.records.items()},
                   "acceptance": acceptance(self.records, self.args.presets[0]), "skipped_for_time": self.skipped,
                   "seconds": time.perf_counter() - self.start, "argv": sys.argv[1:],
                   "environment": {"torch": torch.__version__, **host_info(self.args.device)}}
        write_json_atomic(os.path.join(self.args.out, f"gpu_run_summary_{slug}.json"), summary)
        return summary


def digest(record: dict) -> dict:
    """A target's figures for the summary: decode tokens/s per replay, records out of step, steps
    captured and replayed, the outside shares, the forward costs and each part's seconds."""
    replays = record["replays"]
    return {"target": record["target"], "build_s": record.get("build_s"), "parts_s": record["parts_s"],
            "decode_tokens_per_s": {part: rates(r) for part, r in replays.items()},
            "out_of_step": {part: r["projection"]["out_of_step"] for part, r in replays.items()},
            "captured": {part: {key: [r.get("captured_steps", 0), r.get("replayed_steps", 0)]
                                for key, r in results["records"].items()}
                         for part, results in replays.items() if part.endswith("_graphs")},
            "outside_forwards": record.get("outside_forwards", {}), "forward_costs_s": record.get("forward_costs_s")}


def acceptance(records: dict, preset: str) -> list:
    """The issue's GPU ratios (derived: decode tokens/s of two methods in one file, `preset`'s replay
    with graphs on: the first preset requested) and the outside shares (measured), each against its
    bound; a ratio whose file did not run is absent."""
    rows = []
    for name, top, bottom, which, bound in ACCEPTANCE:
        results = records.get(which, {}).get("replays", {}).get(f"{preset}_graphs")
        if results is None:
            continue
        speeds, off = rates(results), results["projection"]["out_of_step"]
        if top in speeds and bottom in speeds:
            ratio = speeds[top] / speeds[bottom]
            stray = [key for key in off if RecordKey.parse(key).label in (top, bottom)]  # records not replayed in step
            rows.append({"name": name, "value": ratio, "at_least": bound, "met": ratio >= bound and not stray,
                         "records_out_of_step": stray,
                         "is": f"derived: decode tokens/s {top} / {bottom}, graphs on, one file"})
    for which, record in records.items():
        for method, share in record.get("outside_forwards", {}).items():
            rows.append({"name": f"outside_forwards_{method}_{which}", "value": share["outside_share"],
                         "at_most": 0.10, "met": share["outside_share"] <= 0.10, "is": share["how"]})
    return rows


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for every file (the device's $OUT)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--kit-root", default=".replay", help="the kits are KIT_ROOT/<preset> (gpu_replay.py record)")
    parser.add_argument("--target-config", action="append", default=[],
                        help="another target's config.json (repeatable), e.g. benchmarks/configs/qwen2.5-7b-instruct.json")
    parser.add_argument("--presets", default=",".join(PRESETS), type=lambda text: tuple(text.split(",")),
                        help=f"kits to replay, the first one's bars first (default {','.join(PRESETS)})")
    parser.add_argument("--profile-tokens", type=int, default=64)
    parser.add_argument("--profile-prompts", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=0.0,
                        help="start no part after this many seconds (0: no limit); the files say what was skipped")
    parser.add_argument("--tiny", action="store_true", help="shrunk architectures: a dry run on a CPU")
    parser.add_argument("--make-tiny-kit", action="store_true",
                        help="first record a kit on tiny random models into --kit-root (no weights needed)")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    if args.make_tiny_kit:
        make_tiny_kit(args.kit_root)
    targets = {"kit": None}
    for path in args.target_config:
        targets["7b" if "7b" in os.path.basename(path).lower() else os.path.splitext(os.path.basename(path))[0]] = path
    run = Run(args, targets)
    for part, label in plan(list(targets), args.presets):
        run.part(part, label)
    summary = run.write()
    for row in summary["acceptance"]:
        bound = f">= {row['at_least']}" if "at_least" in row else f"<= {row['at_most']}"
        print(f"{row['name']:40s} {row['value']:.3f} ({bound}: {'met' if row['met'] else 'NOT met'})")
    print(f"total {summary['seconds']:.0f} s; skipped for time: {summary['skipped_for_time'] or 'none'}")
    return summary


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name(torch.device(device)) if str(device).startswith("cuda") else "cpu"


if __name__ == "__main__":
    main()
