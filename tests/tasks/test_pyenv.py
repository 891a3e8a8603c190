"""A task's Python environment: its dependencies from a wheelhouse, built once per
repository and commit, and the project imported from the workspace (the agent's edits),
never from an installed copy."""

from __future__ import annotations

import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from etude.common.toolcalls import ToolCall
from etude.sandbox.config import SandboxConfig
from etude.tasks.materialize import materialize
from etude.tasks.pyenv import (
    EnvironmentBuildError,
    PackageSource,
    build_environment,
    environment_for,
)
from etude.tasks.pyenv_build import BuildSandbox
from etude.tasks.sources import RepositorySources
from etude.tasks.task import Setup, Task
from tests.conftest import skip_without_sandboxes
from tests.environment.conftest import make_manager
from tests.tasks.layouts import SELF_VERSIONED
from tests.tasks.tiny_projects import make_project, tinydep_wheelhouse
from tests.tasks.upstream import git


@pytest.fixture
def wheelhouse(tmp_path: Path) -> Path:
    """tinydep 1.0, as a wheel."""
    return tinydep_wheelhouse(tmp_path)


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, str]:
    """acme/tiny, a src-layout project needing tinydep, committed; (checkouts dir, commit)."""
    root = tmp_path / "checkouts" / "acme__tiny"
    make_project(root, "tiny", "tinydep>=1.0", {
        "tiny/__init__.py": "from tinydep import double\n\nANSWER = double(21)\n",
    }, "src")  # fmt: skip
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "tiny")
    return root.parent, git(root, "rev-parse", "HEAD").stdout.strip()


def task_on(commit: str, **setup) -> Task:
    return Task(
        id="acme__tiny-1", repo="acme/tiny", base_commit=commit, instruction="",
        test_patch="", fail_to_pass=(), pass_to_pass=(), setup=Setup(**setup),
    )  # fmt: skip


