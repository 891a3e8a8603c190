"""SWE-bench-style records load unchanged and round-trip."""

from __future__ import annotations

import json

import pytest

from etude.tasks.task import Task, read_jsonl, write_jsonl

SWE_BENCH_RECORD = {
    "instance_id": "astropy__astropy-12907",
    "repo": "astropy/astropy",
    "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607",
    "problem_statement": "Modeling's `separability_matrix` does not compute separability...",
    "test_patch": "diff --git a/astropy/tests/test_x.py b/astropy/tests/test_x.py\n",
    "patch": "diff --git a/astropy/modeling/separable.py b/astropy/modeling/separable.py\n",
    # SWE-bench stores these lists as JSON text.
    "FAIL_TO_PASS": '["astropy/modeling/tests/test_separable.py::test_separable[compound_model6]"]',
    "PASS_TO_PASS": '["astropy/modeling/tests/test_separable.py::test_coord_matrix"]',
    "version": "4.3",
    "environment_setup_commit": "298ccb478e6bf092953bca67a3d29dc6c35f6752",
    "created_at": "2022-03-03T15:14:54Z",
    "hints_text": "",
}


def test_a_swe_bench_record_loads_and_round_trips(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps(SWE_BENCH_RECORD) + "\n")
    [task] = read_jsonl(source)
    assert task.id == "astropy__astropy-12907"
    assert task.fail_to_pass == (
        "astropy/modeling/tests/test_separable.py::test_separable[compound_model6]",
    )
    assert task.gold_patch.startswith("diff --git a/astropy/modeling/separable.py")
    assert task.extra["version"] == "4.3"
    out = tmp_path / "out.jsonl"
    write_jsonl(out, [task])
    written = json.loads(out.read_text())
    for key, value in SWE_BENCH_RECORD.items():
        if key in {"FAIL_TO_PASS", "PASS_TO_PASS"}:
            assert written[key] == json.loads(value)
        else:
            assert written[key] == value
    [again] = read_jsonl(out)
    assert again == task


def test_lists_stored_as_lists_load_too():
    record = {**SWE_BENCH_RECORD, "FAIL_TO_PASS": ["a::b"], "PASS_TO_PASS": []}
    task = Task.from_swe(record)
    assert task.fail_to_pass == ("a::b",) and task.pass_to_pass == ()


def test_a_broken_record_names_its_line(tmp_path):
    source = tmp_path / "bad.jsonl"
    source.write_text(json.dumps(SWE_BENCH_RECORD) + "\n" + json.dumps({"repo": "x"}) + "\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: task record lacks"):
        list(read_jsonl(source))
