"""How fast could ANY chain drafter be at T = 0 with this draft? An oracle bound, measured.

At T = 0 a lossless decoder emits target-only's greedy tokens y_1..y_N whatever its draft lengths,
and the draft model's greedy chain from a prefix is deterministic. So one table fixes every chain
decode: for each start i (tokens emitted so far), the draft's greedy chain d_1..d_M from the prefix
(prompt, y_1..y_i) with the draft's probability of each of its tokens (its confidence, the softmax
at temperature 1, as transformers' assistant and verispec's chains read it), and a(i), how many of
d_1.. equal y_{i+1}... From the table this script

- replays a confidence stop (draft until a token of confidence < c, that token kept, at most L
  tokens, cut to the tokens still needed: transformers' assisted generation with
  `assistant_confidence_threshold=c`, `num_assistant_tokens=L` under the constant schedule, and
  verispec's `adaptive:L=..,sched=constant,c=..,pol=fixed`), counting its target forwards (one per
  iteration) and drafted tokens (one draft forward each). transformers' threshold stays fixed only
  without scikit-learn; with it, the threshold adapts online and the peer is not replayed;
- replays a grid of verispec's fixed stops (`GRID_LENGTHS` x `GRID_THRESHOLDS`) and names the
  best one on these prompts (in hindsight: the grid is chosen knowing them);
- solves for the ORACLE schedule: the draft lengths k_i <= a(i) (an oracle knows where each chain
  will be rejected) minimising priced seconds, by dynamic programming over i:
  f(i) = min_k [C_t + k C_d + f(i + k + 1)], f(N) = 0.

Prices, measured in this run on this host (median of the timed forwards): C_t, a target forward
with `--verify-rows` rows at the prompt's cache length (`verispec.bench.costs.time_appends`, as the
cost policy's model is measured); C_d, a 1-row draft forward while building the table. Priced
seconds = target forwards x C_t + draft forwards x C_d (derived). Time outside the forwards
(verification, sampling, Python) is left out on both sides.

What it bounds: no chain drafter that drafts the draft model's greedy tokens can beat the oracle's
priced seconds (drafting past a(i) only adds draft forwards; stopping earlier is one of the
oracle's choices), so priced(peer's rule) / priced(oracle) is the largest decode speedup over the
peer any such chain drafter could reach at T = 0 at these prices (derived). Trees (several
candidates per depth) and other drafts are outside the bound. Caveat: the table's draft forwards
feed one token each; a real chain's first forward of an iteration also feeds the pending tokens,
and with an int8 draft (one activation scale per forward) that can move a near-tie's argmax.
`--bench` compares the replayed counts with a bench JSON's measured ones, so the replay's fidelity
is measured, not assumed. The file is written atomically after each prompt; a second run with the
same settings resumes it (its prompts are kept), `--fresh` replaces it.

    python3 benchmarks/chain_oracle.py --first-prompt 110 --prompts 5 --max-new-tokens 64 \\
        --draft-quant 8 --draft-vocab 32768 --bench benchmarks/results/policy_eval_110_cpu.json \\
        --output benchmarks/results/chain_oracle_110_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from typing import NamedTuple

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from verispec.atomic import resume_json, write_json_atomic  # noqa: E402
from verispec.bench.dispatch import run_method  # noqa: E402
from verispec.bench.drafts import QuantizedDrafts  # noqa: E402
from verispec.bench.records import RecordKey  # noqa: E402
from verispec.bench.costs import time_appends  # noqa: E402
from verispec.bench.run import BenchConfig, prepare  # noqa: E402
from verispec.bench.spec import draft_vocabulary, parse_method  # noqa: E402
from verispec.empirical.drafters import probabilities  # noqa: E402
from verispec.empirical.kv import new_kv  # noqa: E402
from verispec.empirical.speedups.hardware import host_info  # noqa: E402


class Stop(NamedTuple):
    """A confidence stop as one decoder runs it: at most `length` tokens, stop after a token of
    confidence < `threshold`; `floor`: the fewest tokens drafted when fewer are still needed (0:
    transformers' assistant; 1: verispec's chains, `AdaptiveChainDrafter._in_budget`);
    `prefill`: draft forwards of its own that read the prompt (verispec's engine: 1, all prompt
    tokens but the last, `PathsDrafter.start`; transformers: 0, its first drafting forward reads it)."""

    label: str
    length: int
    threshold: float
    floor: int
    prefill: int


#: The peer's settings the summary compares with: the best constant one in the bench files, and
#: transformers' defaults (20 tokens, confidence 0.4, the constant schedule, transformers 5.24).
PEER = Stop("hf:L=8,sched=constant", 8, 0.4, 0, 0)
PEER_DEFAULTS = Stop("hf", 20, 0.4, 0, 0)
#: The grid of verispec's fixed confidence stops replayed (`adaptive:L=..,sched=constant,c=..,pol=fixed`).
GRID_LENGTHS = (4, 6, 8, 10, 12, 16, 20, 24)
GRID_THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)


def verispec_stop(length: int, threshold: float) -> Stop:
    """verispec's fixed confidence stop under the constant schedule, labelled as the bench's method."""
    return Stop(f"adaptive:L={length},sched=constant,c={round(100 * threshold)},pol=fixed", length, threshold, 1, 1)


def stop_of(label: str, adaptive_threshold: bool = False) -> Stop | None:
    """The `Stop` a bench runner label runs at T = 0, or None for one this replay cannot model (a
    cost policy, the heuristic schedule, trees, multi-path rules, phrase drafts, and transformers'
    assistant when its threshold adapts online: `adaptive_threshold`, scikit-learn installed)."""
    spec = parse_method(label, 4, 1)
    params = dict(spec.params)
    if spec.name == "hf" and params.get("schedule", "constant") == "constant" and not adaptive_threshold:
        c = params.get("confidence")  # the peer's own key (`PEER_PARAMS`)
        return Stop(label, params.get("num_assistant_tokens", 20), 0.4 if c is None else c, 0, 0)
    if spec.name == "adaptive" and params.get("policy") == "fixed" and params.get("schedule") == "constant" \
            and not params.get("guess_length"):
        return Stop(label, params.get("draft_length", 4), params.get("confidence_threshold", 0.4), 1, 1)
    return None


def replay(confidences, matched, total: int, stop: Stop):
    """`replay_stop` of a `Stop` -> (target forwards, draft forwards with its prefill ones)."""
    targets, drafts, _ = replay_stop(confidences, matched, total, stop.length, stop.threshold, stop.floor)
    return targets, drafts + stop.prefill


def replay_stop(confidences, matched, total: int, length: int, threshold: float, floor: int = 0):
    """Replay a confidence stop over a chain table -> (target forwards, draft forwards, lengths).

    Args:
        confidences: per start i in 0..total-1, the confidences of its chain's tokens; a chain
            may end early at a token below every threshold replayed (`chain_table`), where any
            such rule stops. matched: per start i, a(i) = how many leading chain tokens equal the
            greedy continuation. total: N, tokens to emit. length: the cap L >= 1. threshold: c.
        floor: the fewest tokens an iteration drafts when fewer are still needed: 0 for
            transformers' assistant, 1 for verispec's chains (`AdaptiveChainDrafter._in_budget`).

    Each iteration from start i drafts k = min(L, max(N - i - 1, floor), first j with
    confidence_j < c) tokens, accepts min(k, a(i)) and emits one more (correction or bonus).

    Raises:
        ValueError: a chain that ends above the threshold before the cap (the table is too short
            for this rule).
    """
    i, targets, drafts, lengths = 0, 0, 0, []
    while i < total:
        cap, chain = min(length, max(total - i - 1, floor)), confidences[i]
        k = next((j + 1 for j in range(min(cap, len(chain))) if chain[j] < threshold), cap)
        if k > len(chain):
            raise ValueError(f"confidences: start {i}'s chain has {len(chain)} tokens, the rule "
                             f"(L = {length}, c = {threshold}) needs {k}")
        targets, drafts = targets + 1, drafts + k
        lengths.append(k)
        i += min(k, matched[i]) + 1
    return targets, drafts, lengths


def oracle_schedule(matched, total: int, target_s: float, draft_s: float, longest: int):
    """The draft lengths minimising priced seconds when each start's accepted run a(i) is known.

    Args:
        matched: a(i) per start i in 0..total-1. total: N. target_s, draft_s: prices C_t, C_d > 0.
        longest: the most tokens one chain may draft (the table's M).

    Returns:
        (priced seconds, target forwards, draft forwards, lengths): f(0) of
        f(i) = min_{0 <= k <= min(a(i), longest, N - i - 1)} C_t + k C_d + f(i + k + 1), f(N) = 0,
        and the minimising schedule (ties: the longer k).
    """
    best = [(0.0, 0, 0, None)] * (total + 1)  # (seconds, targets, drafts, k at i)
    for i in range(total - 1, -1, -1):
        top = min(matched[i], longest, total - i - 1)
        options = []
        for k in range(top, -1, -1):
            s, t, d, _ = best[i + k + 1]
            options.append((target_s + k * draft_s + s, t + 1, d + k, k))
        best[i] = min(options, key=lambda o: o[0])
    i, lengths = 0, []
    while i < total:
        lengths.append(best[i][3])
        i += best[i][3] + 1
    return best[0][0], best[0][1], best[0][2], lengths


def chain_table(draft, prompt: torch.Tensor, greedy: torch.Tensor, longest: int, stop_below: float):
    """Per start i in 0..N-1: the confidences of the draft's greedy chain from (prompt, y_1..y_i)
    and a(i); plus the seconds of every 1-row draft forward (for C_d).

    Chains from different starts share their tokens while they follow the greedy continuation, so
    one teacher-forced pass (a 1-row forward per position p, the draft's argmax g_p and its
    confidence) gives every chain up to its first token off the continuation; a chain from i
    leaves it at p = i + a(i), after which it continues as the draft's greedy chain from
    (prompt, y_1..y_p, g_p), computed once per p. That continuation runs until `longest` chain
    tokens or a token of confidence < stop_below: every replayed rule with threshold >= stop_below
    has stopped by then.

    Args: draft: a `CausalLM` (its view with a head subset for ``dv``). prompt: int64 [1, n].
    greedy: int64 [N], target-only's greedy tokens. longest: M >= 1. stop_below: the lowest threshold.

    Returns:
        (confidences: per start, a list of its chain's confidences; matched: a(i) per start;
        seconds: the 1-row forwards' times).
    """
    kv = new_kv("sequence", draft, 1)
    kv.prefill(prompt[:, :-1], torch.tensor([prompt.shape[1] - 1]))
    last, one, N = prompt[:, -1:], torch.ones(1, 1, dtype=torch.bool), greedy.shape[0]
    on_path, on_conf, off_conf, seconds = [], [], [], []
    for p in range(N):
        t0 = time.perf_counter()
        logits = kv.append(last, torch.tensor([[-1]]), one)  # [1, 1, V]
        seconds.append(time.perf_counter() - t0)
        token, conf = _greedy(logits)
        on_path.append(int(token) == int(greedy[p])), on_conf.append(conf)
        tail, j = [], 1
        while not on_path[-1] and conf >= stop_below and j < longest:  # the chain off the continuation
            token, conf = _greedy(kv.append(token, torch.tensor([[j - 1]]), one))
            tail.append(conf)
            j += 1
        off_conf.append(tail)
        keep = torch.zeros(1, j, dtype=torch.bool)
        keep[0, 0] = True  # the prefix's last token stays; the chain goes
        kv.commit(keep)
        last = greedy[p].view(1, 1)
    confidences, matched = [], []
    for i in range(N):
        run = 0
        while i + run < N and run < longest and on_path[i + run]:
            run += 1
        chain = on_conf[i:i + run + 1] + (off_conf[i + run] if i + run < N else [])
        confidences.append(chain[:longest]), matched.append(run)
    return confidences, matched, seconds


def _greedy(logits: torch.Tensor):
    """logits [1, 1, V] -> (the argmax token int64 [1, 1], its probability at T = 1): the
    confidence the engine's chains read (`probabilities(logits, 1)`; 0 outside a head subset)."""
    conf, token = probabilities(logits[0, -1], 1.0).max(-1)  # first maximal id on ties, as the engine
    return token.view(1, 1), float(conf)


def target_seconds(target, prompt: torch.Tensor, rows: int, repeats: int = 7) -> float:
    """Median seconds of a `rows`-row chain forward of the target after as many cached positions
    as the prompt has (`verispec.bench.costs.time_appends`)."""
    cuda = str(target.device).startswith("cuda")
    return statistics.median(s for _, _, s in time_appends(target, (rows,), (prompt.shape[1],), repeats, cuda))


def measured_counts(bench: dict, task: str) -> dict:
    """{runner label: (target forwards, draft forwards)} at T = 0 for one prompt of a bench JSON."""
    out = {}
    for text, record in bench.get("records", {}).items():
        key = RecordKey.parse(text)
        if key.temperature == 0 and key.task == task and record.get("target_forwards") is not None:
            out[key.label] = (record["target_forwards"], record["draft_forwards"])
    return out


def prompt_record(pair, draft_pair, peer_spec, config, ids, args, bench_counts: dict,
                  adaptive_threshold: bool = False) -> dict:
    """One prompt: target-only's greedy tokens, the chain table, the prices, the oracle, every
    replayed stop, and each measured runner's counts priced (and replayed where `stop_of` models
    it; `adaptive_threshold`: the bench file ran transformers with scikit-learn)."""
    with torch.inference_mode():
        target_only = parse_method("target_only", config.draft_length, config.num_paths)
        greedy = run_method(target_only, pair, ids, config, 0.0, 0, {}).tokens[0, :args.max_new_tokens]
        vocab = draft_vocabulary(peer_spec, draft_pair)
        draft = draft_pair.draft if vocab is None else draft_pair.draft.with_head_subset(
            vocab.subset(draft_pair.draft.vocab_size, ids))
        conf, matched, seconds = chain_table(draft, ids, greedy, args.longest, args.stop_below)
        t_s = target_seconds(pair.target, ids, args.verify_rows)
    d_s, N = statistics.median(seconds), greedy.shape[0]

    def priced(t, d):
        return {"target_forwards": t, "draft_forwards": d, "priced_s": t * t_s + d * d_s}

    o_s, o_t, o_d, o_len = oracle_schedule(matched, N, t_s, d_s, args.longest)
    stops = [PEER, PEER_DEFAULTS] + [verispec_stop(L, c) for L in GRID_LENGTHS for c in GRID_THRESHOLDS]
    measured = {}
    for label, (t, d) in bench_counts.items():
        measured[label] = priced(t, d)
        stop = stop_of(label, adaptive_threshold)
        if stop is not None:
            measured[label]["replayed_forwards"] = list(replay(conf, matched, N, stop))
    return {"tokens": N, "target_s": t_s, "draft_s": d_s, "matched": matched,
            "confidences": [[round(c, 6) for c in chain] for chain in conf],
            "oracle": {**priced(o_t, o_d), "lengths": o_len},
            "replayed": {stop.label: priced(*replay(conf, matched, N, stop)) for stop in stops},
            "measured": measured}


#: What a file's prompt records depend on: resuming needs the same values.
SETTINGS = ("max_new_tokens", "draft_levers", "longest", "stop_below", "verify_rows", "threads", "bench")


def run(args) -> dict:
    """Every prompt's record (`prompt_record`), resuming an existing --output (`resume_json`), the file
    written atomically after each prompt; returns the whole result with its summary.

    Raises:
        ValueError: a --stop-below above, or a --longest below, what the replayed stops need.
    """
    if args.stop_below > min(GRID_THRESHOLDS + (PEER.threshold, PEER_DEFAULTS.threshold)):
        raise ValueError(f"stop_below: must be <= every replayed threshold ({min(GRID_THRESHOLDS)}), "
                         f"got {args.stop_below}")
    if args.longest < max(GRID_LENGTHS + (PEER.length, PEER_DEFAULTS.length)):
        raise ValueError(f"longest: must be >= every replayed length ({max(GRID_LENGTHS)}), got {args.longest}")
    levers = ",".join(x for x in (f"dq={args.draft_quant}" if args.draft_quant else "",
                                  f"dv={args.draft_vocab}" if args.draft_vocab else "") if x)
    out = {"command": " ".join(sys.argv), "machine": platform.machine(), **host_info("cpu"), "torch": torch.__version__,
           "threads": args.threads, "draft_levers": levers, "max_new_tokens": args.max_new_tokens,
           "longest": args.longest, "stop_below": args.stop_below, "verify_rows": args.verify_rows,
           "bench": args.bench, "prompts": {}}
    old = resume_json(args.output, {k: out[k] for k in SETTINGS}, args.fresh)
    out["prompts"] = old["prompts"] if old else {}
    config, _ = BenchConfig(threads=args.threads, max_new_tokens=args.max_new_tokens, prompts=args.prompts,
                            first_prompt=args.first_prompt).resolve()
    pair, prompts = prepare(config, None, None, args.first_prompt)
    peer_spec = parse_method("hf" + (":" + levers if levers else ""), config.draft_length, config.num_paths)
    draft_pair = QuantizedDrafts().pair_for(peer_spec, pair)
    bench = {}
    if args.bench:
        with open(args.bench) as f:
            bench = json.load(f)
    for item in prompts:
        if item["task_id"] in out["prompts"]:
            print(item["task_id"], "kept from", args.output, flush=True)
            continue
        ids = pair.tokenizer(item["prompt"], return_tensors="pt").input_ids
        record = prompt_record(pair, draft_pair, peer_spec, config, ids, args, measured_counts(bench, item["task_id"]),
                               bench.get("environment", {}).get("scikit_learn") is not None)
        out["prompts"][item["task_id"]] = record
        write_json_atomic(args.output, {**out, "summary": summarise(out["prompts"])})
        print(item["task_id"], f"C_t {record['target_s']:.3f} s, C_d {record['draft_s']:.4f} s; oracle "
              f"{record['oracle']['target_forwards']} target / {record['oracle']['draft_forwards']} draft; "
              f"{PEER.label} {record['replayed'][PEER.label]['target_forwards']} / "
              f"{record['replayed'][PEER.label]['draft_forwards']}", flush=True)
    return {**out, "summary": summarise(out["prompts"])}


def summarise(records: dict) -> dict:
    """Totals over the prompts (derived): priced seconds of the oracle, of every replayed stop and
    of every measured runner; each one's ratio to the oracle and the peer's (`PEER`) priced seconds
    over each one's (a speedup over the peer at these prices); the best replayed verispec stop (in
    hindsight: chosen on these prompts)."""
    sums = {"oracle": sum(r["oracle"]["priced_s"] for r in records.values())}
    for kind in ("replayed", "measured"):
        for r in records.values():
            for label, v in r[kind].items():
                sums[f"{kind} {label}"] = sums.get(f"{kind} {label}", 0.0) + v["priced_s"]
    peer = sums["replayed " + PEER.label]
    grid = {k: v for k, v in sums.items() if k.startswith("replayed adaptive:")}
    best = min(grid, key=grid.get)
    return {"priced_s": sums, "over_oracle": {k: v / sums["oracle"] for k, v in sums.items()},
            "peer_over": {k: peer / v for k, v in sums.items()},
            "best_verispec_stop_in_hindsight": best[len("replayed "):],
            "formula": "derived: priced_s = target_forwards * target_s + draft_forwards * draft_s, summed over "
                       "the prompts; over_oracle = priced_s / priced_s(oracle); peer_over = priced_s(replayed "
                       f"{PEER.label}) / priced_s"}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--first-prompt", type=int, default=110)
    parser.add_argument("--prompts", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--draft-quant", type=int, default=8, choices=(0, 8))
    parser.add_argument("--draft-vocab", type=int, default=32768)
    parser.add_argument("--longest", type=int, default=24, help="the most tokens of each start's chain (M)")
    parser.add_argument("--stop-below", type=float, default=0.1,
                        help="a chain ends at a token of confidence below this once off the greedy path")
    parser.add_argument("--verify-rows", type=int, default=9, help="rows of the timed target forward")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--bench", help="a bench JSON whose T = 0 counts to price and compare")
    parser.add_argument("--output", default="benchmarks/results/chain_oracle_cpu.json")
    parser.add_argument("--fresh", action="store_true", help="replace --output instead of resuming it")
    args = parser.parse_args(argv)
    out = run(args)
    summary = out["summary"]
    shown = ["oracle", "replayed " + PEER.label, "replayed " + PEER_DEFAULTS.label,
             "replayed " + summary["best_verispec_stop_in_hindsight"]] + [k for k in summary["priced_s"]
                                                                          if k.startswith("measured ")]
    for k in shown:
        print(f"{k:75s} {summary['priced_s'][k]:7.2f} s  {summary['over_oracle'][k]:5.3f}x oracle  "
              f"peer/this {summary['peer_over'][k]:5.3f}")


if __name__ == "__main__":
    main()
