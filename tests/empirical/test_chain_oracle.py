"""benchmarks/chain_oracle.py on tiny fp32 models: its replay of a confidence stop counts exactly
the forwards that verispec's engine and transformers' assisted generation count at T = 0, and its
oracle schedule is the optimum over every schedule (exhaustive enumeration on small tables)."""

from __future__ import annotations

import json
import os
import random
import types

import pytest

from ..scripts import load_script

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers.utils import is_sklearn_available  # noqa: E402

from verispec.bench.dispatch import run_method  # noqa: E402
from verispec.bench.spec import parse_method  # noqa: E402

from .test_bench import PROMPTS, CharTokenizer, config, tiny  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "chain_oracle.py")


@pytest.fixture(scope="module")
def oracle():
    return load_script(SCRIPT)


@pytest.fixture(scope="module")
def peaked_pair():
    """A tiny pair whose draft's confidences spread over (0.1, 1), so confidence stops fire
    (test_bench's pair is near uniform: every confidence about 1/64)."""
    return types.SimpleNamespace(target=tiny(64, 0, head_scale=32.0), draft=tiny(64, 0, noise=0.2, head_scale=32.0),
                                 tokenizer=CharTokenizer(64))


def _every_schedule(matched, total, target_s, draft_s, longest):
    """The least priced seconds over every schedule of draft lengths (exhaustive)."""
    best = float("inf")
    stack = [(0, 0.0)]
    while stack:
        i, seconds = stack.pop()
        if i >= total:
            best = min(best, seconds)
            continue
        for k in range(min(matched[i], longest, total - i - 1) + 1):
            stack.append((i + k + 1, seconds + target_s + k * draft_s))
    return best


def _tables(count, total=9, seed=0):
    rand = random.Random(seed)
    return [[rand.randint(0, 5) for _ in range(total)] for _ in range(count)]


def test_the_oracle_is_the_least_priced_schedule(oracle):
    for matched in _tables(40):
        seconds, targets, drafts, lengths = oracle.oracle_schedule(matched, 9, 5.0, 1.0, 5)
        assert seconds == _every_schedule(matched, 9, 5.0, 1.0, 5)  # integer prices: exact in floats
        assert seconds == 5.0 * targets + 1.0 * drafts and len(lengths) == targets and sum(lengths) == drafts
        i = 0
        for k in lengths:  # the schedule it returns is feasible: no chain drafts past its accepted run
            assert k <= matched[i]
            i += k + 1
        assert i == 9


def test_a_planted_optimistic_oracle_is_caught(oracle):
    """An oracle that believes one more token of each chain is accepted beats every real schedule
    on some table, so the exhaustive comparison above would fail it."""
    beaten = [m for m in _tables(40)
              if oracle.oracle_schedule([a + 1 for a in m], 9, 5.0, 1.0, 6)[0] < _every_schedule(m, 9, 5.0, 1.0, 6)]
    assert beaten


@pytest.mark.parametrize("length,threshold", [(4, 0.3), (3, 0.6)])
def test_the_replay_counts_what_the_engine_and_the_peer_count(oracle, peaked_pair, length, threshold):
    """The engine prefills its draft with all prompt tokens but the last in a forward of its own
    (`PathsDrafter.start`), so it counts one draft forward more than its replay; transformers'
    assistant reads the prompt in its first drafting forward. With one token left to emit the
    engine still drafts one (floor 1), the assistant none (floor 0)."""
    N = 14
    cfg = config(max_new_tokens=N)
    runner = parse_method(f"adaptive:L={length},M={length},sched=constant,c={round(100 * threshold)},pol=fixed", 3, 2)
    peer = parse_method(f"hf:L={length},sched=constant,c={round(100 * threshold)}", 3, 2)
    target_only = parse_method("target_only", 3, 2)
    stopped = 0
    for item in PROMPTS:
        ids = peaked_pair.tokenizer(item["prompt"], return_tensors="pt").input_ids
        with torch.inference_mode():
            greedy = run_method(target_only, peaked_pair, ids, cfg, 0.0, 0, {}).tokens[0]
            conf, matched, _ = oracle.chain_table(peaked_pair.draft, ids, greedy, length + 2, threshold)
            ours = run_method(runner, peaked_pair, ids, cfg, 0.0, 0, {})
            theirs = run_method(peer, peaked_pair, ids, cfg, 0.0, 0, {})
        assert ours.tokens[0].tolist() == theirs.tokens[0].tolist() == greedy.tolist()
        ours_stop, their_stop = oracle.stop_of(runner.label), oracle.stop_of(peer.label)
        assert (ours.stats.target_forwards, ours.stats.draft_forwards) == oracle.replay(conf, matched, N, ours_stop)
        if not is_sklearn_available():  # with scikit-learn transformers adapts its threshold: no fixed stop
            replayed = oracle.replay(conf, matched, N, their_stop)
            assert (theirs.stats.target_forwards, theirs.stats.draft_forwards) == replayed
        lengths = oracle.replay_stop(conf, matched, N, length, threshold, floor=1)[2]
        stopped += sum(k < min(length, N - 1) for k in lengths)  # the confidence stop fired
    assert stopped > 0


def test_a_rule_the_table_cannot_replay_is_refused(oracle):
    with pytest.raises(ValueError, match="confidences"):
        oracle.replay_stop([[0.9, 0.9]] * 4, [2, 2, 2, 2], 4, 3, 0.5)


def test_which_runners_the_replay_models(oracle):
    Stop = oracle.Stop
    assert oracle.stop_of("hf:L=8,sched=constant,dv=32768,dq=8") == Stop("hf:L=8,sched=constant,dv=32768,dq=8", 8, 0.4, 0, 0)
    assert oracle.stop_of("hf:dq=8")[1:] == (20, 0.4, 0, 0)  # transformers' defaults
    assert oracle.stop_of("hf:dq=8", adaptive_threshold=True) is None  # scikit-learn: the threshold adapts
    label = "adaptive:L=12,sched=constant,c=40,pol=fixed,v=block,dq=8,dv=32768"
    assert oracle.stop_of(label) == Stop(label, 12, 0.4, 1, 1)
    for policy_or_other in ("adaptive:dq=8,dv=32768", "hf:sched=heuristic", "opt_tree:n=8", "block",
                            "adaptive:L=12,sched=constant,c=40,pol=fixed,g=4"):
        assert oracle.stop_of(policy_or_other) is None
