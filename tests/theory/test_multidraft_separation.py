"""benchmarks/multidraft_separation.py: the paired intervals and the exact one-step ordering.

The paired t interval is checked against scipy.stats.ttest_rel's own interval on the same
differences; a method planted to equal the baseline plus a constant is resolved, one equal to it
is not. The exact part on constructed rows keeps the orderings the theory guarantees
(alpha* >= every rule, K drafts >= one).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from ..scripts import load_script

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "multidraft_separation.py")


@pytest.fixture(scope="module")
def script():
    return load_script(SCRIPT)


def _bench(values):
    """A bench JSON with records {method: [BE per prompt]} at T = 1 (4 iterations each)."""
    records = {}
    for method, bes in values.items():
        for i, be in enumerate(bes):
            records[f"{method}|T=1|HumanEval/{i}"] = {"accepted_sum": (be - 1.0) * 4, "accepted_count": 4}
            records[f"{method}|T=0|HumanEval/{i}"] = {"accepted_sum": 0.0, "accepted_count": 4}
    return {"records": records}


def test_paired_interval_matches_scipy(script):
    from scipy import stats

    rng = np.random.default_rng(0)
    token = rng.uniform(3, 5, 12)
    other = token + rng.normal(0.05, 0.3, 12)
    values = script.per_prompt_block_efficiency(_bench({"token": token, "nss:K=2": other, "same": token,
                                                        "shifted": token + 0.5, "target_only": token * 0 + 1}))
    assert "target_only" not in values  # no draft is verified: not a rule to compare
    rows = {r["method"]: r for r in script.paired(values, "token")}
    ci = stats.ttest_rel(other, token).confidence_interval(0.95)
    assert rows["nss:K=2"]["ci_low"] == pytest.approx(ci.low, abs=1e-9)
    assert rows["nss:K=2"]["ci_high"] == pytest.approx(ci.high, abs=1e-9)
    assert rows["nss:K=2"]["prompts"] == 12
    assert rows["shifted"]["resolved"] and rows["shifted"]["mean_difference"] == pytest.approx(0.5)
    assert not rows["same"]["resolved"]
    assert rows["nss:K=2"]["p_value"] == pytest.approx(stats.ttest_rel(other, token).pvalue, abs=1e-12)
    assert rows["shifted"]["resolved_holm"] and not rows["same"]["resolved_holm"]
    d = other - token  # prompts_to_resolve: the n whose t half-width equals |mean(d)|
    t = stats.t.ppf(0.975, len(d) - 1)
    assert rows["nss:K=2"]["prompts_to_resolve"] == max(2, int(np.ceil((t * d.std(ddof=1) / abs(d.mean())) ** 2)))
    assert "prompts_to_resolve" not in rows["same"]  # no difference to resolve
    assert rows["shifted"].get("prompts_to_resolve", 2) == 2  # a constant shift: the fewest prompts


def test_holm_step_down(script):
    # m = 3: the smallest p-value against 0.05 / 3, the next against 0.05 / 2, the last against 0.05
    assert script.holm([0.01, 0.04, 0.03]) == [True, False, False]  # 0.03 > 0.025 stops it
    assert script.holm([0.001, 0.02, 0.04]) == [True, True, True]
    assert script.holm([0.02, 0.001, 0.04]) == [True, True, True]  # order of the input is kept
    assert script.holm([0.03, 0.03]) == [False, False]  # each below 0.05 alone, not as a family of 2
    assert script.holm([]) == []


def _rows_file(tmp_path, seed=2, rows=2, vocab=3):
    """An npz in real_pair_rows.py's layout: `rows` random T = 1 rows of `vocab` stored tokens and
    the merged rest of each distribution."""
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.ones(vocab + 1), rows), rng.dirichlet(np.ones(vocab + 1), rows)
    path = tmp_path / "rows.npz"
    np.savez(path, p=p[:, :vocab].astype(np.float32), q=q[:, :vocab].astype(np.float32), p_other=p[:, vocab],
             q_other=q[:, vocab], temperature=np.ones(rows, dtype=np.float32))
    return str(path)


def test_exact_one_step_ordering(script, tmp_path):
    path = _rows_file(tmp_path, seed=1, rows=3, vocab=5)
    out = script.one_step_ordering(path, 2)["mean_one_step_acceptance"]
    for rule in ("token", "nss", "rrs", "rrsw", "spectr"):
        assert out[rule] <= out["optimal_is"] + 1e-9  # alpha* bounds every rule with the same drafts
    assert out["token"] <= out["rrs"] + 1e-12  # a second draft never hurts recursive rejection
    assert out["optimal_is"] == out["global_resolution"]
    merged = script.one_step_ordering(path, 2, top_k=2)
    assert merged["tokens_per_row"] == "top 2 + 1 merged"


def test_without_replacement_optimum_bounds_rrsw(script, tmp_path):
    """The LP optimum for K distinct draws is asked for by name only, and bounds the rule that drafts
    that way (RRS without replacement) on every row; it is not alpha* of i.i.d. drafts."""
    path = _rows_file(tmp_path, seed=3, rows=4, vocab=4)
    assert "without_replacement_optimum" not in script.one_step_ordering(path, 2)["mean_one_step_acceptance"]
    data = np.load(path)
    for r in range(4):
        single = tmp_path / f"row{r}.npz"
        np.savez(single, **{key: data[key][r:r + 1] for key in data.files})
        out = script.one_step_ordering(str(single), 2, rules=("rrsw", "optimal_is", "without_replacement_optimum"))
        values = out["mean_one_step_acceptance"]
        assert values["rrsw"] <= values["without_replacement_optimum"] + 1e-9
        assert values["without_replacement_optimum"] != pytest.approx(values["optimal_is"], abs=1e-6)


def test_cli_writes_json(script, tmp_path):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(_bench({"token": [4.0, 4.2, 3.9], "gbv:K=2": [4.1, 4.4, 4.0]})))
    out = tmp_path / "out.json"
    assert script.main(["--bench", str(bench), "--output", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [r["method"] for r in data["paired"]] == ["gbv:K=2"] and data["interval"] == "paired t, 95%"
    with pytest.raises(SystemExit, match="baseline"):
        script.main(["--bench", str(bench), "--baseline", "block", "--output", str(out)])


def test_stationary_prediction_meets_the_closed_forms(script, tmp_path):
    from verispec.theory import closed_forms

    path = _rows_file(tmp_path)
    data = np.load(path)
    # token at L = 3 on a context-free pair: Leviathan et al.'s (1 - a^(L+1)) / (1 - a), a = sum min(p, q)
    out = script.stationary_prediction(path, ["token", "optimal_is:L=1"], 3, 2, top_k=1)
    expected = []
    for r in range(2):
        p, q = script.truncated_row(data, r, 1)
        expected.append((float(closed_forms.leviathan_block_efficiency(np.minimum(p, q).sum(), 3)),
                         1 + float(closed_forms.optimal_multidraft_acceptance(p, q, 2))))
    assert out["mean_block_efficiency"]["token"] == pytest.approx(np.mean([e[0] for e in expected]), abs=1e-12)
    # one step of K = 2 i.i.d. drafts with the optimal selection: 1 + alpha*
    assert out["mean_block_efficiency"]["optimal_is:L=1"] == pytest.approx(np.mean([e[1] for e in expected]),
                                                                            abs=1e-12)
    assert out["mean_difference"]["optimal_is:L=1"] == pytest.approx(
        np.mean([e[1] - e[0] for e in expected]), abs=1e-12)
    assert out["rows"] == 2 and out["tokens_per_row"] == "top 1 + 1 merged"


def test_stationary_prediction_orders_rules_as_the_theory_does(script, tmp_path):
    path = _rows_file(tmp_path, seed=3)
    out = script.stationary_prediction(path, ["nss", "spectr", "optimal_is", "global_resolution"], 2, 2,
                                       top_k=2, n_jobs=2)["mean_block_efficiency"]
    assert set(out) == {"token", "nss", "spectr", "optimal_is", "global_resolution"}  # the baseline joins
    # context-free pair: a node's acceptance depends only on how many paths reach it (>= 1), and each
    # of these rules accepts at least token's sum min(p, q) there
    for rule in ("spectr", "optimal_is", "global_resolution"):
        assert out["token"] < out[rule]
    # both reach alpha* at every node, yet at L = 2 they differ: how often BOTH paths carry the
    # accepted token (and so reach the next node) is not fixed by the one-step acceptance
    assert abs(out["optimal_is"] - out["global_resolution"]) > 1e-6


def test_measured_and_predicted_side_by_side(script):
    paired = [{"method": "a", "mean_difference": 0.1, "ci_low": -0.1, "ci_high": 0.3},
              {"method": "b", "mean_difference": -0.5, "ci_low": -0.7, "ci_high": -0.3},
              {"method": "c", "mean_difference": 0.0}]  # one prompt: no interval
    rows = script.compare(paired, {"mean_difference": {"a": 0.25, "b": 0.2, "c": 0.0}})
    assert [(r["method"], r["prediction_inside_interval"]) for r in rows] == [("a", True), ("b", False)]


def test_rank_agreement_of_the_two_orderings(script):
    rows = [{"measured_difference": m, "predicted_difference": p, "prediction_inside_interval": inside}
            for m, p, inside in ((0.1, 0.2, True), (-0.3, 0.05, False), (0.4, 0.3, True), (0.0, 0.1, True))]
    agree = script.rank_agreement(rows)
    assert agree["spearman_rho"] == pytest.approx(1.0) and agree["inside_interval"] == 3 and agree["rules"] == 4
    flipped = [{**r, "predicted_difference": -r["predicted_difference"]} for r in rows]
    assert script.rank_agreement(flipped)["spearman_rho"] == pytest.approx(-1.0)
    assert "spearman_rho" not in script.rank_agreement(rows[:2])  # too few rules to rank


def test_cli_stationary_part(script, tmp_path):
    bench = tmp_path / "bench.json"
    data = _bench({"token": [4.0, 4.2, 3.9], "spectr": [4.1, 4.4, 4.0], "nss": [3.5, 3.9, 3.6]})
    data["config"] = {"draft_length": 2}
    bench.write_text(json.dumps(data))
    out = tmp_path / "out.json"
    args = ["--bench", str(bench), "--output", str(out), "--stationary-top-k", "1"]
    with pytest.raises(SystemExit, match="needs --rows"):
        script.main(args)
    assert script.main([*args, "--rows", _rows_file(tmp_path)]) == 0
    written = json.loads(out.read_text())
    assert written["stationary_prediction"]["draft_length"] == 2  # the bench file's L
    assert {r["method"] for r in written["measured_vs_stationary"]} == {"spectr", "nss"}
    assert written["rank_agreement"] == {"rules": 2}  # two rules: nothing to rank
    assert written["fields"]["stationary_prediction"].startswith("derived")
    assert written["fields"]["paired.prompts_to_resolve"].startswith("derived")
