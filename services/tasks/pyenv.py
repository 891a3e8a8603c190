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
Sandboxes see it read-only at the same path.

A task's repository is data from the internet, and installing it runs its code (`setup.py`,
a build backend, the packages it names): every step that does runs in a sandbox
(etude.tasks.pyenv_build), with the index reachable through a proxy and nothing else
(etude.tasks.index_proxy). pip receives package requirements only (etude.tasks.pip_input):
each entry the task names is checked to be one (`name[extras] specifier; marker`, never an
option, a path or a URL), and the requirements files of the repository hold nothing that
chooses another package source or reaches outside the repository.

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
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from etude.common.run_config import protected_overlap, stack_protected_dirs
from etude.sandbox.bwrap import SandboxUnavailableError
from etude.tasks.index_proxy import IndexHostError, IndexProxy, index_hosts
from etude.tasks.materialize import PROJECTS_DIR, MaterializeError, materialize
from etude.tasks.pip_input import RequirementError, named_packages, requirement, requirement_files
from etude.tasks.pyenv_build import BuildPaths, BuildSandbox, default_build_sandbox
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
    """A package index; unset, PyPI."""
    index_hosts: tuple[str, ...] = ()
    """Other `host[:port]` the index serves files from, which builds may reach too."""


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
    sandbox: BuildSandbox | None = None,
) -> PythonEnvironment:
    """The task's environment, its repository at the environment commit materialized into
    `cache_dir` first (etude.tasks.materialize). A task synthesized from a project shares
    its project's: built from the project as given (`sources.projects`), the one
    `etude tasks synth --environment` built, whichever of its tasks comes first.
    `sandbox`: where builds run (default: this process's, `ETUDE_SANDBOX__*`)."""
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
                    of_project, project.root, envs_dir, packages, workspace=workspace,
                    sandbox=sandbox,
                )  # fmt: skip
        except SourceError as error:
            raise MaterializeError(f"{task.id}: {error}") from error
    at_commit = replace(task, base_commit=environment_commit(task))
    tree = materialize(at_commit, cache_dir, projects_dir, sources=sources)
    return build_environment(task, tree, envs_dir, packages, workspace=workspace, sandbox=sandbox)


