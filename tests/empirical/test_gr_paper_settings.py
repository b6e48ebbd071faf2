"""benchmarks/gr_paper_settings.py: Global Resolution at its paper's settings.

The measurement on seeded rows (the realised acceptance equals the closed form alpha*, and a
resolution built for the wrong number of drafts is caught), the top-k cut, and the run end to end on
tiny random models (rows from `real_pair_rows.full_rows`, records, resume, another configuration).
"""

from __future__ import annotations

import json
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ..scripts import load_script  # noqa: E402
from .test_bench import CharTokenizer  # noqa: E402
from .test_decode_tiny import tiny  # noqa: E402

settings = load_script("benchmarks/gr_paper_settings.py")


def rows(V: int, seed: int):
    """A target row and a nearby draft row [V] (float64), peaked as a model's."""
    rng = np.random.default_rng(seed)
    logits = 3 * rng.standard_normal(V)
    p = np.exp(logits - logits.max())
    q = np.exp(logits + 0.7 * rng.standard_normal(V) - logits.max())
    return p / p.sum(), q / q.sum()


def test_truncate_top_k_keeps_the_k_most_likely_ties_to_the_lower_id():
    q = np.array([0.1, 0.3, 0.1, 0.3, 0.2])
    cut = settings.truncate_top_k(q, 3)
    assert np.flatnonzero(cut).tolist() == [1, 3, 4]
    assert cut.sum() == pytest.approx(1.0, abs=1e-15)
    assert np.allclose(cut[[1, 3, 4]], np.array([0.3, 0.3, 0.2]) / 0.8)
    assert settings.truncate_top_k(q, 4)[[0, 2]] == pytest.approx([0.1 / 0.9, 0.0], abs=1e-15)  # tie: lower id
    assert settings.truncate_top_k(q, None) is q and settings.truncate_top_k(q, 5) is q
    with pytest.raises(ValueError, match="top_k"):
        settings.truncate_top_k(q, 0)


@pytest.mark.parametrize("top_k", [10, 100, None])
@pytest.mark.parametrize("num_drafts", [2, 4, 5])
def test_realised_acceptance_equals_alpha_star(top_k, num_drafts):
    p, q = rows(3000, seed=num_drafts)
    q = settings.truncate_top_k(q, top_k)
    out = settings.measure_node(p, q, num_drafts, np.random.default_rng(0))
    assert abs(out["acceptance"] - out["alpha_star"]) <= 1e-10
    assert out["winner_sum_error"] <= 1e-12
    assert out["drafted_tokens"] == (top_k or 3000)
    assert 0 < out["greedy"] <= 1 and out["build_ms"] > 0 and out["winner_ms"] > 0


def test_a_resolution_for_the_wrong_number_of_drafts_is_caught(monkeypatch):
    """Planted: a resolution built for n - 1 drafts realises another law, and the comparison with
    the closed form (computed apart from the realisation) shows it."""
    p, q = rows(3000, seed=1)
    right = settings.measure_node(p, q, 4, np.random.default_rng(0))
    real = settings.Resolution
    monkeypatch.setattr(settings, "Resolution", lambda p_, q_, n: real(p_, q_, n - 1))
    wrong = settings.measure_node(p, q, 4, np.random.default_rng(0))
    assert abs(right["acceptance"] - right["alpha_star"]) <= 1e-10
    assert abs(wrong["acceptance"] - wrong["alpha_star"]) > 1e-4


def test_run_end_to_end_on_tiny_models_and_resume(monkeypatch, tmp_path):
    from verispec.bench import prompts, weights

    pair = types.SimpleNamespace(target=tiny(64, 0, head_scale=4.0), draft=tiny(64, 0, noise=0.1, head_scale=4.0),
                                 tokenizer=CharTokenizer(64))
    monkeypatch.setattr(weights, "load_pair", lambda **kw: pair)
    monkeypatch.setattr(prompts, "humaneval_prompts", lambda n: [
        {"task_id": f"t/{i}", "prompt": text} for i, text in enumerate(["def f(x):\n    return", "abcabc"][:n])])
    out = str(tmp_path / "gr.json")
    argv = ["--prompts", "2", "--positions", "3", "--top-k", "10,none", "--num-drafts", "2,4", "--dtype", "float32",
            "--output", out]
    assert settings.main(argv) == 0
    first = json.load(open(out))
    assert len(first["records"]) == 2 * 3 * 4
    assert set(first["summary"]) == {"top_k=10,n=2", "top_k=10,n=4", "top_k=none,n=2", "top_k=none,n=4"}
    for row in first["summary"].values():
        assert row["rows"] == 6 and row["acceptance_minus_alpha_star_max"] <= 1e-10
    assert first["claims"]["source"].startswith("Thomas & Pal, arXiv 2511.15898")
    assert "scikit_learn" in first["environment"]
    assert first["command"].endswith(" ".join(argv))  # the invocation given, not the test runner's

    # resume: every record is there, so nothing is decoded or measured again
    monkeypatch.setattr(settings, "measure_node", lambda *a: pytest.fail("measured again"))
    assert settings.main(argv) == 0
    assert json.load(open(out))["records"] == first["records"]

    # another configuration starts afresh: the old records are not mixed in
    monkeypatch.undo()
    monkeypatch.setattr(weights, "load_pair", lambda **kw: pair)
    monkeypatch.setattr(prompts, "humaneval_prompts", lambda n: [{"task_id": "t/0", "prompt": "abc"}][:n])
    assert settings.main(["--prompts", "1", "--positions", "2", "--top-k", "10", "--num-drafts", "2",
                          "--dtype", "float32", "--output", out]) == 0
    again = json.load(open(out))
    assert len(again["records"]) == 2 and again["config"]["positions"] == 2
