"""One term per idea (issue 45): every renamed public name still works under its old name, with a
DeprecationWarning, and the old names are gone from verispec's own signatures."""

import ast
import pathlib
import types
import warnings

import numpy as np
import pytest

from verispec.reference import deprecation, lossy, methods, models, registry
from verispec.reference.draft_sets import draft_set_law
from verispec.reference.drafters import greedy_draft, opt_tree, opt_tree_structure
from verispec.reference.randomness import Sampler
from verispec.reference.verifiers import global_resolution, spectr_rho
from verispec.theory import closed_forms, frontier, trees

ROOT = pathlib.Path(__file__).resolve().parents[1] / "verispec"
P, Q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])


def _same(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return np.allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float))


NUM_DRAFTS = [(closed_forms.optimal_multidraft_acceptance, (P, Q)), (closed_forms.nss_acceptance, (P, Q)),
              (closed_forms.rrs_acceptance, (P, Q)), (closed_forms.spectr_acceptance, (P, Q)),
              (closed_forms.rrsw_acceptance, (P, Q)), (closed_forms.greedy_draft_acceptance, (P, Q)),
              (closed_forms.sorted_prefix_dual, (P, Q)), (spectr_rho, (P, Q)), (draft_set_law, (Q,)),
              (global_resolution.resolution_targets, (P, Q)), (lambda *a, **k: global_resolution.resolution(
                  *a, **k).law, (P, Q)), (lambda *a, **k: frontier.one_step_acceptance("spectr", *a, **k), (P, Q))]


@pytest.mark.parametrize("fn, args", NUM_DRAFTS)
def test_num_drafts_keyword_still_works_and_warns(fn, args):
    with pytest.warns(DeprecationWarning, match="num_drafts"):
        old = fn(*args, num_drafts=2)
    assert _same(old, fn(*args, num_paths=2))


