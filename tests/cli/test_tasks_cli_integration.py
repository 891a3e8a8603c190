"""`etude tasks synth | verify | grade` as a user runs them (typer's runner: not a
terminal, so progress comes as lines), on real projects in real sandboxes."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from etude.cli.tasks import app
from etude.sandbox.bwrap import find_bwrap
from etude.tasks.materialize import TASKS_FILE
from etude.tasks.task import read_jsonl
from tests.conftest import skip_without_sandboxes
from tests.tasks.layouts import TEXTBITS, tar_sdist, write

pytestmark = pytest.mark.integration


def etude_tasks(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module", autouse=True)
def sandboxes():
    with skip_without_sandboxes():
        find_bwrap(None)


def test_synth_needs_out_and_never_writes_a_bundled_set(tmp_path):
    archive = tar_sdist(tmp_path, "tb-1.2.0", TEXTBITS)
    result = etude_tasks("synth", "--path", archive)
    assert result.exit_code == 2 and "--out" in result.output
    result = etude_tasks("synth", "--path", archive, "--out", TASKS_FILE)
    assert result.exit_code == 1 and "bundled task set" in result.output


def test_synth_verify_and_grade_a_project_from_its_sdist(tmp_path):
    archive = tar_sdist(tmp_path, "tb-1.2.0", TEXTBITS)
    out, cache = tmp_path / "mine.jsonl", tmp_path / "cache"
    result = etude_tasks(
        "synth", "--path", archive, "--out", out, "--per-project", "1", "--workers", "2"
    )
    assert result.exit_code == 0, result.output
    # Progress as lines: the baseline, what the plugins' options lost, each kept task.
    assert "textbits: 7 tests pass unmutated" in result.output
    assert "--cov=textbits" in result.output
    assert "textbits: kept textbits." in result.output
    assert "textbits: kept 1 of 1, tried " in result.output
    [task] = read_jsonl(out)
    assert task.repo == "textbits" and task.metadata["origin"]["file"] == "tb-1.2.0.tar.gz"

    result = etude_tasks("verify", "--tasks", out, "--cache", cache)
    assert result.exit_code == 1 and "pass it with --path" in result.output
    result = etude_tasks("verify", "--tasks", out, "--cache", cache, "--path", archive)
    assert result.exit_code == 0 and "1 of 1 tasks verified" in result.output, result.output

    result = etude_tasks("grade", out, task.id, "--gold", "--cache", cache, "--path", archive)
    assert result.exit_code == 0 and f"{task.id}: score 1" in result.output, result.output


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "nowhere", "no such file or directory"),
        (lambda d: write(d, {"a.txt": "x"}) / "a.txt", "not a directory or an sdist"),
        (lambda d: write(d / "lib", {"lib.py": "X = 1\n"}), "no test modules"),
        # Every test module fails to import: the suite cannot run; no test "failed".
        (lambda d: write(d / "lib", {"lib.py": "X = 1\n", "tests/test_lib.py": "import nope\n"}),
         "the suite could not run: tests/test_lib.py: ModuleNotFoundError"),
    ],
)  # fmt: skip
def test_unusable_projects_are_clear_errors(tmp_path, make, message):
    result = etude_tasks("synth", "--path", make(tmp_path), "--out", tmp_path / "out.jsonl")
    assert result.exit_code == 1
    assert message in result.output and "Traceback" not in result.output, result.output


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    """A bundled task, and a cache its repository is built in once for the module."""
    return next(read_jsonl(TASKS_FILE)), tmp_path_factory.mktemp("cache")


def grade(bundled, *args: str | Path):
    task, cache = bundled
    return etude_tasks("grade", "etude-mini", task.id, *args, "--cache", cache)


def outcomes(output: str, kind: str) -> list[str]:
    return [line.split()[0] for line in output.splitlines() if f"  {kind}  " in line]


def test_grade_the_gold_patch(bundled):
    task, _ = bundled
    result = grade(bundled, "--gold")
    assert result.exit_code == 0, result.output
    assert f"{task.id}: score 1\n" in result.output
    assert outcomes(result.output, "FAIL_TO_PASS") == ["passed"] * len(task.fail_to_pass)
    assert outcomes(result.output, "PASS_TO_PASS") == ["passed"] * len(task.pass_to_pass)
    assert f"fail_to_pass_passed = {len(task.fail_to_pass)}" in result.output


def test_grade_no_change(bundled):
    task, _ = bundled
    result = grade(bundled, "--empty")
    assert result.exit_code == 0 and f"{task.id}: score 0\n" in result.output
    assert set(outcomes(result.output, "FAIL_TO_PASS")) == {"FAILED"}
    assert "fail_to_pass_passed = 0" in result.output


def test_grade_a_patch_file(bundled, tmp_path):
    task, _ = bundled
    (tmp_path / "fix.diff").write_text(task.gold_patch)
    result = grade(bundled, "--patch", tmp_path / "fix.diff")
    assert result.exit_code == 0 and f"{task.id}: score 1\n" in result.output
    (tmp_path / "bad.diff").write_text("--- a/nothing.py\n+++ b/nothing.py\n@@ -1 +1 @@\n-x\n+y\n")
    result = grade(bundled, "--patch", tmp_path / "bad.diff")
    assert result.exit_code == 1 and "the patch does not apply" in result.output


def test_grade_an_unknown_task_or_no_patch_is_a_clear_error(bundled):
    result = etude_tasks("grade", "etude-mini", "etude-mini.nope", "--gold")
    assert result.exit_code == 1 and "no task 'etude-mini.nope' in etude-mini" in result.output
    result = grade(bundled)
    assert result.exit_code == 1 and "exactly one of --patch FILE, --gold, --empty" in result.output
