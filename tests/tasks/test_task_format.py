"""SWE-bench-style records load unchanged and round-trip."""

from __future__ import annotations

import json

import pytest

from etude.tasks.materialize import TASKS_FILE
from etude.tasks.task import Task, TaskRecordError, read_jsonl, write_jsonl

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


def test_a_swe_gym_record_with_fields_of_its_own_loads(tmp_path):
    record = {
        **SWE_BENCH_RECORD,
        "FAIL_TO_PASS": ["tests/test_a.py::test_x"],
        "PASS_TO_PASS": None,
        "hints_text": None,
        "version": 4.3,
        "meta": {"is_lite": False, "failed_lite_validators": ["has_hint"]},
        "image_name": "swe-gym/astropy:latest",
    }
    task = Task.from_swe(record)
    assert task.pass_to_pass == () and task.extra["meta"]["is_lite"] is False
    assert task.setup.environment_setup_commit == SWE_BENCH_RECORD["environment_setup_commit"]
    assert Task.from_swe(task.to_swe()) == task


def test_an_install_specification_loads_from_install_config_or_the_top_level():
    rebench = {
        **SWE_BENCH_RECORD,
        "install_config": {
            "python": 3.9,  # a number in some exports
            "install": "python -m pip install -e .[test]",
            "pip_packages": ["pytest==7.4.0", "hypothesis"],
            "pre_install": ["apt-get install -y gcc"],
            "reqs_path": ["requirements/dev.txt"],
            "test_cmd": "pytest -rA",
            "log_parser": "parse_log_pytest",  # not read: kept and written back
        },
    }
    task = Task.from_swe(rebench)
    assert task.setup.python == "3.9"
    assert task.setup.pip_packages == ("pytest==7.4.0", "hypothesis")
    assert task.setup.reqs_path == ("requirements/dev.txt",)
    assert task.setup.pre_install == ("apt-get install -y gcc",)
    assert task.test_command == "pytest -rA"  # there when the record has no test_cmd
    written = task.to_swe()
    assert written["install_config"]["log_parser"] == "parse_log_pytest"
    assert Task.from_swe(written) == task

    inlined = {
        **SWE_BENCH_RECORD,
        "python": "3.6",
        "packages": "requirements.txt",
        "pip_packages": "numpy==1.19 pytest",  # older SWE-bench specs: one string
        "install": ["pip install -e .", "python setup.py build_ext -i"],
    }
    task = Task.from_swe(inlined)
    assert task.setup.python == "3.6" and task.setup.packages == "requirements.txt"
    assert task.setup.pip_packages == ("numpy==1.19", "pytest")
    assert task.setup.install == "pip install -e . && python setup.py build_ext -i"
    assert Task.from_swe(task.to_swe()) == task


def test_a_bundled_task_writes_back_as_it_was_read():
    # Run caches key on the written record: a task without a setup gains no field.
    record = json.loads(TASKS_FILE.read_text().splitlines()[0])
    assert Task.from_swe(record).to_swe() == record


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"FAIL_TO_PASS": "[not json"}, r"task 'astropy__astropy-12907': FAIL_TO_PASS: not a JSON"),
        ({"PASS_TO_PASS": [1, 2]}, r"'astropy__astropy-12907': PASS_TO_PASS: test ids must be"),
        ({"base_commit": "d16bfe0"}, r"'astropy__astropy-12907': base_commit: 'd16bfe0' is not"),
        ({"problem_statement": None}, r"'astropy__astropy-12907': problem_statement: expected"),
        ({"install_config": "pip install ."}, r"install_config: expected an object"),
        (
            {"install_config": {"pip_packages": 5}},
            r": install_config: pip_packages: expected a list",
        ),
        ({"environment_setup_commit": "main"}, r"environment_setup_commit: 'main' is not"),
        ({"instance_id": 7}, r"task record: instance_id: expected non-empty text"),
    ],
)
def test_a_bad_record_names_the_record_and_the_field(change, message):
    with pytest.raises(TaskRecordError, match=message):
        Task.from_swe({**SWE_BENCH_RECORD, **change})


def test_a_line_that_is_not_a_record_names_its_line(tmp_path):
    source = tmp_path / "bad.jsonl"
    source.write_text(json.dumps(SWE_BENCH_RECORD) + "\n\n{oops\n")
    with pytest.raises(TaskRecordError, match=r"bad\.jsonl:3: not JSON"):
        list(read_jsonl(source))
    source.write_text("[1, 2]\n")
    with pytest.raises(TaskRecordError, match=r"bad\.jsonl:1: a task record is a JSON object"):
        list(read_jsonl(source))
