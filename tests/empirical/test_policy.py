"""The cost policy on the torch engine (`verispec.empirical.speedups.policy`): T = 0 greedy output,
reproducible decisions that are the reference rule's, the measured law of tau against the reference
twins' exact law, and the bench's cost models and peer settings.

Statistics (test_measured_tau_equals_the_twin): n independent rows decode one prompt; the mean of
tau_1 (and tau_2) is tested two-sided against the twin's exact E[tau] with Bernstein's inequality
at the exact variance (`test_accepted_length_exact.check_means`: alpha = 1e-6 per case, power
>= 0.9 against a shift of delta_min, printed in the failure message). A planted bug (a policy that
never stops) must be caught at the same level.
"""

from __future__ import annotations

import json
import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec.empirical import engine, methods  # noqa: E402
from verispec.empirical.as_reference import TorchLanguageModel  # noqa: E402
from verispec.empirical.speedups import policy as torch_policy  # noqa: E402
from verispec.reference import methods as ref_methods  # noqa: E402
from verispec.reference import policy  # noqa: E402
from verispec.reference.costs import CostModel, ForwardCost  # noqa: E402

from .test_accepted_length_exact import check_means, decode_taus, exact_tau_laws  # noqa: E402
from .test_accepted_length_exact import tiny as context_tiny  # noqa: E402
from .test_decode_tiny import tiny  # noqa: E402

#: A cost model for the tiny models (not a measurement): a draft forward costs 1/10 of a one-row
#: target forward; the target's rows cost 1, 1.9 (4 rows), 4.5 (16 rows).
COSTS = CostModel(ForwardCost((1,), (0.1,), (0.0,)), ForwardCost((1, 4, 16), (1.0, 1.9, 4.5), (0.0, 0.0, 0.0)))
#: Nearly flat target rows and a cheap draft (a CPU with native bf16 and an int8 draft, roughly):
#: long chains pay even at a low acceptance.
FLAT = CostModel(ForwardCost((1,), (0.03,), (0.0,)), ForwardCost((1, 16), (1.0, 1.1), (0.0, 0.0)))
PROMPTS = [torch.tensor([5, 6, 7, 8, 9, 10, 11, 12, 5, 6, 7]), torch.tensor([1, 2, 3, 1, 2]),
           torch.tensor([40, 41, 42, 43, 44, 45])]
FAMILIES = [("adaptive", {}), ("hybrid", {"lookup_length": 4}), ("adaptive", {"guess_length": 3}),
            ("token", {}), ("block", {"draft_length": 6}), ("gbv", {"num_paths": 2}), ("spechub", {}),
            ("opt_tree", {"node_budget": 12}), ("kary", {"node_budget": 8}), ("adaptive", {"leaves": "on"})]


@pytest.fixture(scope="module")
def pair():
    return tiny(64, 0, head_scale=4.0), tiny(64, 0, noise=0.1, head_scale=4.0)


@pytest.mark.parametrize("storage", ["padded", "sequence", "static"])  # static: the bench's (issue 44)
@pytest.mark.parametrize("name, params", FAMILIES, ids=[f"{n}-{'-'.join(p)}" for n, p in FAMILIES])
def test_greedy_output_is_target_only_greedy(pair, storage, name, params):
    target, draft = pair
    prompts = PROMPTS if storage == "padded" else PROMPTS[:1]
    reference = engine.decode(target, None, prompts, engine.target_only_method(), 20)
    method = methods.get(name, policy="auto", costs=COSTS, **params)
    result = engine.decode(target, draft, prompts, method, 20, storage=storage)
    assert result.tokens.tolist() == reference.tokens.tolist()


def _spy(method):
    """`method` whose drafter records every tree it drafts (tokens [N] of row 0)."""
    trees, make = [], method.drafter

    def drafter():
        inner = make()
        draft = inner.draft

        def recording(rows):
            tree = draft(rows)
            trees.append(tree.tokens[0, tree.real[0]].tolist())
            return tree

        inner.draft = recording
        return inner

    from dataclasses import replace

    return replace(method, drafter=drafter), trees


