"""A task's Python environment: a virtual environment with the project's dependencies,
built once per repository and environment commit (SWE-bench's `environment_setup_commit`,
else the base commit; for tasks synthesized from a project, the project's content hash) and
shared by every task and session on it.

The project itself is installed, then taken out again, and the environment imports it from
the workspace instead (a `.pth` naming `workspace`, and `workspace/src` for a src layout):
tests must run the agent's edited code, never a copy installed before the agent began. So
the environment holds nothing of the commit it was built from beyond its dependencies,
which matters when that commit comes after the fix, and a record of the project's metadata
without its files (its name, version and requirements), for projects that read their own
version at import.

A virtual environment cannot move (its scripts name their own path), so it is built where
it stays, under a lock, and marked complete last; a build that died half-way is redone.
Sandboxes see it read-only at the same path. Building runs the project's build backend on
the host: repositories are the operator's, not the agent's.

The environment holds no pytest (it is made `--without-pip`, from the interpreter running
etude, and holds only the project's dependencies). So that `python -m pytest` works in a
session, its `.pth` file appends the site-packages of the interpreter that built it after
the workspace: the project's dependencies, the agent's code, then the runner's packages
(pytest), so nothing of etude's own shadows what the project brings. Grading does not run
the environment's python (the workspace on its path would be imported before pytest):
etude.tasks.testrun adds the environment's site-packages to its own runner instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from etude.tasks.materialize import PROJECTS_DIR, MaterializeError, materialize
from etude.tasks.pyenv_marker import (
    MARKER,
    RUNNING_PYTHON,
    PythonEnvironment,
    read_environment,
)
from etude.tasks.repo import IGNORED
from etude.tasks.sources import RepositorySources
from etude.tasks.synth.sources import SourceError, source_of
from etude.tasks.task import Task

log = logging.getLogger(__name__)

WORKSPACE = "/workspace"
"""Where sessions and grading see the repository (etude.sandbox)."""
PTH_FILE = "etude.pth"
"""In the environment's site-packages: the workspace, then the runner's site-packages."""


class EnvironmentBuildError(RuntimeError):
    """An environment could not be built; the message names the task and says why."""


@dataclass(frozen=True, slots=True)
class PackageSource:
    """Where packages come from."""

    wheelhouse: Path | None = None
    """A directory of wheels and sdists; when set, the only source (no network)."""
    index_url: str | None = None
    """A package index; unset, pip's own configuration (PyPI by default)."""

    def pip_args(self) -> list[str]:
        if self.wheelhouse is not None:
            return ["--no-index", "--find-links", str(self.wheelhouse.resolve())]
        return ["--index-url", self.index_url] if self.index_url else []


def environment_commit(task: Task) -> str:
    return task.setup.environment_setup_commit or task.base_commit


def environment_for(
    task: Task,
    cache_dir: Path,
    envs_dir: Path,
    packages: PackageSource,
    *,
    sources: RepositorySources | None = None,
    projects_dir: Path = PROJECTS_DIR,
    workspace: str = WORKSPACE,
) -> PythonEnvironment:
    """The task's environment, its repository at the environment commit materialized into
    `cache_dir` first (etude.tasks.materialize). A task synthesized from a project shares
    its project's: built from the project as given (`sources.projects`), the one
    `etude tasks synth --environment` built, whichever of its tasks comes first."""
    project_hash = task.metadata.get("project_hash")
    if task.metadata.get("origin") and project_hash and not task.setup.environment_setup_commit:
        of_project = replace(task, base_commit=str(project_hash))
        root, spec = _place(of_project, envs_dir, workspace)
        if _complete(root, spec):  # found without opening the project again
            return read_environment(root)
        projects = (sources or RepositorySources()).projects
        try:
            with source_of(task, projects) as project:
                return build_environment(
                    of_project, project.root, envs_dir, packages, workspace=workspace
                )
        except SourceError as error:
            raise MaterializeError(f"{task.id}: {error}") from error
    at_commit = replace(task, base_commit=environment_commit(task))
    tree = materialize(at_commit, cache_dir, projects_dir, sources=sources)
    return build_environment(task, tree, envs_dir, packages, workspace=workspace)


