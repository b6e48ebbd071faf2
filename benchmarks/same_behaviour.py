"""Same behaviour before and after a refactor: every bench method's emitted tokens, accepted
lengths and forward counts, recorded on one model pair and compared between two checkouts.

    python3 benchmarks/same_behaviour.py record --pair tiny --output OUT.json
    python3 benchmarks/same_behaviour.py record --pair real --prompts 3 --max-new-tokens 64 --output OUT.json
    python3 benchmarks/same_behaviour.py compare BEFORE.json AFTER.json
    python3 benchmarks/same_behaviour.py alternate --before WORKTREE --after WORKTREE --prompts 3 \
        --max-new-tokens 64 --threads 2 --scratch DIR --output OUT.json

`record` runs `verispec bench`'s own harness (`run_bench`, the public entry of the bench at any
commit since the bench existed), so the same script runs in a worktree of the commit a change
starts from and in the changed checkout. `compare` prints every (method, T, prompt) whose tokens,
accepted-length sum and count, iteration count or target / draft forward counts differ, and exits
1 if any does. Timings are recorded but not compared there; `alternate` compares them: it records
prompt by prompt, the BEFORE checkout then the AFTER one (a quiet machine, one process per side and
prompt), and writes the behaviour comparison with every method's decode tokens/s ratio.

The tiny pair is the test suite's: two 2-layer Qwen2 models with seeded random weights (vocab 64),
float32 on CPU, tokens = bytes mod 64.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile

#: The methods compared: every name `verispec bench --methods` takes (default parameters), plus
#: the option keys that change the decode path (int8 draft, draft vocabulary, row layouts, guesses).
METHODS = ("target_only", "hf", "hf_prompt_lookup", "ouroboros", "ouroboros_phrase", "lookahead", "prompt_lookup",
           "adaptive", "hybrid", "token", "block", "gbv:K=2", "nss:K=2", "rrs:K=2", "rrsw:K=2", "spectr:K=2",
           "traversal:K=2,L=2", "opt_tree:n=12", "kary:n=12", "eagle:n=12", "chain_tree:n=8", "khisti:K=2,L=2",
           "optimal_is:K=2,L=2", "spechub:L=2", "adaptive:L=4,M=8,g=4", "hybrid:L=4,M=8,dv=32",
           "block:dq=8", "block:lin=wxpad", "gbv:K=2,dv=32", "adaptive:L=3,M=6,c=50,dq=8,lin=wxpad")
#: On the real pair (V = 151,936) the IS selection rules solve their LP over s = 5 tokens.
REAL_METHODS = tuple(m.replace("K=2,L=2", "K=2,L=2,s=5") if m.startswith(("khisti", "optimal_is")) else m
                     for m in METHODS)
COMPARED = ("tokens", "accepted_sum", "accepted_count", "iterations", "target_forwards", "draft_forwards")


def _bench():
    for name in ("verispec.bench", "verispec.empirical.bench"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise SystemExit("no verispec bench module found")


def _tiny_pair():
    import types

    import torch
    import transformers

    from verispec.empirical.model import CausalLM

    def tiny(seed, noise):
        config = transformers.Qwen2Config(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                          num_key_value_heads=2, intermediate_size=64, max_position_embeddings=256,
                                          tie_word_embeddings=False)
        model = CausalLM.from_config(config, seed=seed, dtype=torch.float32, attn_implementation="sdpa")
        g = torch.Generator().manual_seed(seed + 1000)
        with torch.no_grad():
            for parameter in model.model.parameters():
                if noise:
                    parameter.add_(noise * parameter.std() * torch.randn(parameter.shape, generator=g))
            model.model.get_output_embeddings().weight.mul_(4.0)
        return model

    class Bytes:
        vocab_size = 64

        def __call__(self, text, return_tensors="pt"):
            ids = torch.tensor([[b % 64 for b in text.encode()]], dtype=torch.long)
            return types.SimpleNamespace(input_ids=ids)

    return types.SimpleNamespace(target=tiny(0, 0.0), draft=tiny(0, 0.1), tokenizer=Bytes())


TINY_PROMPTS = [{"task_id": "t/0", "prompt": "def f(x):\n    return x + f(x - 1)"},
                {"task_id": "t/1", "prompt": "abcabcabcab"}]


def record(args) -> None:
    bench = _bench()
    config = bench.BenchConfig(prompts=args.prompts, first_prompt=args.first_prompt,
                               max_new_tokens=args.max_new_tokens, methods=tuple(args.methods),
                               temperatures=tuple(args.temperatures), draft_length=3, num_paths=2,
                               dtype="float32" if args.pair == "tiny" else "auto", threads=args.threads)
    pair, prompts = (_tiny_pair(), TINY_PROMPTS[:args.prompts]) if args.pair == "tiny" else (None, None)
    if args.pair == "tiny":
        with tempfile.TemporaryDirectory() as tmp:
            results = bench.run_bench(config, os.path.join(tmp, "run.json"), fresh=True, pair=pair, prompts=prompts,
                                      plot=False)
    else:  # the bench's own file beside the output: an interrupted run resumes
        results = bench.run_bench(config, args.output + ".bench.json", pair=pair, prompts=prompts, plot=False)
    keep = {key: {field: value[field] for field in COMPARED + ("decode_s", "wall_s")}
            for key, value in results["records"].items()}
    out = {"pair": args.pair, "methods": list(args.methods), "prompts": args.prompts, "first_prompt": args.first_prompt,
           "commit": _commit(os.path.dirname(bench.__file__)), "environment": results.get("environment", {}),
           "max_new_tokens": args.max_new_tokens, "records": keep}
    _write(args.output, out)
    print(f"{len(keep)} records -> {args.output}")


def _write(path: str, data: dict) -> None:
    """Write JSON atomically (a temporary file, then rename), so a killed run leaves no half file.
    Not `verispec.atomic.write_json_atomic`: `record` also runs with an older checkout on
    PYTHONPATH (the commit a change starts from), which may predate that module."""
    with open(path + ".tmp", "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)


def _commit(where: str) -> str:
    """HEAD of the checkout holding `where` (the imported bench, so the code that recorded), or ""
    outside git."""
    import subprocess

    done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=where)
    return done.stdout.strip()


def differences(before: dict, after: dict) -> list[str]:
    """Human-readable lines, one per record whose compared fields differ (or that one side lacks)."""
    lines = []
    for key in sorted(set(before["records"]) | set(after["records"])):
        a, b = before["records"].get(key), after["records"].get(key)
        if a is None or b is None:
            lines.append(f"{key}: only {'after' if a is None else 'before'}")
            continue
        for field in COMPARED:
            if a[field] != b[field]:
                lines.append(f"{key}: {field} {a[field]!r} != {b[field]!r}")
    return lines


def compare(args) -> int:
    with open(args.before) as f:
        before = json.load(f)
    with open(args.after) as f:
        after = json.load(f)
    lines = differences(before, after)
    print("\n".join(lines) if lines else f"same behaviour: {len(before['records'])} records, fields {', '.join(COMPARED)}")
    if args.output:
        summary = {"before_commit": before.get("commit", ""), "after_commit": after.get("commit", ""),
                   "pair": before["pair"], "compared": list(COMPARED), "records": len(before["records"]),
                   "differences": lines, "same": not lines, "before": before, "after": after}
        with open(args.output, "w") as f:
            json.dump(summary, f, indent=1, sort_keys=True)
    return 1 if lines else 0


def _record_one(args, root: str, prompt: int, out: str, methods) -> None:
    """One `record` process for one prompt with `root`'s verispec first on PYTHONPATH; its log
    goes to OUT.log (a failure names it)."""
    import subprocess

    with open(out + ".log", "w") as log:
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "record", "--pair", "real",
                               "--first-prompt", str(prompt), "--prompts", "1", "--threads", str(args.threads),
                               "--max-new-tokens", str(args.max_new_tokens), "--output", out,
                               "--temperatures", *map(str, args.temperatures), "--methods", *methods], env={**os.environ, "PYTHONPATH": root},
                              stdout=log, stderr=subprocess.STDOUT)
    if done.returncode:
        raise SystemExit(f"record failed for {root} prompt {prompt}: see {out}.log")


def _aliases(pairs) -> dict:
    """--after-alias NAME=SPEC pairs -> {NAME: SPEC}: the AFTER side runs SPEC where the BEFORE
    side runs NAME (a default that changed on purpose, spelled out so the code path compares).
    A NAME with keys of its own is written NAME=>SPEC (`opt_tree:n=12=>opt_tree:n=12,pol=fixed`):
    NAME=SPEC splits at the first "=", which falls inside such a NAME."""
    aliases = {}
    for pair in pairs or ():
        name, sep, spec = pair.partition("=>") if "=>" in pair else pair.partition("=")
        if not sep or not name or not spec:
            raise SystemExit(f"--after-alias: expected NAME=SPEC, got {pair!r}")
        aliases[name] = spec
    return aliases


def _renamed(records: dict, aliases: dict) -> dict:
    """Record keys SPEC|T|prompt of the AFTER side back to NAME|T|prompt."""
    back = {spec: name for name, spec in aliases.items()}
    out = {}
    for key, value in records.items():
        label, sep, rest = key.partition("|")
        out[back.get(label, label) + sep + rest] = value
    return out


def alternate(args) -> int:
    """Quiet timing: for each prompt, `record` it with the BEFORE checkout on PYTHONPATH, then with
    the AFTER one (one process each, so the two codes never share a process), and report every
    method's decode tokens/s ratio after / before, with the behaviour compared as `compare` does.
    This script runs in both processes (the BEFORE commit may predate it); a per-prompt file already
    in --scratch is kept, so an interrupted run resumes."""
    aliases = _aliases(args.after_alias)
    sides = (("before", args.before, list(args.methods)),
             ("after", args.after, [aliases.get(m, m) for m in args.methods]))
    runs = {"before": {"records": {}}, "after": {"records": {}}}
    for i in range(args.first_prompt, args.first_prompt + args.prompts):
        for side, root, methods in sides:
            out = os.path.join(args.scratch, f"{side}_{i}.json")
            if os.path.exists(out):
                print(f"{side} prompt {i}: kept {out}", flush=True)
            else:
                _record_one(args, root, i, out, methods)
                print(f"{side} prompt {i}: recorded {out}", flush=True)
            with open(out) as f:
                part = json.load(f)
            runs[side]["records"].update(_renamed(part["records"], aliases) if side == "after" else part["records"])
            runs[side].update({k: part[k] for k in ("pair", "commit", "environment")})
    rates = {}
    for key, b in runs["before"]["records"].items():
        a = runs["after"]["records"][key]
        label = key.rsplit("|", 1)[0]
        rates.setdefault(label, []).append((len(b["tokens"]) / b["decode_s"], len(a["tokens"]) / a["decode_s"]))
    ratios = {label: sum(x[1] for x in v) / sum(x[0] for x in v) for label, v in rates.items()}
    per_prompt = {label: [x[1] / x[0] for x in v] for label, v in rates.items()}
    lines = differences(runs["before"], runs["after"])
    summary = {"before_commit": runs["before"]["commit"], "after_commit": runs["after"]["commit"],
               "environment": runs["after"]["environment"], "threads": args.threads,
               "max_new_tokens": args.max_new_tokens, "temperatures": list(args.temperatures), "methods": list(args.methods), "after_aliases": aliases,
               "decode_tokens_per_s_ratio_after_over_before": ratios,
               "per_prompt_ratio_after_over_before": per_prompt,
               "within_10_percent": sorted(k for k, r in ratios.items() if abs(r - 1) <= 0.10),
               "outside_10_percent": sorted(k for k, r in ratios.items() if abs(r - 1) > 0.10),
               "ratio_is": "derived: (sum over prompts of decode tokens/s after) / (the same sum before), per method|T",
               "differences": lines, "same": not lines, "before": runs["before"], "after": runs["after"]}
    _write(args.output, summary)
    for label, r in sorted(ratios.items()):
        print(f"{label:45s} after/before decode tok/s {r:.3f}")
    print("same behaviour" if not lines else "\n".join(lines))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--pair", choices=("tiny", "real"), default="tiny")
    rec.add_argument("--prompts", type=int, default=2)
    rec.add_argument("--first-prompt", type=int, default=0, help="HumanEval prompts skipped first (real pair)")
    rec.add_argument("--max-new-tokens", type=int, default=12)
    rec.add_argument("--threads", type=int, default=1)
    rec.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 1.0])
    rec.add_argument("--methods", nargs="+", default=None, help="default: METHODS (tiny), REAL_METHODS (real)")
    rec.add_argument("--output", required=True)
    cmp = sub.add_parser("compare")
    cmp.add_argument("before")
    cmp.add_argument("after")
    cmp.add_argument("--output", help="also write both record sets and the differences as one JSON")
    alt = sub.add_parser("alternate")
    alt.add_argument("--before", required=True, help="checkout of the commit before")
    alt.add_argument("--after", required=True, help="checkout of the commit after")
    alt.add_argument("--prompts", type=int, default=3)
    alt.add_argument("--first-prompt", type=int, default=0)
    alt.add_argument("--max-new-tokens", type=int, default=64)
    alt.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 1.0])
    alt.add_argument("--threads", type=int, default=2)
    alt.add_argument("--methods", nargs="+", default=list(REAL_METHODS))
    alt.add_argument("--after-alias", action="append", metavar="NAME=SPEC|NAME=>SPEC",
                     help="the AFTER side runs SPEC for NAME (a default changed on purpose), e.g. "
                          "ouroboros_phrase=ouroboros_phrase:G=8,n=4")
    alt.add_argument("--scratch", default=tempfile.gettempdir())
    alt.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    if args.command == "alternate":
        return alternate(args)
    if args.command == "record":
        args.methods = args.methods or list(METHODS if args.pair == "tiny" else REAL_METHODS)
        record(args)
        return 0
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