def test_chain_decisions_are_reproducible_and_are_the_reference_rule(exact_models):
    """Two runs with one seed take the same decisions; with the calibration frozen at its prior
    (calibration_weight 1e12), every chain is cut exactly where `reference.policy.keeps_drafting`
    says on the draft's own probabilities, and the lengths vary."""
    target, draft = exact_models
    prompt = [1, 3]
    method, trees = _spy(methods.get("adaptive", draft_length=2, max_draft_length=6, policy="auto", costs=FLAT,
                                     calibration_weight=1e12))
    runs = [engine.decode(target, draft, torch.tensor(prompt), method, 40, 1.0, uniforms=7, storage="sequence")
            for _ in range(2)]
    assert runs[0].tokens.tolist() == runs[1].tokens.tolist()
    lengths = runs[0].stats.logs["chain_lengths"].tolist()
    assert lengths == runs[1].stats.logs["chain_lengths"].tolist() and len(set(lengths)) > 2
    q, g = TorchLanguageModel(draft, 1.0), policy.Calibration.prior(torch_policy.CALIBRATION_BINS)
    context, emitted = list(prompt), runs[0].tokens[0].tolist()
    for tree, tau in zip(trees[:len(lengths)], runs[0].stats.accepted_lengths.tolist()):
        chain = tree[1:]
        rates = [float(g(q.probs(tuple(context + chain[:i]))[chain[i]])) for i in range(len(chain))]
        cap = min(6, 40 - (len(context) - len(prompt)) - 1)
        assert all(policy.keeps_drafting(rates[:d], FLAT, len(context), cap) for d in range(1, len(chain)))
        assert len(chain) == cap or not policy.keeps_drafting(rates, FLAT, len(context), cap)
        context += emitted[len(context) - len(prompt):][:tau + 1]


@pytest.fixture(scope="module")
def exact_models():
    return context_tiny(20), context_tiny(20, noise=0.3)


#: (case id, torch method, its reference twin, calibration weight, iterations compared)
CASES = [("chain", methods.get("adaptive", draft_length=3, max_draft_length=3, policy="auto", costs=COSTS),
          policy.chain_method(3, COSTS, policy.Calibration.prior(torch_policy.CALIBRATION_BINS)), 1),
         ("chain-frozen", methods.get("adaptive", draft_length=3, max_draft_length=3, policy="auto", costs=COSTS,
                                      calibration_weight=1e12),
          policy.chain_method(3, COSTS, policy.Calibration.prior(torch_policy.CALIBRATION_BINS)), 2),
         ("paths", methods.get("gbv", draft_length=3, num_paths=2, policy="auto", costs=COSTS),
          policy.planned_method(lambda L: ref_methods.gbv(L, 2), 3, COSTS, 0.5, num_paths=2), 1),
         ("tree", methods.get("opt_tree", node_budget=5, max_depth=3, policy="auto", costs=COSTS),
          policy.budget_tree_method(5, COSTS, max_depth=3), 1),
         ("tree-width", methods.get("opt_tree", node_budget=5, max_depth=3, width=1, policy="auto", costs=COSTS),
          policy.budget_tree_method(5, COSTS, max_depth=3, width=1), 1)]


@pytest.mark.parametrize("case_id, method, twin, iterations", CASES, ids=[c[0] for c in CASES])
def test_measured_tau_equals_the_twin(exact_models, case_id, method, twin, iterations):
    """The first iteration (both, when the calibration is frozen) draws tau from the twin's exact law."""
    laws = exact_tau_laws(*exact_models, twin, (1, 3), depth=3)[:iterations]
    # 2 L + 2 tokens: the chain cap (cut to the tokens a row still needs) stays 3 in iteration 2
    taus = decode_taus(*exact_models, method, {}, 3000, "padded", (1, 3), seed=46, depth=6)[:iterations]
    report = check_means(taus, laws, bound=3)
    assert report


def test_a_policy_that_never_stops_is_caught(exact_models, monkeypatch):
    """Planted: the chain policy always drafts on (to the cap): tau_1's law moves off the twin's."""
    _, method, twin, _ = CASES[0]
    law = exact_tau_laws(*exact_models, twin, (1, 3), depth=3)[0]
    monkeypatch.setattr(torch_policy.ChainPolicy, "stops", lambda self, c, depth, going, *_: torch.zeros_like(going))
    tau = decode_taus(*exact_models, method, {}, 3000, "padded", (1, 3), seed=46, depth=3)[0]
    with pytest.raises(AssertionError, match="tau_1"):
        check_means([tau], [law], bound=3)


def test_the_policy_needs_costs_and_a_draft_length():
    with pytest.raises(TypeError, match="costs"):
        methods.get("adaptive", policy="auto")
    with pytest.raises(ValueError, match="policy"):
        methods.get("block", policy="fast", costs=COSTS)
    with pytest.raises(TypeError, match="policy"):
        methods.get("prompt_lookup", policy="auto", costs=COSTS)
    assert methods.get("block", policy="fixed").params == methods.get("block").params


# ----------------------------------------------------------------------------------------------
# The bench: measured cost models, recorded and cached; the peer's settings
# ----------------------------------------------------------------------------------------------

