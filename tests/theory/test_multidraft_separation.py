"""benchmarks/multidraft_separation.py: the paired intervals and the exact one-step ordering.

The paired t interval is checked against scipy.stats.ttest_rel's own interval on the same
differences; a method planted to equal the baseline plus a constant is resolved, one equal to it
is not. The exact part on constructed rows keeps the orderings the theory guarantees
(alpha* >= every rule, K drafts >= one).
"""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "multidraft_separation.py")


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("multidraft_separation", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def test_exact_one_step_ordering(script, tmp_path):
    rng = np.random.default_rng(1)
    rows = 3
    p = rng.dirichlet(np.ones(6), rows)
    q = rng.dirichlet(np.ones(6), rows)
    path = tmp_path / "rows.npz"
    np.savez(path, p=p[:, :5].astype(np.float32), q=q[:, :5].astype(np.float32), p_other=p[:, 5], q_other=q[:, 5],
             temperature=np.ones(rows, dtype=np.float32))
    out = script.one_step_ordering(str(path), 2)["mean_one_step_acceptance"]
    for rule in ("token", "nss", "rrs", "rrsw", "spectr"):
        assert out[rule] <= out["optimal_is"] + 1e-9  # alpha* bounds every rule with the same drafts
    assert out["token"] <= out["rrs"] + 1e-12  # a second draft never hurts recursive rejection
    assert out["optimal_is"] == out["global_resolution"]
    merged = script.one_step_ordering(str(path), 2, top_k=2)
    assert merged["tokens_per_row"] == "top 2 + 1 merged"


def test_cli_writes_json(script, tmp_path):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(_bench({"token": [4.0, 4.2, 3.9], "gbv:K=2": [4.1, 4.4, 4.0]})))
    out = tmp_path / "out.json"
    assert script.main(["--bench", str(bench), "--output", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [r["method"] for r in data["paired"]] == ["gbv:K=2"] and data["interval"] == "paired t, 95%"
    with pytest.raises(SystemExit, match="baseline"):
        script.main(["--bench", str(bench), "--baseline", "block", "--output", str(out)])