def test_renamed_keywords_rejects_both_names_and_leaves_positional_calls_silent():
    with pytest.raises(TypeError, match="both"):
        closed_forms.nss_acceptance(P, Q, num_drafts=2, num_paths=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        closed_forms.nss_acceptance(P, Q, 2)
    with pytest.warns(DeprecationWarning, match="a="):
        assert deprecation.renamed_keywords(a="b")(lambda b: b)(a=3) == 3


def test_greedy_draft_and_resolution_attribute_aliases():
    with pytest.warns(DeprecationWarning, match="num_drafts"):
        old = greedy_draft(Q, num_drafts=2, rand=Sampler(0))
    assert old[0] == greedy_draft(Q, 2, Sampler(0))[0]
    found = global_resolution.Resolution(P, Q, 3)
    with pytest.warns(DeprecationWarning, match="num_paths"):
        assert found.num_drafts == found.num_paths == 3


def test_lp_multidraft_keyword():
    lp = pytest.importorskip("verispec.theory.lp")
    with pytest.warns(DeprecationWarning, match="num_drafts"):
        assert lp.multidraft(P, Q, num_drafts=2).value == pytest.approx(lp.multidraft(P, Q, num_paths=2).value)


THRESHOLDS = [("opt_tree", dict(node_budget=3), "gain_threshold", 0.1),
              ("adaptive", dict(draft_length=2), "confidence_threshold", 0.3),
              ("hybrid", dict(draft_length=2), "confidence_threshold", 0.3),
              ("fsd", dict(draft_length=2), "divergence_threshold", 0.2)]


@pytest.mark.parametrize("name, params, new, value", THRESHOLDS)
def test_threshold_keyword_still_works_and_warns(name, params, new, value):
    assert registry.default(name, new) is not None and "threshold" not in registry.spec(name).defaults("torch")
    with pytest.warns(DeprecationWarning, match="threshold"):
        assert methods.get(name, threshold=value, **params).params[new] == value  # through the registry
    factory = registry.resolve_factory(registry.spec(name).reference)
    with pytest.warns(DeprecationWarning, match="threshold"):
        assert factory(threshold=value, **params).params[new] == value  # the factory itself


def test_threshold_aliases_of_drafters_theory_and_closed_forms():
    with pytest.warns(DeprecationWarning):
        assert opt_tree(3, threshold=0.2).params["gain_threshold"] == 0.2
    with pytest.warns(DeprecationWarning):
        assert opt_tree_structure(lambda u: Q, 3, threshold=0.0, max_depth=2) == opt_tree_structure(
            lambda u: Q, 3, 0.0, 2)
    draft = models.table({(): list(Q)}, default=list(Q), vocab_size=3)
    with pytest.warns(DeprecationWarning):
        assert trees.opt_tree_layerwise(draft, (), 3, threshold=0.0) == trees.opt_tree_layerwise(draft, (), 3, 0.0)
    with pytest.warns(DeprecationWarning, match="threshold"):
        old = lossy.one_step("fsd", P, Q, threshold=0.5, divergence="tv")
    assert old == lossy.one_step("fsd", P, Q, divergence_threshold=0.5, divergence="tv")


def test_opt_tree_declares_no_branching():
    assert "branching" not in registry.spec("opt_tree").defaults("torch")
    assert all("branching" in registry.spec(name).defaults("torch") for name in ("kary", "eagle", "chain_tree"))


def test_bench_key_K_of_a_phrase_pool_is_now_C():
    bench = pytest.importorskip("verispec.bench")
    assert registry.spec("ouroboros").keys["C"] == "num_candidates" and "K" not in registry.spec("ouroboros").keys
    new = bench.parse_method("ouroboros:C=1,W=0", 4, 2)
    with pytest.warns(DeprecationWarning, match="C="):
        old = bench.parse_method("ouroboros:K=1,W=0", 4, 2)
    assert old.params == new.params and old.label == "ouroboros:K=1,W=0"  # labels are kept as given
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert bench.parse_method("gbv:K=3", 4, 2).param("num_paths") == 3  # K is num_paths, silently


def test_torch_aliases_num_accepted_and_num_drafts():
    torch = pytest.importorskip("torch")
    from verispec.empirical.drafters.greedy_paths import greedy_draft as torch_greedy
    from verispec.empirical.verifiers.common import RuleOutput
    from verispec.empirical.verifiers.multidraft import spectr_rho as torch_rho
    from verispec.empirical.verifiers.nodes import Verdict
    tau = torch.tensor([2, 0])
    verdict, out = Verdict(torch.zeros(2, 3), tau, tau), RuleOutput(tau, tau, tau, tau)
    for value in (verdict, out):
        with pytest.warns(DeprecationWarning, match="tau"):
            assert value.num_accepted is value.tau
    p, q = torch.from_numpy(P)[None], torch.from_numpy(Q)[None]  # [1, V]
    with pytest.warns(DeprecationWarning, match="num_drafts"):
        assert torch.equal(torch_rho(p, q, num_drafts=2), torch_rho(p, q, 2))
    with pytest.warns(DeprecationWarning, match="num_drafts"):
        old = torch_greedy(q, num_drafts=2, u=torch.tensor([0.3], dtype=torch.float64))
    assert all(torch.equal(a, b) for a, b in zip(old, torch_greedy(q, 2, torch.tensor([0.3], dtype=torch.float64))))


def test_torch_threshold_keywords():
    pytest.importorskip("torch")
    from verispec.empirical import methods as torch_methods
    from verispec.empirical.drafters.adaptive import adaptive_method
    with pytest.warns(DeprecationWarning, match="threshold"):
        assert torch_methods.get("adaptive", threshold=0.3).params["confidence_threshold"] == 0.3
    with pytest.warns(DeprecationWarning, match="threshold"):
        assert adaptive_method(threshold=0.2).params["confidence_threshold"] == 0.2
    with pytest.warns(DeprecationWarning, match="threshold"):
        assert torch_methods.tree_method("opt_tree", threshold=0.1).params["gain_threshold"] == 0.1


def test_batched_implementation_ems_is_packed(monkeypatch):
    pytest.importorskip("torch")
    from verispec.bench import batched
    seen = []
    monkeypatch.setattr(batched, "decode", lambda *args, storage, **kw: seen.append(storage))
    pair, config = types.SimpleNamespace(target=None, draft=None), types.SimpleNamespace(
        max_new_tokens=1, draft_length=2, seed=0)
    batched.run_batch("block/packed", pair, [], config, 0.0)
    with pytest.warns(DeprecationWarning, match="ems"):
        batched.run_batch("block/ems", pair, [], config, 0.0)
    assert seen == ["packed", "packed"] and batched.IMPLEMENTATIONS == ("vanilla", "packed")


def _parameters(tree):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            yield node, [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x]


def test_num_drafts_is_no_parameter_name_in_verispec():
    planted = 'def f(p, *, num_drafts=2): pass\n@renamed_keywords(num_drafts="num_paths")\ndef g(num_paths): pass'
    assert [names for _, names in _parameters(ast.parse(planted))] == [["p", "num_drafts"], ["num_paths"]]
    found = [f"{path.relative_to(ROOT.parent)}:{node.lineno}" for path in sorted(ROOT.rglob("*.py"))
             for node, names in _parameters(ast.parse(path.read_text())) if "num_drafts" in names]
    assert not found, f"num_drafts is a parameter (use num_paths; the old keyword lives in renamed_keywords): {found}"


def test_no_registered_parameter_is_called_threshold():
    assert all(p.name != "threshold" for entry in registry.REGISTRY.values() for p in entry.params)