def _bench_pair():
    from .test_bench import CharTokenizer

    return types.SimpleNamespace(target=tiny(64, 0, head_scale=4.0), draft=tiny(64, 0, noise=0.1, head_scale=4.0),
                                 tokenizer=CharTokenizer(64))


def test_the_bench_measures_caches_and_records_the_cost_model(tmp_path, monkeypatch):
    from verispec import bench
    from verispec.bench import costs as bench_costs

    from .test_bench import PROMPTS as BENCH_PROMPTS

    monkeypatch.setenv("VERISPEC_COST_CACHE", str(tmp_path / "cache" / "costs"))
    pair_ = _bench_pair()
    cfg = bench.BenchConfig(prompts=1, max_new_tokens=8, methods=("adaptive", "opt_tree:n=6"), temperatures=(0.0,),
                            dtype="float32")
    results = bench.run_bench(cfg, str(tmp_path / "a.json"), pair=pair_, prompts=BENCH_PROMPTS, plot=False)
    models = results["environment"]["cost_models"]
    assert len(models) == 1  # one lever set: both methods share it
    (ident, model), = models.items()
    record = results["records"]["adaptive|T=0|" + BENCH_PROMPTS[0]["task_id"]]
    assert record["policy"] == "auto" and record["cost_model"] == ident and record["chain_lengths"]
    rows = {m for m, *_ in model["samples"]}, {r for m, r, *_ in model["samples"] if m == "target"}
    assert rows == ({"draft", "target"}, set(bench_costs.TARGET_ROWS))
    assert (tmp_path / "cache" / "costs" / f"{ident}.json").exists()

    def no_measuring(*args, **kwargs):
        raise AssertionError("measured again")

    monkeypatch.setattr(bench_costs, "measure_costs", no_measuring)  # the second run reads the cache
    monkeypatch.setattr(bench_costs, "DRIFT_TOLERANCE", 1e9)  # tiny forwards' timing noise is not drift
    again = bench.run_bench(cfg, str(tmp_path / "b.json"), pair=pair_, prompts=BENCH_PROMPTS, plot=False)
    assert again["environment"]["cost_models"] == models
    spec = bench_costs.recorded_spec("adaptive", results, 4, 3)  # a re-run takes the recorded decisions
    assert spec.cost_model == ident and spec.param("costs") == CostModel.from_dict(model)
    assert json.loads(json.dumps(results))["summary"][1]["greedy_match_rate"] == 1.0


def test_a_cached_cost_model_that_has_drifted_is_measured_again(tmp_path, monkeypatch):
    """A stale cache (every forward priced 1000x too high, as if measured on a slower machine) is
    caught by the spot check, measured again and replaced; with the check switched off (an infinite
    tolerance in effect) the stale model would have been used, so the check is what catches it."""
    from verispec import bench
    from verispec.bench import costs as bench_costs

    from .test_bench import PROMPTS as BENCH_PROMPTS

    folder = tmp_path / "costs"
    monkeypatch.setenv("VERISPEC_COST_CACHE", str(folder))
    pair_ = _bench_pair()
    cfg = bench.BenchConfig(prompts=1, max_new_tokens=4, methods=("adaptive",), temperatures=(0.0,), dtype="float32")
    first = bench.run_bench(cfg, str(tmp_path / "a.json"), pair=pair_, prompts=BENCH_PROMPTS, plot=False)
    (ident, check), = first["environment"]["cost_checks"].items()
    assert check == {"tolerance": bench_costs.DRIFT_TOLERANCE, "source": "measured", "spot_check": None}
    fresh = CostModel.from_dict(first["environment"]["cost_models"][ident])
    scale = lambda f: ForwardCost(f.rows, tuple(1000 * b for b in f.base), tuple(1000 * p for p in f.per_position))
    stale = CostModel(scale(fresh.draft), scale(fresh.target), key=fresh.key)
    (folder / f"{ident}.json").write_text(json.dumps(stale.to_dict()))

    kept = bench_costs.CostModels(tolerance=1e9)  # no drift check in effect: the stale model is used
    assert kept.for_method(bench.parse_method("adaptive", 4, 3), pair_, cfg.resolve()[0])[1] == stale
    assert kept.checks[ident]["source"] == "cache" and kept.checks[ident]["spot_check"]["drift"] > 100

    again = bench.run_bench(cfg, str(tmp_path / "b.json"), pair=pair_, prompts=BENCH_PROMPTS, plot=False)
    check = again["environment"]["cost_checks"][ident]
    assert check["source"] == "measured again" and check["spot_check"]["drift"] > 100
    assert check["spot_check"]["draft_1_row"]["ratio"] < 0.01  # measured far below the stale prediction
    remeasured = CostModel.from_dict(json.loads((folder / f"{ident}.json").read_text()))
    assert remeasured == CostModel.from_dict(again["environment"]["cost_models"][ident])
    assert remeasured.draft.seconds(1, 256) < stale.draft.seconds(1, 256) / 100
    with pytest.raises(ValueError, match="tolerance"):
        bench_costs.CostModels(tolerance=0)