def build_environment(
    task: Task,
    tree: Path,
    envs_dir: Path,
    packages: PackageSource,
    *,
    workspace: str = WORKSPACE,
    timeout_s: float = 1800.0,
    sandbox: BuildSandbox | None = None,
) -> PythonEnvironment:
    """The environment of `task` under `envs_dir`, built from `tree` (the repository at
    `environment_commit(task)`) unless already there, in `sandbox` (default: this
    process's)."""
    root, spec = _place(task, envs_dir, workspace)
    envs_dir.mkdir(parents=True, exist_ok=True)
    with _locked(envs_dir / f".{root.name}.lock"):
        if _complete(root, spec):
            return read_environment(root)
        shutil.rmtree(root, ignore_errors=True)  # a build that died half-way
        try:
            built = _build(task, tree, root, packages, spec, timeout_s, sandbox)
            _write_marker(root, json.dumps({"spec": spec, **built}, indent=1))
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
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
    packages: PackageSource,
    spec: dict,
    timeout_s: float,
    sandbox: BuildSandbox | None,
) -> dict:
    """Build the environment at `root`; the marker's description of it: the `name==version`
    of what it holds, its site-packages and its Python version."""
    try:
        named = [requirement(entry, "pip_packages") for entry in task.setup.pip_packages]
        named += [requirement(entry, "packages") for entry in named_packages(task.setup)]
    except RequirementError as error:
        raise EnvironmentBuildError(f"{task.id}: {error}") from None
    wheelhouse = _wheelhouse(task, packages)
    allowed = _allowed_hosts(task, packages) if wheelhouse is None else None
    try:
        sandbox = sandbox or default_build_sandbox()
    except SandboxUnavailableError as error:
        raise EnvironmentBuildError(f"{task.id}: no sandbox to build in: {error}") from None
    _create_venv(task, spec["python"], root)
    purelib = sysconfig.get_paths("venv", vars={"base": str(root), "platbase": str(root)})[
        "purelib"
    ]
    with tempfile.TemporaryDirectory(prefix="etude-pyenv-") as scratch:
        # A copy to build from: builds write into their source (build/, *.egg-info), and
        # `tree` may be the repository sessions open. Its symlinks stay links: followed,
        # one to a host file would bring that file's content into the sandbox.
        source = Path(scratch, "project")
        shutil.copytree(tree, source, symlinks=True, ignore=shutil.ignore_patterns(*IGNORED))
        Path(scratch, "build").mkdir()
        try:
            files = requirement_files(task.setup, source)
        except RequirementError as error:
            raise EnvironmentBuildError(f"{task.id}: {error}") from None
        proxied = allowed is not None and sandbox.bwrap is not None
        paths = BuildPaths(
            str(source), str(Path(scratch, "build")), str(root),
            None if wheelhouse is None else str(wheelhouse),
            str(Path(scratch, "index.sock")) if proxied else None,
        )  # fmt: skip
        seen = sandbox.seen(paths)

        def run(command: list[str], what: str, proxy: IndexProxy | None = None) -> None:
            # The way to the index only while pip installs: nothing else needs the network.
            where = paths if proxy is not None else replace(paths, index_socket=None)
            code, output = sandbox.run(command, where, timeout_s)
            if code is None:
                raise EnvironmentBuildError(f"{task.id}: {what} took over {timeout_s:.0f} s")
            if code != 0:
                refused = ""
                if proxy is not None and proxy.refused:
                    hosts = ", ".join(sorted(set(proxy.refused))[:5])
                    refused = f" (not the package index's hosts, refused: {hosts})"
                raise EnvironmentBuildError(
                    f"{task.id}: {what} failed: {output.strip()[-2000:]}{refused}"
                )

        # pip of the service, pointed at the environment: the environment itself needs none.
        pip = [sys.executable, "-m", "pip", "--python", str(root / "bin" / "python")]
        wanted = [*(arg for name in files for arg in ("-r", f"{seen.source}/{name}")), *named]
        if any((source / f).is_file() for f in ("pyproject.toml", "setup.py", "setup.cfg")):
            wanted.append(seen.source)  # else a tree of modules, not a distribution
        installed: list[dict] = []
        if wanted:
            index = (
                ["--no-index", "--find-links", seen.wheelhouse] if seen.wheelhouse
                else ["--index-url", packages.index_url] if packages.index_url else []
            )  # fmt: skip
            report = f"{seen.scratch}/report.json"
            with contextlib.ExitStack() as stack:
                proxy = None
                if allowed is not None and paths.index_socket is not None:
                    proxy = stack.enter_context(IndexProxy(Path(paths.index_socket), allowed))
                # From the project's directory: requirements files name paths (`-e .`) so.
                run(
                    [*pip, "install", "--no-cache-dir", "--report", report, *index, *wanted],
                    "installing the project and its dependencies", proxy,
                )  # fmt: skip
            installed = _read_report(task, Path(paths.scratch, "report.json"))
        own = [i["name"] for i in installed if i["url"] == Path(seen.source).as_uri()]
        if seen.source in wanted and not own:  # left in, it would shadow the workspace
            raise EnvironmentBuildError(f"{task.id}: pip's report does not name the project")
        if own:
            run([*pip, "uninstall", "-y", *own], "taking the project out again")
        workspace = spec["workspace"]
        roots = [workspace] + ([f"{workspace}/src"] if (tree / "src").is_dir() else [])
        # Each line a directory appended to sys.path after the environment's own
        # site-packages (the dependencies), in this order: the agent's code, then the
        # runner's packages.
        lines = ["# The task's repository as sessions see it", *roots,
                 "# The runner's packages (pytest), after everything the project brings",
                 *spec["runner"]]  # fmt: skip
        written = {PTH_FILE: "".join(f"{line}\n" for line in lines)}
        for item in installed:
            if item["name"] in own:
                written |= _metadata_record(item)
        # Written in the sandbox too: the build's code may have left symlinks in the
        # environment that would send a write from the host elsewhere.
        run([sys.executable, "-I", "-S", "-c", _WRITE_FILES, purelib, json.dumps(written)],
            "writing the environment's path file")  # fmt: skip
    _drop_set_id_bits(root)
    held = sorted(f"{i['name']}=={i['version']}" for i in installed if i["name"] not in own)
    return {"installed": held, "purelib": purelib, "python_version": RUNNING_PYTHON}


# Run by the interpreter running etude in the sandbox, standard library only:
# `python -I -S -c _WRITE_FILES DIR '{"relative path": "text", …}'`.
_WRITE_FILES = """import json, os, sys
for name, text in json.loads(sys.argv[2]).items():
    path = os.path.join(sys.argv[1], name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        out.write(text)
"""


def _create_venv(task: Task, python: str, root: Path) -> None:
    """An empty virtual environment at `root`, on the host: the standard library's venv
    module alone runs, nothing of the repository's."""
    done = subprocess.run(
        [python, "-I", "-m", "venv", "--without-pip", str(root)],
        capture_output=True, text=True, timeout=300, env={"PATH": os.defpath, "LANG": "C.UTF-8"},
    )  # fmt: skip
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip())[-2000:]
        raise EnvironmentBuildError(f"{task.id}: creating the environment failed: {said}")


