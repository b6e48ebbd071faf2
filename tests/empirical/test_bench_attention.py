"""Smoke test of benchmarks/bench_attention.py at tiny sizes: JSON schema, agreement of the three
attention layouts, resume, bad input. Timings are not checked (speed is measured by the benchmark,
on a quiet machine, never asserted in tests)."""

from __future__ import annotations

import json
import os

import pytest

from ..scripts import load_script

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "bench_attention.py")


@pytest.fixture(scope="module")
def bench():
    return load_script(SCRIPT)


def test_tiny_run_schema_agreement_and_resume(bench, tmp_path):
    out = str(tmp_path / "bench.json")
    args = ["--batches", "1,3", "--lengths", "4,9", "--new-tokens", "2", "--dtypes", "float32",
            "--heads", "4", "--kv-heads", "2", "--head-dim", "8", "--repeats", "1", "--out", out]
    payload = bench.main(args)
    with open(out) as handle:
        saved = json.load(handle)
    assert saved == json.loads(json.dumps(payload))
    assert saved["schema"] == bench.SCHEMA and saved["complete"] is True
    assert set(saved["host"]) >= {"cpu_capability", "cpu_flags", "cpu_model", "torch_threads"}
    assert set(saved["host"]["cpu_flags"]) == {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "amx_int8"}
    # equal: B = 1, 3 x S = 4, 9; ragged: B = 3 only
    assert sorted(r["key"] for r in saved["records"]) == sorted(
        ["float32|equal|B=1|S=4", "float32|equal|B=1|S=9", "float32|equal|B=3|S=4", "float32|equal|B=3|S=9",
         "float32|ragged|B=3|S=4", "float32|ragged|B=3|S=9"])
    for record in saved["records"]:
        assert set(record["variants"]) == set(bench.VARIANTS)
        for variant, values in record["variants"].items():
            assert values["median_s"] > 0 and values["prepare_s"] > 0 and values["repeats"] == 1
            assert values["max_abs_diff_vs_padded"] < 1e-5, (record["key"], variant)
        q, lengths = 2, record["row_lengths"]
        assert record["variants"]["packed_varlen"]["scores_per_head_derived"] == sum(q * (s + q) for s in lengths)
    summary = saved["summary"]["float32|equal|S=9"]
    assert [row[0] for row in summary["ms_by_batch"]["padded"]] == [1, 3] and summary["largest_batch"] == 3
    assert summary["relative_to_packed_varlen"]["packed_varlen"] == 1.0
    ragged = next(r for r in saved["records"] if r["key"] == "float32|ragged|B=3|S=9")
    assert ragged["row_lengths"] == [3, 6, 9]
    # a rerun resumes: nothing is measured again
    calls = []
    again = bench.run([1, 3], [4, 9], 2, ["float32"], 4, 2, 8, 1, out=out, log=calls.append)
    assert calls == [] and len(again["records"]) == 6
    kept = open(out).read()
    with pytest.raises(ValueError, match="output: .*fresh"):
        bench.run([1, 2], [4], 2, ["float32"], 4, 2, 8, 1, out=out)
    assert open(out).read() == kept  # a file of another configuration is left as it was


def test_planted_layout_bug_shows_in_the_agreement_column(bench, monkeypatch):
    """A dense mask that lets every row see every row's cache differs from padded (the recorded
    max_abs_diff_vs_padded is the bench's own correctness check)."""
    case = bench.make_case([3, 5], 2, 4, 2, 8, torch.float32)
    monkeypatch.setattr(bench, "dense_mask", lambda case: torch.zeros(1, 1, 4, 8 + 4))
    _, dense = bench.measure(case, "dense_block_diagonal", 1)
    _, padded = bench.measure(case, "padded", 1)
    assert float((dense - padded).abs().max()) > 1e-3


def test_bad_input(bench, tmp_path):
    out = str(tmp_path / "x.json")
    with pytest.raises(ValueError, match="batches"):
        bench.run([0], [4], out=out)
    with pytest.raises(ValueError, match="dtypes"):
        bench.run([1], [4], dtypes=["int64"], out=out)
    with pytest.raises(ValueError, match="heads"):
        bench.run([1], [4], heads=3, kv_heads=2, out=out)
    assert not os.path.exists(out)