def build_environment(
    task: Task,
    tree: Path,
    envs_dir: Path,
    packages: PackageSource,
    *,
    workspace: str = WORKSPACE,
    timeout_s: float = 1800.0,
) -> PythonEnvironment:
    """The environment of `task` under `envs_dir`, built from `tree` (the repository at
    `environment_commit(task)`) unless already there."""
    root, spec = _place(task, envs_dir, workspace)
    envs_dir.mkdir(parents=True, exist_ok=True)
    with _locked(envs_dir / f".{root.name}.lock"):
        if _complete(root, spec):
            return read_environment(root)
        shutil.rmtree(root, ignore_errors=True)  # a build that died half-way
        try:
            built = _build(task, tree, root, spec["python"], packages, spec, timeout_s)
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        marker = root / f".{MARKER}.partial"
        marker.write_text(json.dumps({"spec": spec, **built}, indent=1))
        marker.rename(root / MARKER)
    return replace(read_environment(root), built=True)


def _place(task: Task, envs_dir: Path, workspace: str) -> tuple[Path, dict]:
    """Where the task's environment lies under `envs_dir`, and what it is built from."""
    python = _interpreter(task)
    spec = {
        "repo": task.repo,
        "commit": environment_commit(task),
        "python": python,
        "packages": task.setup.packages,
        "reqs_path": list(task.setup.reqs_path),
        "pip_packages": list(task.setup.pip_packages),
        "workspace": workspace,
        "runner": _runner_site_dirs(),
        "project_record": True,  # environments built before it held none: rebuilt
    }
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "__", task.repo).lstrip(".")
    return envs_dir / f"{name}@{spec['commit'][:12]}-{digest}", spec


def _runner_site_dirs() -> list[str]:
    """Where the runner (pytest) is, for the environment's python to find it after its own
    packages: the site-packages of the interpreter running etude, which built it."""
    return [d for d in site.getsitepackages() if os.path.isdir(d)]


_WARNED: set[tuple[str, str]] = set()


def _interpreter(task: Task) -> str:
    """The interpreter running etude, whatever Python the task asks for: the tests are
    graded on it (etude.tasks.testrun adds the environment's site-packages to its runner,
    and compiled packages are per version), so an environment of another Python could be
    neither graded nor given pytest. A task that asks for another version (SWE-bench's
    `python`) is built here all the same, with a warning; `etude tasks verify` says
    whether its tests pass on this one."""
    wanted = task.setup.python
    if wanted and wanted != RUNNING_PYTHON and (task.repo, wanted) not in _WARNED:
        _WARNED.add((task.repo, wanted))  # once per repository, not once per episode
        log.warning(
            "%s asks for Python %s; its environment is built with %s, the Python its tests "
            "are graded on (verify the task to see that they pass there)",
            task.id, wanted, RUNNING_PYTHON,
        )  # fmt: skip
    return sys.executable


def _complete(root: Path, spec: dict) -> bool:
    try:
        return json.loads((root / MARKER).read_text())["spec"] == spec
    except (OSError, ValueError, KeyError):
        return False