PROJECT_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]*")
MAX_REPORT_BYTES = 64 * 1024**2


def _read_report(task: Task, path: Path) -> list[dict]:
    """What pip's report says it installed: name, version, where from, requirements. The
    report is written in the sandbox, so it is read as untrusted: not through a symlink,
    bounded, and each name and version checked before either names a file or goes to pip."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise ValueError("not a regular file")
            data = handle.read(MAX_REPORT_BYTES + 1)
        if len(data) > MAX_REPORT_BYTES:
            raise ValueError("too large")
        found = []
        for item in json.loads(data)["install"]:
            metadata = item["metadata"]
            name, version = metadata["name"], metadata["version"]
            if not (isinstance(name, str) and PROJECT_NAME.fullmatch(name)
                    and isinstance(version, str) and VERSION.fullmatch(version)):  # fmt: skip
                raise ValueError(f"a package named {name!r}, version {version!r}")
            url = (item.get("download_info") or {}).get("url")
            requires = [" ".join(str(r).split()) for r in metadata.get("requires_dist") or []]
            python = metadata.get("requires_python")
            found.append({
                "name": name, "version": version, "url": url if isinstance(url, str) else "",
                "requires_dist": requires,
                **({"requires_python": " ".join(str(python).split())} if python else {}),
            })  # fmt: skip
        return found
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise EnvironmentBuildError(
            f"{task.id}: pip's report of the build is unusable: {type(error).__name__}: "
            f"{str(error)[:200]}"
        ) from None


def _metadata_record(item: dict) -> dict[str, str]:
    """A record of the project with its metadata and no files (`NAME-VERSION.dist-info`):
    a project that reads its own installed metadata at import
    (`importlib.metadata.version(__name__)`, as humanize does) imports from the workspace.
    Its name, version and requirements only: no entry points, which would load the project
    (a pytest plugin) where nothing asked for it. pip lists it, and can uninstall it. The
    files it is made of, relative to site-packages."""
    name, version = item["name"], item["version"]
    info = f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in item["requires_dist"]]
    if "requires_python" in item:
        lines.append(f"Requires-Python: {item['requires_python']}")
    written = ["METADATA", "INSTALLER", "RECORD"]
    return {
        f"{info}/METADATA": "".join(f"{line}\n" for line in lines),
        f"{info}/INSTALLER": "etude\n",
        f"{info}/RECORD": "".join(f"{info}/{f},,\n" for f in written),
    }


def _drop_set_id_bits(root: Path) -> None:
    """Clear the set-user-id and set-group-id bits the build's code may have set: its files
    belong to the service's user on the host (root, when the service is), and such a file
    would run as that user for anyone on the host who can reach it. Every process of the
    build has ended, so nothing swaps a file for a symlink meanwhile."""
    for directory, subdirs, names in os.walk(root):
        for name in [*subdirs, *names]:
            path = os.path.join(directory, name)
            mode = os.lstat(path).st_mode
            if not stat.S_ISLNK(mode) and mode & (stat.S_ISUID | stat.S_ISGID):
                os.chmod(path, stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID))


def _write_marker(root: Path, text: str) -> None:
    """The marker, written last into a root whose other entries the build's code made:
    never through a symlink it may have left in its place."""
    directory = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        partial = f".{MARKER}.partial"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial, dir_fd=directory)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        with os.fdopen(os.open(partial, flags, 0o644, dir_fd=directory), "w") as out:
            out.write(text)
        os.rename(partial, MARKER, src_dir_fd=directory, dst_dir_fd=directory)
    finally:
        os.close(directory)


def _wheelhouse(task: Task, packages: PackageSource) -> Path | None:
    """The wheelhouse, resolved; never one that reaches the stack's credentials or data
    (etude.common.run_config.protected_dirs): the build's code reads it."""
    if packages.wheelhouse is None:
        return None
    real = Path(os.path.realpath(packages.wheelhouse))
    if not real.is_dir():
        raise EnvironmentBuildError(f"{task.id}: wheelhouse {packages.wheelhouse} is no directory")
    if (reached := protected_overlap(real, stack_protected_dirs())) is not None:
        raise EnvironmentBuildError(
            f"{task.id}: wheelhouse {packages.wheelhouse} reaches {reached}, the stack's own"
        )
    return real


def _allowed_hosts(task: Task, packages: PackageSource) -> frozenset[tuple[str, int]]:
    try:
        return index_hosts(packages.index_url, packages.index_hosts)
    except IndexHostError as error:
        raise EnvironmentBuildError(f"{task.id}: {error}") from None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock across processes and threads (each call opens its own file)."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
