"""benchmarks/against_peer.py: the runner against the fastest peer setting per file, temperature and
measure, per-prompt Student-t intervals, and the pooled ratio over files, on hand-made records
whose ratios are known exactly."""

from __future__ import annotations

import json
import math

import pytest
from scipy import stats

from .scripts import load_script

SCRIPT = "benchmarks/against_peer.py"


@pytest.fixture(scope="module")
def script():
    return load_script(SCRIPT)


def _record(tokens, decode_s, wall_s, decode_tokens=None):
    return {"new_tokens": tokens, "decode_tokens": tokens - 2 if decode_tokens is None else decode_tokens,
            "decode_s": decode_s, "wall_s": wall_s}


def _file(tmp_path, name, rows):
    """A bench file holding rows {(label, T, task): record}."""
    path = tmp_path / name
    path.write_text(json.dumps({"records": {f"{label}|T={T:g}|{task}": r for (label, T, task), r in rows.items()}}))
    return str(path)


def _records(path):
    with open(path) as handle:
        return json.load(handle)["records"]


# Decode (new tokens less 2): hf:a is the faster peer (10 tokens in 1 + 2 s against 2 + 2 s); end
# to end hf:b is (14 tokens in 1 + 1 s against 3 + 3 s). Ours: decode 10 tokens in 0.5 + 1.5 s, end
# to end 14 in 1 + 2 s.
ROWS = {("hf:a", 0.0, "p0"): _record(8, 1.0, 3.0), ("hf:a", 0.0, "p1"): _record(6, 2.0, 3.0),
        ("hf:b", 0.0, "p0"): _record(8, 2.0, 1.0), ("hf:b", 0.0, "p1"): _record(6, 2.0, 1.0),
        ("mine", 0.0, "p0"): _record(8, 0.5, 1.0), ("mine", 0.0, "p1"): _record(6, 1.5, 2.0),
        ("other", 0.0, "p0"): _record(8, 9.0, 9.0)}


def test_the_fastest_peer_per_measure_and_the_exact_ratios(tmp_path, script):
    runs = script.records_by_runner(_records(_file(tmp_path, "a.json", ROWS)))
    decode = script.compare(runs, "mine", 0.0, "decode")
    assert decode["peer"] == "hf:a" and decode["prompts"] == 2
    assert decode["ratio"] == pytest.approx((10 / 2.0) / (10 / 3.0), abs=1e-12)
    assert decode["values"] == pytest.approx([(6 / 0.5) / (6 / 1.0), (4 / 1.5) / (4 / 2.0)], abs=1e-12)
    e2e = script.compare(runs, "mine", 0.0, "end_to_end")
    assert e2e["peer"] == "hf:b"
    assert e2e["ratio"] == pytest.approx((14 / 3.0) / (14 / 2.0), abs=1e-12)
    # planted: against the slower peer the decode ratio would be another number
    slower = (10 / 2.0) / (10 / 4.0)
    assert not math.isclose(decode["ratio"], slower)


def test_the_interval_is_students_t(script):
    values = [1.0, 1.2, 0.9, 1.4, 1.1]
    mean, low, high = script.interval(values)
    expected = stats.t.interval(0.95, len(values) - 1, loc=stats.tmean(values), scale=stats.sem(values))
    assert (low, high) == pytest.approx(expected, abs=1e-12) and mean == pytest.approx(1.12, abs=1e-12)
    assert all(math.isnan(v) for v in script.interval([2.0])[1:])


def test_pooled_over_files_uses_each_files_own_peer(tmp_path, script):
    second = {("hf:a", 0.0, "q0"): _record(10, 4.0, 5.0), ("hf:b", 0.0, "q0"): _record(10, 1.0, 5.0),
              ("mine", 0.0, "q0"): _record(10, 2.0, 4.0)}
    paths = [_file(tmp_path, "a.json", ROWS), _file(tmp_path, "b.json", second)]
    result = script.report(paths, "mine")
    assert result["files"][paths[1]][0.0]["decode"]["peer"] == "hf:b"
    # decode: ours 10 + 8 tokens in 2 + 2 s; the peers' (hf:a in a, hf:b in b) 10 + 8 in 3 + 1 s
    assert result["pooled"][0.0]["decode"]["ratio"] == pytest.approx((18 / 4.0) / (18 / 4.0), abs=1e-12)
    assert result["pooled"][0.0]["decode"]["prompts"] == 3
    assert any("pooled T=0 decode: 1.000x (3 prompts)" in line for line in script.lines(result))


def test_missing_runner_or_peer_is_a_clear_error(tmp_path, script):
    runs = script.records_by_runner(_records(_file(tmp_path, "a.json", ROWS)))
    with pytest.raises(ValueError, match="runner"):
        script.compare(runs, "absent", 0.0, "decode")
    with pytest.raises(ValueError, match="peer"):
        script.compare(runs, "mine", 0.0, "decode", peer="vllm")
    with pytest.raises(ValueError, match="runner"):
        script.report([_file(tmp_path, "a.json", ROWS)], "absent")


def test_main_prints_and_writes_the_report(tmp_path, script, capsys):
    out = tmp_path / "report.json"
    result = script.main([_file(tmp_path, "a.json", ROWS), "--runner", "mine", "--json", str(out)])
    assert "hf:a" in capsys.readouterr().out
    assert json.loads(out.read_text())["runner"] == result["runner"] == "mine"
