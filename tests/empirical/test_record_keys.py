"""Record keys of the bench's results files (`verispec.bench.records.RecordKey`): the text the bench
writes and the fields the reports and benchmark scripts read back are one format, for the bench
("label|T=t|task") and the batched bench ("label|B=b|T=t|index"), and every key of every committed
results file reads back to its own text."""

from __future__ import annotations

import glob
import json
import os

import pytest

pytest.importorskip("torch")

from verispec.bench.records import (RecordKey, batched_record_key, method_key, record_key,  # noqa: E402
                                     records_by_runner)

RESULTS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "results")


def test_a_bench_key_reads_back_to_its_fields():
    text = record_key("adaptive:dq=8,dv=32768,v=block,df=lean", 1, "HumanEval/135")
    assert text == "adaptive:dq=8,dv=32768,v=block,df=lean|T=1|HumanEval/135"
    key = RecordKey.parse(text)
    assert (key.label, key.temperature, key.task, key.batch_size) == \
        ("adaptive:dq=8,dv=32768,v=block,df=lean", 1.0, "HumanEval/135", None)
    assert str(key) == text and text.startswith(method_key(key.label, key.temperature) + "|")
    assert str(RecordKey.parse("hf:dq=8|T=0.7|t/0")) == "hf:dq=8|T=0.7|t/0"


def test_a_batched_key_reads_back_to_its_fields():
    text = batched_record_key("block", 4, 0.0, 3)
    assert text == "block|B=4|T=0|3"
    key = RecordKey.parse(text)
    assert (key.label, key.temperature, key.task, key.batch_size) == ("block", 0.0, "3", 4)
    assert str(key.relabelled("target_only")) == "target_only|B=4|T=0|3"


def test_records_group_by_runner_and_temperature():
    records = {record_key("hf", 0, "t/0"): {"n": 1}, record_key("hf", 1, "t/0"): {"n": 2},
               record_key("hf", 0, "t/1"): {"n": 3}, record_key("block", 0, "t/0"): {"n": 4}}
    assert records_by_runner(records) == {("hf", 0.0): {"t/0": {"n": 1}, "t/1": {"n": 3}},
                                          ("hf", 1.0): {"t/0": {"n": 2}}, ("block", 0.0): {"t/0": {"n": 4}}}
    with pytest.raises(ValueError, match="key"):
        records_by_runner({"hf|t/0": {}})


@pytest.mark.parametrize("bad", ["block", "block|T=x|t", "block|0|t", "block|B=2|t", "block|B=x|T=0|1",
                                 "block|T=0|t|extra"])
def test_other_text_is_refused_naming_the_key(bad):
    with pytest.raises(ValueError, match="key"):
        RecordKey.parse(bad)


def test_every_committed_results_key_reads_back_to_its_own_text():
    checked = 0
    for path in sorted(glob.glob(os.path.join(RESULTS, "*.json"))):
        with open(path) as handle:
            results = json.load(handle)
        records = results.get("records") if isinstance(results, dict) else None
        if not isinstance(records, dict) or not all("|T=" in key for key in records):
            continue  # not a bench file (other scripts keep other records)
        for text in records:
            assert str(RecordKey.parse(text)) == text, (path, text)
            checked += 1
    assert checked > 1000  # the committed bench files hold thousands of records