def test_the_peer_takes_its_assistant_settings_and_restores_them():
    from verispec import bench

    pair_ = _bench_pair()
    config = bench.BenchConfig(max_new_tokens=16, dtype="float32")
    prompt = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
    before = pair_.draft.model.generation_config.to_dict()
    spec = bench.parse_method("hf:L=3,sched=constant,c=0", 4, 3)
    assert spec.label == "hf:L=3,sched=constant,c=0"
    result = bench.run_method(spec, pair_, prompt, config, 0.0, 0, {})
    assert max(result.stats.logs["call_fed"][1:]) <= 1 + 3  # at most 3 candidates per call
    pools = {}
    heuristic = bench.parse_method("hf:L=2,sched=heuristic", 4, 3)
    bench.run_method(heuristic, pair_, prompt, config, 0.0, 0, pools)
    assert isinstance(pools[heuristic.label, 0.0], int)  # the carried length, for the next prompt
    assert pair_.draft.model.generation_config.to_dict() == before
    greedy = engine.decode(pair_.target, None, prompt, engine.target_only_method(), 16).tokens
    subset = bench.run_method(bench.parse_method("hf:dv=8", 4, 3), pair_, prompt, config, 0.0, 0, {})
    assert subset.tokens.tolist() == greedy.tolist()
    assert pair_.draft.model.get_output_embeddings().out_features == 64  # the full head is back


def test_the_calibration_learns_from_verified_tokens_in_two_levels():
    """Tokens of draft probability 0.05 (bin 0, prior 1/16) all accepted: bin 0 rises towards 1, and
    the untouched bins move towards the pooled rate; a row that saw nothing keeps the centres."""
    chain = torch_policy.ChainPolicy(torch_policy.PolicyConfig(COSTS, calibration_weight=2), max_length=4)
    chain.start(2, "cpu")
    chain.begin(torch.tensor([10, 10]))
    for depth in range(4):
        chain.stops(torch.full((2,), 0.05), torch.full((2,), depth), torch.tensor([True, True]), torch.tensor([4, 4]))
    chain.observe(torch.tensor([4, 4]), torch.tensor([4, 4]), torch.tensor([True, False]))
    g = chain.calibration()
    centres = (torch.arange(8, dtype=torch.float64) + 0.5) / 8
    assert torch.equal(g[1], centres)
    pooled = (4 + 2 * centres) / (4 + 2)
    assert torch.allclose(g[0, 1:], pooled[1:]) and torch.isclose(g[0, 0], (4 + 2 * pooled[0]) / 6)
    assert g[0, 0] > 0.8 and bool((g[0, 1:] > centres[1:]).all())


def test_a_policy_memory_carries_the_calibration_across_decode_calls(exact_models):
    """A second call with the same memory starts from what the first verified (scaled down to at most
    CARRY_TOKENS examined tokens), not from the centres; without a memory each call starts afresh."""
    target, draft = exact_models
    memory = torch_policy.PolicyMemory()
    method = methods.get("adaptive", draft_length=2, max_draft_length=6, policy="auto", costs=FLAT, memory=memory)
    engine.decode(target, draft, torch.tensor([1, 3]), method, 200, 1.0, uniforms=1, storage="sequence")
    seen = memory.counts["chain_seen"]
    assert float(seen.sum()) > torch_policy.CARRY_TOKENS  # more verified tokens than a call is seeded with
    chain = torch_policy.ChainPolicy(torch_policy.PolicyConfig(FLAT, memory=memory), 6)
    chain.start(2, "cpu")
    assert torch.allclose(chain.seen.sum(1), torch.full((2,), float(torch_policy.CARRY_TOKENS), dtype=torch.float64))
    assert torch.allclose(chain.accepted[0] / chain.seen[0].clamp(min=1e-9),
                          memory.counts["chain_accepted"] / seen.clamp(min=1e-9))
    fresh = torch_policy.ChainPolicy(torch_policy.PolicyConfig(FLAT), 6)
    fresh.start(1, "cpu")
    assert float(fresh.seen.sum()) == 0
