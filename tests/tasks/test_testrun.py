"""The graded pytest run: the options come from the given base tree, not the tree under
test; results come only over the sealed channel; the cgroup is gone afterwards."""

from __future__ import annotations

import importlib.util
import os
import py_compile
from pathlib import Path

import pytest

from etude.sandbox.config import SandboxConfig
from etude.tasks import testrun
from etude.tasks.grading_config import UnsupportedTestCommand, command_args, read_options
from etude.tasks.testrun import run_pytest
from tests.tasks.conftest import SOURCE, write_tiny_project

COMMAND = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest -q -p no:cacheprovider"


def test_command_args_keep_the_tasks_flags_and_drop_the_graders():
    assert command_args(COMMAND) == ["-q", "-p", "no:cacheprovider"]
    assert command_args("pytest -x --maxfail 2 --junitxml=out.xml -k clamp") == ["-k", "clamp"]
    with pytest.raises(UnsupportedTestCommand):
        command_args("tox -e py311")


def test_options_are_read_with_pytests_precedence(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\npythonpath = ["."]\naddopts = "-p evil"\n'
    )
    assert read_options(tmp_path) == {"pythonpath": ["."], "addopts": "-p evil"}
    (tmp_path / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n")
    assert read_options(tmp_path) == {"testpaths": "tests"}


@pytest.mark.integration
def test_the_tree_under_test_cannot_configure_or_forge_its_run(tmp_path, bwrap):
    base = write_tiny_project(tmp_path / "base")
    tree = write_tiny_project(tmp_path / "tree")
    # Its own config would only collect, and a planted JUnit file would say all passed:
    # neither may count. (Its conftest files are the grader's to put back.)
    (tree / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\npythonpath = ["."]\naddopts = "--collect-only"\n'
    )
    (tree / ".etude-junit.xml").write_text('<testsuite><testcase name="x"/></testsuite>')
    broken = SOURCE.replace("    return value\n", "    return low\n", 1)  # clamp: wrong inside
    (tree / "mathbits" / "core.py").write_text(broken)
    run = run_pytest(
        tree, COMMAND, bwrap=bwrap, config=SandboxConfig(), timeout_s=60,
        test_paths=("tests/test_core.py",), options_from=base,
    )  # fmt: skip
    assert run.complete and run.problem == ""
    assert len(run.outcomes) == 8  # collected and run despite `--collect-only`
    assert run.outcomes["tests/test_core.py::test_clamp_inside"] == "failed"
    assert run.outcomes["tests/test_core.py::test_clamp_below"] == "passed"
    assert not list(Path("/sys/fs/cgroup").glob(f"*/**/etude-grade-{os.getpid()}-*"))


@pytest.mark.integration
def test_a_run_that_exits_before_reporting_is_incomplete(tmp_path, bwrap):
    tree = write_tiny_project(tmp_path / "tree")
    (tree / "mathbits" / "__init__.py").write_text("import os\nos._exit(0)\n")
    run = run_pytest(tree, COMMAND, bwrap=bwrap, config=SandboxConfig(), timeout_s=60)
    assert run.exit_code == 0 and not run.complete and run.outcomes == {}


@pytest.mark.integration
def test_bytecode_planted_in_the_tree_is_never_run(tmp_path, bwrap):
    """An unchecked-hash .pyc is loaded without looking at its source: planted beside a
    broken module, a correct one's bytecode would make the suite pass. The runner reads
    its own bytecode caches, the tree's modules compile from source."""
    tree = write_tiny_project(tmp_path / "tree")
    module = tree / "mathbits" / "core.py"
    planted = importlib.util.cache_from_source(str(module))
    py_compile.compile(
        str(module), cfile=planted, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
    )
    module.write_text(SOURCE.replace("    return value\n", "    return low\n", 1))
    run = run_pytest(
        tree, COMMAND, bwrap=bwrap, config=SandboxConfig(), timeout_s=60,
        test_paths=("tests/test_core.py",),
    )  # fmt: skip
    assert run.complete and run.problem == ""
    assert run.outcomes["tests/test_core.py::test_clamp_inside"] == "failed"
    assert Path(planted).exists()  # it was there to be read


def test_a_suite_that_could_not_run_says_why():
    """Pytest's exit codes for a suite that never ran its tests: not every test failing."""
    usage = testrun.TestRun(exit_code=4, complete=True, output="ERROR: usage: pytest [options]\n"
                    "ERROR: unrecognized arguments: --cov\n")  # fmt: skip
    assert "unrecognized arguments: --cov" in usage.suite_error
    assert "no tests collected" in testrun.TestRun(exit_code=5, complete=True).suite_error
    failed = {"tests/test_a.py::test_a": "failed"}
    ran = testrun.TestRun(outcomes=failed, exit_code=1, complete=True)
    assert ran.suite_error == ""
    assert testrun.TestRun(timed_out=True).suite_error == ""  # a timeout is reported as one


@pytest.mark.integration
def test_a_test_module_that_does_not_import_is_a_suite_error(tmp_path, bwrap):
    tree = write_tiny_project(tmp_path / "tree")
    (tree / "tests" / "test_extra.py").write_text("import not_an_installed_module\n")
    run = run_pytest(tree, COMMAND, bwrap=bwrap, config=SandboxConfig(), timeout_s=60)
    assert run.exit_code == 2 and run.outcomes == {}
    assert run.suite_error.startswith("tests/test_extra.py: ModuleNotFoundError: No module named")


@pytest.mark.integration
def test_a_relative_pythonpath_in_the_command_is_the_trees(tmp_path, bwrap):
    """A src layout runs uninstalled when the task's command puts `src` on the path
    (pytest alone would read it relative to /dev/null, the configuration it is given)."""
    tree = write_tiny_project(tmp_path / "tree")
    (tree / "mathbits").rename(tree / "src")
    (tree / "pyproject.toml").write_text("")
    (tree / "src" / "mathbits").mkdir()
    for name in ("__init__.py", "core.py"):
        (tree / "src" / name).rename(tree / "src" / "mathbits" / name)
    run = run_pytest(tree, f"{COMMAND} -o pythonpath=src", bwrap=bwrap, config=SandboxConfig(),
                     timeout_s=60)  # fmt: skip
    assert run.suite_error == "" and len(run.outcomes) == 8 and run.failing == []


@pytest.mark.integration
def test_a_copied_workspace_keeps_every_write_in_the_sandbox_within_its_size(tmp_path, bwrap):
    """Grading's runs: the tests see a copy of the tree in the sandbox's memory; what they
    write never reaches the host's tree, and past the size a write fails there."""
    tree = write_tiny_project(tmp_path / "tree")
    (tree / "tests" / "test_writes.py").write_text(
        "import os\n\n\n"
        "def test_writes_a_marker():\n"
        "    with open('marker.txt', 'w') as f:\n"
        "        f.write('written')\n"
        "    assert open('marker.txt').read() == 'written'\n\n\n"
        "def test_cannot_fill_the_host():\n"
        "    chunk = b'x' * (1 << 20)\n"
        "    try:\n"
        "        with open('big.bin', 'wb') as f:\n"
        "            for _ in range(64):\n"
        "                f.write(chunk)\n"
        "                f.flush()\n"
        "    except OSError as error:\n"
        "        assert error.errno == 28  # ENOSPC: the workspace is full\n"
        "    else:\n"
        "        raise AssertionError('64 MiB fit in a 16 MiB workspace')\n"
    )
    run = run_pytest(
        tree, COMMAND, bwrap=bwrap, config=SandboxConfig(), timeout_s=60,
        test_paths=("tests/test_writes.py", "tests/test_core.py"),
        workspace_bytes=16 * 1024**2,
    )  # fmt: skip
    assert run.complete, run.output
    assert run.outcomes["tests/test_writes.py::test_writes_a_marker"] == "passed"
    assert run.outcomes["tests/test_writes.py::test_cannot_fill_the_host"] == "passed"
    assert run.outcomes["tests/test_core.py::test_clamp_inside"] == "passed"
    assert not (tree / "marker.txt").exists() and not (tree / "big.bin").exists()