def _build(
    task: Task,
    tree: Path,
    root: Path,
    python: str,
    packages: PackageSource,
    spec: dict,
    timeout_s: float,
) -> dict:
    """Build the environment at `root`; the marker's description of it: the `name==version`
    of what it holds, its site-packages and its Python version."""

    def run(*args: str, what: str, cwd: Path | None = None) -> None:
        try:
            done = subprocess.run(
                args, capture_output=True, text=True, timeout=timeout_s, cwd=cwd,
                env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise EnvironmentBuildError(f"{task.id}: {what} took over {timeout_s:.0f} s") from None
        if done.returncode != 0:
            said = (done.stderr.strip() or done.stdout.strip())[-2000:]
            raise EnvironmentBuildError(f"{task.id}: {what} failed: {said}")

    run(python, "-m", "venv", "--without-pip", str(root), what="creating the environment")
    env_python = str(root / "bin" / "python")
    # pip of the service, pointed at the environment: the environment itself needs none.
    pip = [sys.executable, "-m", "pip", "--python", env_python]
    with tempfile.TemporaryDirectory(prefix="etude-pyenv-") as scratch:
        # A copy to build from: builds write into their source (build/, *.egg-info), and
        # `tree` may be the repository sessions open.
        source = Path(scratch) / "project"
        shutil.copytree(tree, source, ignore=shutil.ignore_patterns(*IGNORED))
        report = Path(scratch) / "report.json"
        wanted = [*_requirement_files(task, source), *task.setup.pip_packages]
        if any((source / f).is_file() for f in ("pyproject.toml", "setup.py", "setup.cfg")):
            wanted.append(str(source))  # else a tree of modules, not a distribution
        installed = []
        if wanted:
            # From the project's directory: requirements files name paths (`-e .`) so.
            run(
                *pip, "install", "--no-input", "--report", str(report), *packages.pip_args(),
                *wanted, what="installing the project and its dependencies", cwd=source,
            )  # fmt: skip
            installed = json.loads(report.read_text())["install"]
        own = [
            item["metadata"]["name"] for item in installed
            if item.get("download_info", {}).get("url") == source.resolve().as_uri()
        ]  # fmt: skip
        if str(source) in wanted and not own:  # left in, it would shadow the workspace
            raise EnvironmentBuildError(f"{task.id}: pip's report does not name the project")
        if own:
            run(*pip, "uninstall", "-y", *own, what="taking the project out again")
    purelib, version = subprocess.run(
        [env_python, "-c", "import sys, sysconfig; print(sysconfig.get_paths()['purelib']); "
         "print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    for item in installed:
        if item["metadata"]["name"] in own:
            _metadata_record(Path(purelib), item["metadata"])
    workspace = spec["workspace"]
    roots = [workspace] + ([f"{workspace}/src"] if (tree / "src").is_dir() else [])
    # Each line a directory appended to sys.path after the environment's own site-packages
    # (the dependencies), in this order: the agent's code, then the runner's packages.
    lines = ["# The task's repository as sessions see it", *roots,
             "# The runner's packages (pytest), after everything the project brings",
             *spec["runner"]]  # fmt: skip
    Path(purelib, PTH_FILE).write_text("".join(f"{line}\n" for line in lines))
    held = sorted(
        f"{i['metadata']['name']}=={i['metadata']['version']}"
        for i in installed
        if i["metadata"]["name"] not in own
    )
    return {"installed": held, "purelib": purelib, "python_version": version}


def _metadata_record(purelib: Path, metadata: dict) -> None:
    """A record of the project with its metadata and no files (`NAME-VERSION.dist-info`):
    a project that reads its own installed metadata at import
    (`importlib.metadata.version(__name__)`, as humanize does) imports from the workspace.
    Its name, version and requirements only: no entry points, which would load the project
    (a pytest plugin) where nothing asked for it. pip lists it, and can uninstall it."""
    name, version = metadata["name"], metadata["version"]
    info = purelib / f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in metadata.get("requires_dist", [])]
    if "requires_python" in metadata:
        lines.append(f"Requires-Python: {metadata['requires_python']}")
    (info / "METADATA").write_text("".join(f"{line}\n" for line in lines))
    (info / "INSTALLER").write_text("etude\n")
    written = ["METADATA", "INSTALLER", "RECORD"]
    (info / "RECORD").write_text("".join(f"{info.name}/{f},,\n" for f in written))


def _requirement_files(task: Task, source: Path) -> list[str]:
    """pip arguments for the requirements files the setup names (SWE-bench's `packages`
    naming a file, SWE-rebench's `reqs_path`); `packages` naming packages adds those."""
    packages = task.setup.packages
    if packages.endswith((".yml", ".yaml")):
        raise EnvironmentBuildError(f"{task.id}: conda environments ({packages}) are not built")
    files = [*task.setup.reqs_path, *([packages] if packages.endswith(".txt") else [])]
    for name in files:
        if not (source / name).resolve().is_relative_to(source.resolve()):
            raise EnvironmentBuildError(
                f"{task.id}: requirements file {name} is outside the repository"
            )
        if not (source / name).is_file():
            raise EnvironmentBuildError(f"{task.id}: no requirements file {name} in the repository")
    named = packages.split() if packages and not packages.endswith(".txt") else []
    return [arg for name in files for arg in ("-r", str(source / name))] + named


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock across processes and threads (each call opens its own file)."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
