"""`etude tasks synth | materialize | verify | grade | hints` as a user runs them (typer's
runner: not a terminal, so progress comes as lines), on real projects and SWE-bench-style
records in real sandboxes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from etude.cli.tasks import app
from etude.sandbox.bwrap import find_bwrap
from etude.tasks.materialize import TASKS_FILE
from etude.tasks.task import read_jsonl
from tests.conftest import skip_without_sandboxes
from tests.tasks.layouts import (
    BROKEN_CONFTEST,
    OLD_HOOK_CONFTEST,
    SELF_VERSIONED,
    TEXTBITS,
    tar_sdist,
    write,
    write_statbits,
)
from tests.tasks.tiny_projects import tinydep_wheelhouse
from tests.tasks.upstream import git

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
    assert f"verifying 1/1 {task.id}: ok" in result.output  # a line per task off a terminal

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
        # pytest stops before collecting: it says only "usage error" or a traceback.
        (lambda d: write(d / "lib", BROKEN_CONFTEST),
         "conftest 'tests/conftest.py' does not import: ModuleNotFoundError: No module named "
         "'not_an_installed_module' (a dependency the suite's Python lacks: build the project "
         "an environment with --environment"),
        (lambda d: write(d / "sv", SELF_VERSIONED),
         "PackageNotFoundError: No package metadata was found for selfversion (the project "
         "reads its own installed package metadata"),
    ],
)  # fmt: skip
def test_unusable_projects_are_clear_errors(tmp_path, make, message):
    result = etude_tasks("synth", "--path", make(tmp_path), "--out", tmp_path / "out.jsonl")
    assert result.exit_code == 1
    assert message in result.output and "Traceback" not in result.output, result.output


@pytest.mark.skipif(int(pytest.__version__.split(".")[0]) < 9, reason="pytest 9 refuses it")
def test_a_hook_of_an_older_pytest_is_said_to_be_one(tmp_path):
    result = etude_tasks("synth", "--path", write(tmp_path / "lib", OLD_HOOK_CONFTEST),
                         "--out", tmp_path / "out.jsonl")  # fmt: skip
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "PluginValidationError: Plugin 'tests/conftest.py' for hook 'pytest_ignore_collect'" in (
        result.output
    )
    assert f"do not work with pytest {pytest.__version__}" in result.output


def test_synth_a_project_whose_tests_need_a_package_etude_lacks(tmp_path):
    """Without an environment the tests that import it are left out, and said so; with one
    built from a wheelhouse they all count, and the tasks record what it installed."""
    project, out = write_statbits(tmp_path / "statbits"), tmp_path / "stats.jsonl"
    result = etude_tasks("synth", "--path", project, "--out", out, "--per-project", "5",
                         "--max-tries", "2", "--workers", "2")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "statbits: 3 tests pass unmutated" in result.output
    assert "test modules need what is not installed: tinydep (1 modules)" in result.output
    assert "tried 2 of 2" in result.output  # --max-tries bounds the work

    wheelhouse = tinydep_wheelhouse(tmp_path)
    result = etude_tasks("synth", "--path", project, "--out", out, "--per-project", "1",
                         "--wheelhouse", wheelhouse, "--pip-package", "tinydep>=1.0",
                         "--cache", tmp_path / "cache", "--workers", "2")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "statbits: 5 tests pass unmutated" in result.output
    assert "not installed" not in result.output
    [task] = read_jsonl(out)
    assert task.setup.pip_packages == ("tinydep>=1.0",)
    # One environment for the baseline and every mutant.
    [environment] = [p for p in (tmp_path / "cache" / "envs").iterdir() if p.is_dir()]
    assert environment.name.startswith("statbits@")
    # The task says its tests ran in an environment: verify and grade grade it in its
    # project's (the one synth built, found in the same cache); without, the missing
    # import fails it.
    given = ("--path", project, "--cache", tmp_path / "cache", "--wheelhouse", wheelhouse)
    result = etude_tasks("verify", "--tasks", out, *given)
    assert result.exit_code == 0 and "1 of 1 tasks verified" in result.output, result.output
    assert "1 of 1 tasks are graded in a Python environment" in result.output
    assert [p for p in (tmp_path / "cache" / "envs").iterdir() if p.is_dir()] == [environment]
    result = etude_tasks("grade", out, task.id, "--gold", *given)
    assert result.exit_code == 0 and f"{task.id}: score 1" in result.output, result.output
    result = etude_tasks("grade", out, task.id, "--empty", *given)
    assert result.exit_code == 0 and f"{task.id}: score 0" in result.output, result.output
    result = etude_tasks("verify", "--tasks", out, *given, "--no-environment")
    assert result.exit_code == 1 and "No module named 'tinydep'" in result.output, result.output

    result = etude_tasks("synth", "--path", project, "--out", out, "--requirements", "nope.txt")
    assert result.exit_code == 1 and "no requirements file nope.txt in the project" in (
        result.output
    ), result.output


def test_a_terminated_synth_keeps_its_tasks_and_leaves_no_worker_behind(tmp_path):
    """SIGTERM (`timeout`, a cancelled CI job) ends the run as Ctrl-C does; by default only
    the parent would die, its pool's workers blocked for ever on a queue nobody reads."""
    archive = tar_sdist(tmp_path, "tb-1.2.0", TEXTBITS)
    out, log = tmp_path / "mine.jsonl", (tmp_path / "log").open("w+")
    synth = subprocess.Popen(
        [sys.executable, "-m", "etude.cli", "tasks", "synth", "--path", archive, "--out", out,
         "--per-project", "1000", "--workers", "2"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while "kept textbits." not in (tmp_path / "log").read_text():
            assert synth.poll() is None and time.monotonic() < deadline, log.read()
            time.sleep(0.2)
        synth.send_signal(signal.SIGTERM)
        assert synth.wait(timeout=60) == 130, (tmp_path / "log").read_text()
        # Nothing of the run's process group is left (its workers would be).
        assert not _group_alive(synth.pid, within_s=10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(synth.pid, signal.SIGKILL)  # whatever the test failed to stop
    said = (tmp_path / "log").read_text()
    assert "Stopped: the " in said and "Traceback" not in said, said
    assert len(list(read_jsonl(out))) >= 1


def _group_alive(group: int, within_s: float) -> bool:
    """Whether a process of `group` still runs after `within_s` seconds."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.2)
    return True


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


BUGGY_AREA = "def rectangle(width, height):\n    return width + height\n"
FIXED_AREA = "def rectangle(width, height):\n    return width * height\n"
OLD_TESTS = (
    "from shapes.area import rectangle\n\n\ndef test_square():\n    assert rectangle(2, 2) == 4\n"
)
NEW_TESTS = OLD_TESTS + "\n\ndef test_rectangle():\n    assert rectangle(2, 3) == 6\n"


@pytest.fixture(scope="module")
def swe_task(tmp_path_factory):
    """acme/shapes as an upstream repository (the bug at the base commit, the fix and its
    test in the commit after it) and its task as a SWE-bench JSONL record, written by hand:
    the diffs are git's, the lists JSON text as SWE-bench stores them."""
    root = tmp_path_factory.mktemp("checkouts") / "acme__shapes"
    write(root, {"shapes/__init__.py": "", "shapes/area.py": BUGGY_AREA,
                 "tests/test_area.py": OLD_TESTS})  # fmt: skip
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "rectangle area")
    base = git(root, "rev-parse", "HEAD").stdout.strip()
    write(root, {"shapes/area.py": FIXED_AREA, "tests/test_area.py": NEW_TESTS})
    git(root, "commit", "-q", "-am", "fix rectangle area")
    record = {
        "instance_id": "acme__shapes-1",
        "repo": "acme/shapes",
        "base_commit": base,
        "problem_statement": "rectangle(2, 3) returns 5; the area of a 2 by 3 rectangle is 6.",
        "patch": git(root, "diff", base, "HEAD", "--", "shapes").stdout,
        "test_patch": git(root, "diff", base, "HEAD", "--", "tests").stdout,
        "FAIL_TO_PASS": json.dumps(["tests/test_area.py::test_rectangle"]),
        "PASS_TO_PASS": json.dumps(["tests/test_area.py::test_square"]),
        "version": "1.0",
        "environment_setup_commit": base,
        "hints_text": "",
        "created_at": "2024-01-01T00:00:00Z",
    }
    tasks = root.parent.parent / "shapes.jsonl"
    tasks.write_text(json.dumps(record) + "\n")
    return tasks, root, base


def test_a_swe_bench_record_verifies_and_grades_from_its_repository(swe_task, tmp_path):
    tasks, root, _ = swe_task
    cache, source = tmp_path / "cache", f"acme/shapes={root}"
    result = etude_tasks("verify", "--tasks", tasks, "--cache", cache)
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "acme/shapes: no repository sources given" in result.output

    result = etude_tasks("verify", "--tasks", tasks, "--cache", cache, "--repository", source)
    assert result.exit_code == 0 and "1 of 1 tasks verified" in result.output, result.output

    result = etude_tasks("grade", tasks, "acme__shapes-1", "--gold", "--repository", source,
                         "--cache", cache)  # fmt: skip
    assert result.exit_code == 0 and "acme__shapes-1: score 1\n" in result.output, result.output
    result = etude_tasks("grade", tasks, "acme__shapes-1", "--empty", "--repository", source,
                         "--cache", cache)  # fmt: skip
    assert result.exit_code == 0 and "acme__shapes-1: score 0\n" in result.output, result.output
    assert outcomes(result.output, "FAIL_TO_PASS") == ["FAILED"]
    assert outcomes(result.output, "PASS_TO_PASS") == ["passed"]


def test_materialize_and_hints_take_the_same_sources(swe_task, tmp_path):
    tasks, root, base = swe_task
    cache = tmp_path / "cache"
    # A directory of checkouts: acme__shapes is found in it.
    result = etude_tasks("materialize", "--tasks", tasks, "--cache", cache,
                         "--checkouts", tmp_path / "empty", "--checkouts", root.parent)  # fmt: skip
    assert result.exit_code == 0 and f"1 repositories in {cache}" in result.output, result.output
    [repository] = cache.iterdir()
    assert git(repository, "log", "--all", "--format=%H").stdout.split() == [base]
    assert (repository / "shapes" / "area.py").read_text() == BUGGY_AREA

    hinted = tmp_path / "hinted.jsonl"
    result = etude_tasks("hints", tasks, "--out", hinted, "--cache", tmp_path / "other",
                         "--repository", f"acme/shapes={root}")  # fmt: skip
    assert result.exit_code == 0 and "Hints for 1 of 1 tasks" in result.output, result.output
    [task] = read_jsonl(hinted)
    assert task.metadata["hints"]["function"] == "rectangle"
    assert task.metadata["hints"]["path"] == "shapes/area.py"

    result = etude_tasks("materialize", "--tasks", tasks, "--repository", str(root))
    assert result.exit_code == 1 and "expected owner/name=PATH" in result.output
