"""The engine at accelerator speed, checked on a CPU with tiny models.

- The static KV (`speedups.static_kv`) emits the same tokens, accepted lengths and forward counts as
  the growing "sequence" cache for every method (T = 0 and T = 1, one seed), and as "padded" for a
  batch of prompts of different lengths, EOS stops included (rows leave the batch).
- Target-only, token, block and gbv make one host synchronisation per iteration (counted with
  `speedups.syncs.SyncCounter`, which catches every value read back, including under inference mode).
- Captured steps (`speedups.graphs`, simulated on the CPU: the recorded ops replayed on the captured
  tensors) emit the eager tokens; a step that reads a value back falls back to eager; a drafter that
  keeps state outside its tensor attributes goes wrong under the simulation (planted), as it would
  under a CUDA graph.
- The draft step and the verify step trace with no graph break (`torch._dynamo.explain`) and
  compile with fullgraph=True.
- A planted visibility bug (siblings see each other) breaks the static storage's trees too.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec.empirical import engine, methods, model as model_module  # noqa: E402
from verispec.empirical.drafters import PathsDrafter  # noqa: E402
from verispec.empirical.speedups.graphs import BufferedUniforms  # noqa: E402
from verispec.empirical.speedups.syncs import SyncCounter  # noqa: E402
from verispec.reference import registry  # noqa: E402

from .test_decode_tiny import tiny  # noqa: E402

N = 12
PROMPT = torch.tensor([[3, 17, 5, 40, 3, 17, 5, 40, 9, 1, 3, 17]])
BATCH = [torch.tensor([3, 17, 5, 40, 3, 17, 5]), torch.tensor([9, 1]), torch.tensor([7, 7, 7, 7, 2, 5, 7, 7, 7, 2])]
#: The methods whose iteration reads one value back (whether every row is done).
ONE_SYNC = ("target_only", "token", "block", "gbv")


@pytest.fixture(scope="module")
def pair():
    return tiny(64, 0, head_scale=3.0), tiny(64, 0, noise=0.1, head_scale=3.0)


def _method(name):
    return methods.get(name, **({"truncation": 5} if name in ("khisti", "optimal_is") else {}))


def _decode(pair, name, prompts, T=0.0, **kwargs):
    target, draft = pair
    return engine.decode(target, draft if registry.spec(name).needs_draft else None, prompts, _method(name), N, T,
                         uniforms=0, **kwargs)


def _same(a, b):
    assert torch.equal(a.tokens, b.tokens)
    assert torch.equal(a.stats.accepted_lengths, b.stats.accepted_lengths)
    assert (a.stats.target_forwards, a.stats.draft_forwards) == (b.stats.target_forwards, b.stats.draft_forwards)


@pytest.mark.parametrize("name", methods.names())
def test_static_kv_decodes_as_the_growing_cache(pair, name):
    for T in (0.0, 1.0):
        _same(_decode(pair, name, PROMPT, T, storage="static"), _decode(pair, name, PROMPT, T, storage="sequence"))


@pytest.mark.parametrize("name", ["target_only", "block", "gbv", "opt_tree", "kary", "prompt_lookup", "adaptive"])
def test_static_kv_batch_with_eos_decodes_as_padded(pair, name):
    for eos in (None, 5):
        static = _decode(pair, name, BATCH, storage="static", eos_token_id=eos)
        padded = _decode(pair, name, BATCH, storage="padded", eos_token_id=eos)
        _same(static, padded)
        assert torch.equal(static.lengths, padded.lengths)


def test_the_static_kv_grows_for_a_prompt_past_its_capacity(pair):
    target, draft = pair
    long = torch.randint(0, 64, (1, 300), generator=torch.Generator().manual_seed(3))  # > one capacity step
    for name in ("block", "opt_tree"):
        static = engine.decode(target, draft, long, _method(name), 40, storage="static", uniforms=0)
        _same(static, engine.decode(target, draft, long, _method(name), 40, storage="sequence", uniforms=0))


def _syncs(pair, name, T=0.0, graphs=False):
    counter = SyncCounter()
    with counter:
        _decode(pair, name, PROMPT, T, storage="static", graphs=graphs, on_step=lambda run: counter.mark())
    return counter.spans


@pytest.mark.parametrize("name", ONE_SYNC)
def test_one_host_sync_per_iteration(pair, name):
    for T in (0.0, 1.0):
        spans = _syncs(pair, name, T)
        assert len(spans) > 2 and spans[1:] == [1] * (len(spans) - 1), spans


def test_the_counter_sees_values_read_back_under_inference_mode():
    x = torch.tensor([True, False])
    counter = SyncCounter()
    with torch.inference_mode(), counter:
        bool(x.any()), int(x.long().sum()), x.nonzero(), x[x], x.tolist(), x.cpu(), torch.tensor([1, 2])
        x[0] = True  # a Python scalar as a fill value: no copy
    assert counter.total == 7, dict(counter.by_op)
    assert dict(counter.by_kind) == {"scalar": 2, "data_shape": 2, "to_host": 2, "from_host": 1}


@pytest.mark.parametrize("name", ONE_SYNC)
def test_captured_steps_emit_the_eager_tokens(pair, name):
    eager = _decode(pair, name, PROMPT, storage="static")
    for prompt in (PROMPT, PROMPT[:, 3:]):  # the second prompt replays the first one's graphs
        captured = _decode(pair, name, prompt, storage="static", graphs="simulate")
        _same(captured, _decode(pair, name, prompt, storage="static"))
    # every iteration but the one that reads the prompt replays both steps
    assert captured.stats.replayed_steps == 2 * (captured.stats.iterations - 1)
    assert eager.stats.replayed_steps == 0


#: The cost policy's methods (issue 46): it picks each iteration's length or budget on the host.
POLICY = [("block", {"draft_length": 6}), ("gbv", {"num_paths": 2}), ("opt_tree", {"node_budget": 12}),
          ("adaptive", {})]


@pytest.mark.parametrize("name, params", POLICY, ids=[name for name, _ in POLICY])
def test_the_cost_policy_runs_eagerly_on_the_static_kv(pair, name, params):
    """pol=auto (the bench's default for trees and adaptive chains) on the static KV, graphs on:
    the sequence storage's tokens, and no step captured (its choices would not replay)."""
    from .test_policy import COSTS

    def run(**kwargs):
        method = methods.get(name, policy="auto", costs=COSTS, **params)
        return engine.decode(pair[0], pair[1], PROMPT, method, N, 1.0, uniforms=3, **kwargs)

    captured = run(storage="static", graphs="simulate")
    _same(captured, run(storage="sequence"))
    assert captured.stats.captured_steps == captured.stats.replayed_steps == 0


class _Reading(PathsDrafter):
    """Reads a value back while drafting: its steps cannot be captured."""

    def draft(self, rows):
        tree = super().draft(rows)
        int(tree.tokens[0, 1])
        return tree


class _HiddenState(PathsDrafter):
    """Planted capture bug: counts its calls in a dict (not an integer attribute the capture replays)
    and spoils every other draft, so a replayed step repeats the call that was captured."""

    def start(self, *args, **kwargs):
        super().start(*args, **kwargs)
        self.memo = {"calls": 0}

    def draft(self, rows):
        tree = super().draft(rows)
        self.memo["calls"] += 1
        if self.memo["calls"] % 2:
            tree.tokens[:, 1:] = (tree.tokens[:, 1:] + 1) % 64
        return tree


@pytest.mark.parametrize("drafter,recovers", [(_Reading, True), (_HiddenState, False)])
def test_capture_protocol_plants(pair, drafter, recovers):
    target, draft = pair
    method = engine.TorchMethod("block", lambda: drafter(3), _method("block").verifier)
    eager = engine.decode(target, draft, PROMPT, method, N, uniforms=0, storage="static")
    captured = engine.decode(target, draft, PROMPT, method, N, uniforms=0, storage="static", graphs="simulate")
    assert torch.equal(captured.tokens, eager.tokens)  # greedy output never depends on the draft
    graphs = target.cache_pool["graphs", "simulate"]
    draft_steps = {key for key in graphs.eager | set(graphs.captured) if key[0][:3:2] == ("draft", drafter.__name__)}
    if recovers:  # the warm-up saw the read: its draft step runs eagerly (its verify step is captured)
        assert draft_steps and draft_steps <= graphs.eager
        _same(captured, eager)
    else:  # the replayed steps drafted from a stale root: other acceptances than the eager run
        assert captured.stats.replayed_steps > 0
        assert not torch.equal(captured.stats.accepted_lengths, eager.stats.accepted_lengths)


class _Stop(Exception):
    pass


def test_a_failed_capture_falls_back_to_eager(pair, monkeypatch):
    """A capture that raises after a clean warm-up (planted: the graph raises once the step ran):
    the objects are put back, a warning names the step, and the decode goes on eagerly, unchanged."""
    from verispec.empirical.speedups import graphs as graphs_module

    class Failing:
        def capture(self, fn):
            fn()  # the step's Python ran (counters, memos, rebound tensors): all of it must be undone
            raise RuntimeError("planted capture failure")

    target, _ = pair
    target.cache_pool.pop(("graphs", "simulate"), None)
    monkeypatch.setattr(graphs_module, "_SimulatedGraph", Failing)
    eager = _decode(pair, "block", PROMPT, storage="static")
    with pytest.warns(UserWarning, match="could not be captured"):
        failed = _decode(pair, "block", PROMPT, storage="static", graphs="simulate")
    _same(failed, eager)
    assert failed.stats.replayed_steps == 0 and target.cache_pool["graphs", "simulate"].failures
    target.cache_pool.pop(("graphs", "simulate"))


def _steady_run(pair, name):
    """The run of a decode stopped after its third iteration, its source of uniforms a served
    buffer (as in a captured step)."""
    target, draft = pair
    runs = []

    def stop(run):
        if int(run.progress.it) == 3:
            runs.append(run)
            raise _Stop

    with pytest.raises(_Stop):
        engine.decode(target, draft, PROMPT, _method(name), N, uniforms=0, storage="static", on_step=stop)
    run = runs[0]
    buffered = BufferedUniforms(run.source)
    buffered.recording, buffered.buffer = False, torch.rand(1, 64, dtype=torch.float64)
    run.source = run.drafter.source = buffered
    return run, buffered


def test_draft_and_verify_steps_trace_whole(pair):
    """`torch._dynamo.explain`: one graph, no break, for each step (with the captured steps' source
    of uniforms: a buffer; the generator draw outside the step is the one break otherwise)."""
    run, buffered = _steady_run(pair, "block")
    with torch.no_grad():
        explained = torch._dynamo.explain(run.draft_step)()
        assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
        buffered.offset, run.tree = 0, run.draft_step()
        explained = torch._dynamo.explain(run.verify_step)()
        assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


def test_steps_compile_with_fullgraph(pair):
    """fullgraph=True (the trace without a graph break is required, not just counted), eager backend."""
    torch._dynamo.reset()
    run, buffered = _steady_run(pair, "block")
    with torch.no_grad():
        tree = torch.compile(run.draft_step, fullgraph=True, backend="eager")()
        assert tree.tokens.shape == (1, 5)
        run.tree = tree
        torch.compile(run.verify_step, fullgraph=True, backend="eager")()
    assert int(run.progress.it) == 4


@pytest.mark.slow
def test_steps_compile_with_inductor(pair):
    """The same steps through inductor (tens of seconds on a CPU)."""
    torch._dynamo.reset()
    run, _ = _steady_run(pair, "block")
    with torch.no_grad():
        run.tree = torch.compile(run.draft_step, fullgraph=True, dynamic=False)()
        torch.compile(run.verify_step, fullgraph=True, dynamic=False)()
    assert int(run.progress.it) == 4


def test_planted_sibling_visibility_breaks_static_trees(pair, monkeypatch):
    target, draft = pair
    greedy = engine.decode(target, None, PROMPT, _method("target_only"), 24, storage="static").tokens
    correct = model_module.visible_slots

    def leaky(valid, ancestry):  # every uncommitted node sees every other one
        allowed = correct(valid, ancestry)
        allowed[..., valid.shape[1]:] = True
        return allowed

    for name in ("opt_tree", "kary"):
        result = engine.decode(target, draft, PROMPT, _method(name), 24, storage="static")
        assert torch.equal(result.tokens, greedy)
    monkeypatch.setattr(model_module, "visible_slots", leaky)
    broken = [not torch.equal(engine.decode(target, draft, PROMPT, _method(name), 24, storage="static").tokens,
                              greedy) for name in ("opt_tree", "kary")]
    assert any(broken)