def test_the_environment_has_the_dependencies_and_imports_the_workspace(
    tmp_path, wheelhouse, project
):
    checkouts, commit = project
    workspace = tmp_path / "workspace"  # where a session sees the repository, edited
    sources = RepositorySources(checkouts=(checkouts,))
    env = environment_for(
        task_on(commit), tmp_path / "tasks", tmp_path / "envs", PackageSource(wheelhouse),
        sources=sources, workspace=str(workspace),
    )  # fmt: skip
    assert env.built
    git(tmp_path, "clone", "-q", str(checkouts / "acme__tiny"), str(workspace))
    (workspace / "src" / "tiny" / "__init__.py").write_text("ANSWER = 'edited'\n")
    ran = subprocess.run(
        [str(env.python), "-c", "import tiny, tinydep; print(tiny.ANSWER, tiny.__file__)"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["edited", str(workspace / "src" / "tiny" / "__init__.py")]
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(env.python), "list", "--format=freeze"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    # No copy of the project: a record of its metadata, without its files.
    assert "tinydep==1.0" in listed and "tiny==1.0" in listed
    assert not (env.purelib / "tiny").exists()


def test_a_project_that_reads_its_own_installed_version_imports(tmp_path, wheelhouse):
    """As humanize 4.9 does at import (`importlib.metadata.version(__name__)`)."""
    root = tmp_path / "selfversion"
    module = {"selfversion/__init__.py": SELF_VERSIONED["selfversion/__init__.py"]}
    make_project(root, "selfversion", "tinydep>=1.0", module, ".")
    task = replace(task_on("ab" * 20), repo="acme/selfversion")
    env = build_environment(task, root, tmp_path / "envs", PackageSource(wheelhouse),
                            workspace=str(root))  # fmt: skip
    ran = subprocess.run(
        [str(env.python), "-c", "import selfversion as s; print(s.__version__, s.__file__)"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["1.0", str(root / "selfversion" / "__init__.py")]


def test_an_environment_is_built_once_per_commit(tmp_path, wheelhouse, project):
    checkouts, commit = project
    tree = checkouts / "acme__tiny"
    envs = tmp_path / "envs"
    results = []

    def build(task: Task) -> None:
        results.append(build_environment(task, tree, envs, PackageSource(wheelhouse)))

    tasks = [replace(task_on(commit), id=f"acme__tiny-{i}") for i in range(3)]
    threads = [threading.Thread(target=build, args=(task,)) for task in tasks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({r.root for r in results}) == 1 and sum(r.built for r in results) == 1
    other = task_on(commit, environment_setup_commit="ab" * 20)
    assert build_environment(other, tree, envs, PackageSource(wheelhouse)).root != results[0].root


def test_a_missing_dependency_is_a_clear_error_and_leaves_nothing(tmp_path, project):
    checkouts, commit = project
    empty = tmp_path / "empty-wheelhouse"
    empty.mkdir()
    envs = tmp_path / "envs"
    with pytest.raises(EnvironmentBuildError, match=r"acme__tiny-1: installing .* tinydep"):
        build_environment(task_on(commit), checkouts / "acme__tiny", envs, PackageSource(empty))
    assert [p for p in envs.iterdir() if not p.name.endswith(".lock")] == []


def test_a_requirements_file_the_repository_lacks_is_a_clear_error(tmp_path, project):
    checkouts, commit = project
    tree, envs, source = checkouts / "acme__tiny", tmp_path / "envs", PackageSource(tmp_path)
    with pytest.raises(EnvironmentBuildError, match=r"no requirements file requirements/dev\.txt"):
        build_environment(task_on(commit, reqs_path=("requirements/dev.txt",)), tree, envs, source)


def test_a_task_asking_for_another_python_is_built_with_the_one_that_grades_it(
    tmp_path, wheelhouse, project, caplog
):
    """SWE-bench's `python: 3.9` on a machine running another: an environment of 3.9 could
    not be graded here (the grader adds its site-packages to its own interpreter), so it is
    built with the grader's Python, says so once, and has pytest like any other."""
    checkouts, commit = project
    tree, envs = checkouts / "acme__tiny", tmp_path / "envs"
    task = task_on(commit, python="2.6")
    env = build_environment(task, tree, envs, PackageSource(wheelhouse))
    assert env.python_version == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert "asks for Python 2.6; its environment is built with" in caplog.text
    ran = subprocess.run([str(env.python), "-c", "import pytest, tinydep"], capture_output=True)
    assert ran.returncode == 0, ran.stderr


@pytest.mark.integration
async def test_a_sandbox_given_the_environment_runs_the_agents_code_with_it(
    tmp_path, wheelhouse, project
):
    """The wiring the sandbox needs: the environment bound read-only at its own path, its
    python run; the workspace's edited code is what it imports."""
    checkouts, commit = project
    sources = RepositorySources(checkouts=(checkouts,))
    task = task_on(commit)
    env = environment_for(task, tmp_path / "tasks", tmp_path / "envs", PackageSource(wheelhouse),
                          sources=sources)  # fmt: skip
    repository = materialize(task, tmp_path / "tasks", sources=sources)
    with skip_without_sandboxes():
        manager = make_manager(tmp_path, ro_binds=(str(env.root),))
    try:
        session = await manager.create(task.id, repository)
        command = (
            "echo \"ANSWER = 'edited'\" > src/tiny/__init__.py && "
            f"{env.python} -c 'import tiny, tinydep; print(tiny.ANSWER, tiny.__file__)'"
        )
        [ran] = await manager.execute(
            session.id, [ToolCall("run_terminal_command", {"command": command}, "c")]
        )
    finally:
        await manager.close_all()
    assert ran.result.exit_code == 0, ran.result.output
    assert ran.result.output.split()[:2] == ["edited", "/workspace/src/tiny/__init__.py"]


def test_with_the_process_backend_an_environment_is_built_without_isolation_and_says_so(
    tmp_path, wheelhouse, project, caplog
):
    """Hosts without user namespaces (`ETUDE_SANDBOX__BACKEND=process`) build as their
    sessions run: on the host, under the limits, with a warning."""
    checkouts, commit = project
    unisolated = BuildSandbox(None, SandboxConfig())
    env = build_environment(task_on(commit), checkouts / "acme__tiny", tmp_path / "envs",
                            PackageSource(wheelhouse), sandbox=unisolated)  # fmt: skip
    assert "building a Python environment without a sandbox" in caplog.text
    ran = subprocess.run([str(env.python), "-c", "import tinydep"], capture_output=True)
    assert ran.returncode == 0, ran.stderr
