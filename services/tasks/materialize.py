"""Building a task's repository from its record, once per base commit, into a cache
directory.

The repository is what the agent's sessions open and what grading starts from: one branch
at the base commit, and nothing of the fix (etude.tasks.repo.export_commit / seal). It
comes from one of three places: a bundled project (`etude-mini/<name>`), the project a task
was synthesized from by path (`metadata.origin`), or a SWE-bench-style task's git
repository; `RepositorySources` says where the last two are on this machine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

from etude.tasks.repo import (
    OBJECT_ID,
    CommitNotFoundError,
    GitError,
    LeakyRepositoryError,
    apply_patch,
    commit_snapshot,
    copy_files,
    export_commit,
    safe_git,
)
from etude.tasks.sources import RepositorySources, SourceNotFoundError
from etude.tasks.synth.sources import SourceError, source_of
from etude.tasks.synth.synthesize import Project, load_project
from etude.tasks.task import Task

BUNDLED_PREFIX = "etude-mini/"
PROJECTS_DIR = Path(__file__).resolve().parent / "etude_mini" / "projects"
TASKS_FILE = Path(__file__).resolve().parent / "etude_mini" / "tasks.jsonl"
LOCATE_TASKS_FILE = Path(__file__).resolve().parent / "etude_locate" / "tasks.jsonl"
"""etude-locate (etude.tasks.locate), on the same projects."""
LOCATE_STUBBED_TASKS_FILE = LOCATE_TASKS_FILE.with_name("stubbed.jsonl")
"""etude-locate with stubbed training tasks besides (a listing no policy can learn by heart)."""
BUNDLED_TASKSETS = {
    "etude-mini": TASKS_FILE,
    "etude-locate": LOCATE_TASKS_FILE,
    "etude-locate-stubbed": LOCATE_STUBBED_TASKS_FILE,
}
"""The task sets a run config names (`tasks.taskset`) without a path."""
BUNDLED_TASK_FILES = tuple(BUNDLED_TASKSETS.values())
"""What the reward service and the rollout workers know without configuration."""
# The projects held out of training (their tasks, their search queries), to measure
# generalization.
HELD_OUT_PROJECTS = frozenset({"urlroute", "throttle"})


class MaterializeError(RuntimeError):
    pass


def build_buggy_repository(project: Project, bug_patch: str, workdir: Path) -> str:
    """The project without its hidden tests, the bug applied, one commit; its id."""
    copy_files(project.root, workdir, [f for f in project.files if f not in project.test_files])
    apply_patch(workdir, bug_patch)
    return commit_snapshot(workdir, f"{project.name}: snapshot")


def _head(repository: Path) -> str | None:
    # `--git-dir`: a cache entry without its own .git must not answer with the HEAD of a
    # repository around the cache.
    done = subprocess.run(
        safe_git("--git-dir", str(repository / ".git"), "rev-parse", "HEAD"),
        capture_output=True, text=True,
    )  # fmt: skip
    return done.stdout.strip() if done.returncode == 0 else None


def repository_key(task: Task) -> str:
    """The cache entry of a task's repository: tasks on one commit of one repository share
    it."""
    if not OBJECT_ID.fullmatch(task.base_commit):
        # Also what keeps the key one path component inside the cache.
        raise MaterializeError(f"{task.id}: base_commit {task.base_commit!r} is not a commit id")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "__", task.repo).lstrip(".")
    return f"{name}@{task.base_commit}"


def materialize(
    task: Task,
    cache_dir: Path,
    projects_dir: Path = PROJECTS_DIR,
    checkouts_dir: Path | None = None,
    *,
    sources: RepositorySources | None = None,
) -> Path:
    """The task's repository at its base commit under `cache_dir` (reused when already
    there and at the right commit). Bundled tasks are built from `projects_dir`; the
    others from `sources` (see etude.tasks.sources), SWE-bench-style ones also from
    `checkouts_dir`, a directory of checkouts."""
    target = cache_dir / repository_key(task)
    if target.is_dir():
        if _head(target) == task.base_commit:
            return target
        shutil.rmtree(target, ignore_errors=True)  # stale: built from another commit
    # Several processes (rollout workers, the reward service) may build the same task at
    # once: each in its own staging directory; the first rename wins, the others find it.
    staging = cache_dir / f".{target.name}.partial-{os.getpid()}-{threading.get_ident()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        sources = (sources or RepositorySources()).with_checkouts(checkouts_dir)
        if task.repo.startswith(BUNDLED_PREFIX):
            commit = _bundled(task, projects_dir, staging)
        elif task.metadata.get("origin"):
            commit = _synthesized(task, sources.projects, staging)
        else:
            commit = _checkout(task, sources, staging)
        if commit != task.base_commit:
            raise MaterializeError(
                f"{task.id}: rebuilt commit {commit} differs from the record's "
                f"{task.base_commit}; the project changed since the task was made"
            )
        try:
            staging.rename(target)
        except OSError:
            if _head(target) != task.base_commit:
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _bundled(task: Task, projects_dir: Path, workdir: Path) -> str:
    name = task.repo.removeprefix(BUNDLED_PREFIX)
    project = load_project(projects_dir / name, name)
    expected = task.metadata.get("project_hash")
    if expected and project.hash != expected:
        raise MaterializeError(
            f"{task.id}: bundled project {name} has changed (hash {project.hash}, task made "
            f"from {expected}); synthesize the tasks again"
        )
    return build_buggy_repository(project, task.metadata.get("bug_patch", ""), workdir)


def _synthesized(task: Task, projects: tuple[Path, ...], workdir: Path) -> str:
    """Tasks synthesized from a project path: rebuilt as a bundled one is, from the same
    project given again (its name and content hash checked)."""
    try:
        with source_of(task, projects) as project:
            return build_buggy_repository(project, task.metadata.get("bug_patch", ""), workdir)
    except SourceError as error:
        raise MaterializeError(f"{task.id}: {error}") from error


def _checkout(task: Task, sources: RepositorySources, workdir: Path) -> str:
    """SWE-bench-style tasks: the base commit of the task's repository, alone."""
    try:
        return export_commit(sources.locate(task.repo), task.base_commit, workdir)
    except (SourceNotFoundError, CommitNotFoundError, GitError, LeakyRepositoryError) as error:
        raise MaterializeError(f"{task.id}: {error}") from error
