"""The top-down multi-draft selection methods on the engine (`khisti`, `optimal_is`, `global_resolution`, `spechub`; `verifiers.multistep.TopDownSelection`,
`hubpairs.HubPairsDrafter`), on tiny random Qwen2 models (fp32, CPU):

- Shared uniforms: the torch selection and the reference rule through the adapter (numpy, same torch
  drafter) emit the same tokens and accepted lengths at T in {0, 0.7, 1}, on a pair that rejects
  often (asserted). Planted bugs caught there: the selection reads its uniforms shifted by one; the IS
  steps accept against q instead of the selected token's law q_I (a wrong residual).
- T = 0: a batch of prompts of different lengths reproduces target-only greedy decoding.
- Exact E[tau]: with n = 4000 rows, the measured mean accepted length of the first two iterations
  equals the reference engine's exact E[tau] (reference drafter + reference rule) within a
  Bernstein bound at alpha = 1e-6 (`test_accepted_length_exact`). This also checks the torch
  drafter's law, which the shared-uniform test cannot (both sides use it). Planted bug caught
  there: SpecHub's second draft drawn from q instead of q(. | != a).
- `khisti` and `optimal_is` with `truncation` = s (the s-truncated LPs, `TruncatedSelection`,
  `TruncatedSetSelection`) take the same checks.
- `verispec bench` runs them (T = 0 output = target-only); bad parameters raise clear errors.
"""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec import bench  # noqa: E402
from verispec.empirical import engine, methods  # noqa: E402
from verispec.empirical.drafters import hub_pairs as hubpairs  # noqa: E402
from verispec.empirical.verifiers import multistep  # noqa: E402
from verispec.empirical.uniforms import NumpyUniforms  # noqa: E402
from verispec.reference import methods as reference_methods  # noqa: E402

from . import test_accepted_length_exact as exact_tau  # noqa: E402
from .test_decode_tiny import tiny  # noqa: E402
from .test_engine import twin_and_adapter  # noqa: E402

SELECTIONS = [("spechub", dict(draft_length=3)), ("khisti", dict(draft_length=2, num_paths=2)),
         ("khisti", dict(draft_length=2, num_paths=3)), ("optimal_is", dict(draft_length=2, num_paths=2)),
         ("khisti", dict(draft_length=2, num_paths=3, truncation=2)),
         ("optimal_is", dict(draft_length=2, num_paths=3, truncation=2)),
         ("global_resolution", dict(draft_length=2, num_paths=2)), ("global_resolution", dict(draft_length=2, num_paths=3))]
IDS = ["spechub-L3", "khisti-K2", "khisti-K3", "optimal_is-K2", "khisti-K3-s2", "optimal_is-K3-s2",
       "global_resolution-K2", "global_resolution-K3"]
PROMPTS = [torch.tensor([3, 1, 4, 1, 5]), torch.tensor([9]), torch.tensor([2, 7, 1, 8, 2, 8, 1])]


@pytest.fixture(scope="module")
def pair():
    # V = 16; the draft is a different random model, so iterations often reject.
    return tiny(16, 5, head_scale=3.0), tiny(16, 6, head_scale=3.0)


@pytest.mark.parametrize("T", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("name,params", SELECTIONS, ids=IDS)
def test_selection_and_adapter_emit_the_same_tokens(pair, name, params, T):
    rejected = 0
    for seed in range(3):
        twin, ref = twin_and_adapter(pair, name, params, T, seed, tokens=12)
        assert torch.equal(twin.tokens, ref.tokens), seed
        assert torch.equal(twin.stats.accepted_lengths, ref.stats.accepted_lengths), seed
        rejected += int((twin.stats.accepted_lengths < params["draft_length"]).sum())
    assert rejected > 0  # the corrections and the residuals were exercised


def _diverges(pair, cases=SELECTIONS):
    return [any(not torch.equal(*(r.tokens for r in twin_and_adapter(pair, name, params, 1.0, seed, tokens=12)))
                for seed in range(3)) for name, params in cases]


def test_planted_uniform_shift_in_the_selection_is_caught(pair, monkeypatch):
    original = multistep._SelectionState.uniforms

    def shifted(self, u, rows, width):  # skips the first unread uniform of every step
        return original(self, u, rows, width + 1)[:, 1:]

    monkeypatch.setattr(multistep._SelectionState, "uniforms", shifted)
    assert all(_diverges(pair))


def test_planted_wrong_residual_in_the_is_selection_is_caught(pair, monkeypatch):
    """The IS steps accept y and draw the correction against the draft's q instead of q_I, the law
    of the selected token (as a verifier that forgets the selection would)."""
    original = multistep._tables

    def raw_q(name, p, q, drafts, truncation=None):
        tables = list(original(name, p, q, drafts, truncation))
        tables[1 if name == "khisti" else 2] = q
        return tuple(tables)

    monkeypatch.setattr(multistep, "_tables", raw_q)
    assert all(_diverges(pair, SELECTIONS[1:4] + SELECTIONS[5:]))


def test_planted_wrong_residual_in_the_truncated_selection_is_caught(pair, monkeypatch):
    original = multistep._truncated_tables

    def raw_q(p, q, drafts, s):
        keeps, _, drafted = original(p, q, drafts, s)
        return keeps, q, drafted

    monkeypatch.setattr(multistep, "_truncated_tables", raw_q)
    assert all(_diverges(pair, SELECTIONS[4:5]))


@pytest.mark.parametrize("storage", ["padded", "packed"])
@pytest.mark.parametrize("name,params", SELECTIONS, ids=IDS)
def test_greedy_mixed_lengths_equals_target_only(pair, name, params, storage):
    target, draft = pair
    greedy = torch.cat([engine.decode(target, None, p.unsqueeze(0), engine.target_only_method(), 10).tokens
                        for p in PROMPTS])
    result = engine.decode(target, draft, PROMPTS, methods.get(name, **params), 10, uniforms=3, storage=storage)
    assert torch.equal(result.tokens, greedy)
    assert result.stats.target_forwards == result.stats.iterations  # the first also reads the prompt


# ----------------------------------------------------------------------------------------------
# Measured E[tau] = the reference engine's exact E[tau] (first two iterations)
# ----------------------------------------------------------------------------------------------

EXACT = [("spechub", reference_methods.spechub(2), dict(draft_length=2)),
         ("optimal_is", reference_methods.optimal_is(2, 2), dict(draft_length=2, num_paths=2)),
         ("global_resolution", reference_methods.global_resolution(2, 2), dict(draft_length=2, num_paths=2)),
         pytest.param("khisti", reference_methods.khisti(2, 2), dict(draft_length=2, num_paths=2),
                      marks=pytest.mark.slow),
         pytest.param("khisti", reference_methods.khisti(2, 2, truncation=2),
                      dict(draft_length=2, num_paths=2, truncation=2), marks=pytest.mark.slow),
         pytest.param("optimal_is", reference_methods.optimal_is(2, 2, truncation=2),
                      dict(draft_length=2, num_paths=2, truncation=2), marks=pytest.mark.slow)]


@pytest.fixture(scope="module")
def models():
    return exact_tau.tiny(20), exact_tau.tiny(20, noise=0.3)


@pytest.fixture(scope="module")
def laws(models):
    memo = {}

    def get(name, method):
        if name not in memo:
            memo[name] = exact_tau.exact_tau_laws(*models, method, (1, 3))
        return memo[name]

    return get


@pytest.mark.parametrize("name,method,params", EXACT, ids=["spechub", "optimal_is", "global_resolution", "khisti",
                                                                "khisti-s2", "optimal_is-s2"])
def test_measured_tau_equals_exact(models, laws, name, method, params):
    law1, law2 = laws(f"{name}{params.get('truncation', '')}", method)
    assert sum(p for k, p in law2.items() if 0 < k < exact_tau.DEPTH) > 0.1  # partial acceptance
    taus = exact_tau.decode_taus(*models, name, params, 4000, "padded", (1, 3), seed=sum(map(ord, name)))
    exact_tau.check_means(taus, (law1, law2))


def test_planted_hub_pair_drafted_from_q_is_caught(models, laws, monkeypatch):
    """SpecHub's second draft from q itself (the hub may repeat) instead of q(. | != a)."""
    def from_q(q, u):
        tokens, single = original(q, u)
        second = torch.where(tokens[:, 0] == torch.argmax(q, -1), categorical(q, u[:, 1]), tokens[:, 1])
        return torch.stack([tokens[:, 0], second], 1), single

    from verispec.empirical.uniforms import categorical

    original = hubpairs.hub_pair
    expected = laws("spechub", reference_methods.spechub(2))  # the memo key of the spechub case above
    monkeypatch.setattr(hubpairs, "hub_pair", from_q)
    taus = exact_tau.decode_taus(*models, "spechub", dict(draft_length=2), 4000, "padded", (1, 3), seed=11)
    with pytest.raises(AssertionError, match="tau_"):
        exact_tau.check_means(taus, expected)


# ----------------------------------------------------------------------------------------------
# verispec bench and bad input
# ----------------------------------------------------------------------------------------------

class CharTokenizer:
    def __call__(self, text, return_tensors="pt"):
        return types.SimpleNamespace(input_ids=torch.tensor([[b % 16 for b in text.encode()]]))


def test_bench_runs_the_selection_methods(pair, tmp_path):
    labels = ("spechub", "khisti:K=2", "optimal_is:K=2", "khisti:K=2,s=3", "optimal_is:K=2,s=3")
    config = bench.BenchConfig(prompts=1, max_new_tokens=8, methods=labels, temperatures=(0.0, 1.0),
                               draft_length=2, num_paths=3, dtype="float32")
    models = types.SimpleNamespace(target=pair[0], draft=pair[1], tokenizer=CharTokenizer())
    results = bench.run_bench(config, str(tmp_path / "b.json"), pair=models,
                              prompts=[{"task_id": "t/0", "prompt": "abcabcab"}], plot=False)
    records = results["records"]
    for label in labels:
        assert records[f"{label}|T=0|t/0"]["tokens"] == records["target_only|T=0|t/0"]["tokens"]
        assert records[f"{label}|T=1|t/0"]["new_tokens"] == 8
    assert bench.parse_method("spechub", 4, 3).params == (("draft_length", 4),)  # no K: the hub pair
    assert methods.get("spechub").params["num_paths"] == 2
    assert bench.parse_method("khisti:K=2,s=5", 4, 3).param("truncation") == 5


def test_bad_parameters_are_clear_errors():
    with pytest.raises(ValueError, match="num_paths: method 'spechub' drafts exactly 2 paths"):
        methods.selection_method("spechub", 3, 3)
    with pytest.raises(TypeError, match="num_paths: not a parameter of method 'spechub'"):
        methods.get("spechub", draft_length=3, num_paths=3)
    with pytest.raises(ValueError, match="draft_length"):
        methods.get("khisti", draft_length=0)
    with pytest.raises(TypeError, match="node_budget: not a parameter of method 'optimal_is'"):
        methods.get("optimal_is", node_budget=5)
    with pytest.raises(ValueError, match="exactly K=2"):
        bench.parse_method("spechub:K=3", 4, 3)
    with pytest.raises(ValueError, match="bad parameter"):
        bench.parse_method("khisti:K=0", 4, 3)
    with pytest.raises(ValueError, match="name: not a top-down multi-draft selection rule"):
        multistep.TopDownSelection("gbv")
    with pytest.raises(TypeError, match="truncation: not a parameter of method 'spechub'"):
        methods.get("spechub", truncation=3)
    with pytest.raises(ValueError, match="truncation"):
        methods.get("khisti", truncation=0)
    with pytest.raises(ValueError, match="spechub takes no s"):
        bench.parse_method("spechub:s=3", 4, 3)


def test_is_selection_refuses_a_vocabulary_too_large_for_its_lp():
    V = multistep.MAX_LP_VOCAB + 1
    tree = types.SimpleNamespace(paths=torch.tensor([[[1], [2]]]), q=torch.full((1, 3, V), 1.0 / V),
                                 tokens=torch.tensor([[0, 1, 2]]))
    p = torch.full((1, 3, V), 1.0 / V, dtype=torch.float64)
    for name in ("khisti", "optimal_is"):
        with pytest.raises(ValueError, match=f"vocabulary: '{name}' .* V = {V} > MAX_LP_VOCAB"):
            multistep.TopDownSelection(name)(p, tree, None, 1.0)
    for name in ("khisti", "optimal_is"):
        with pytest.raises(ValueError, match=f"{name}:K=2,s=5"):
            multistep.TopDownSelection(name)(p, tree, None, 1.0)
