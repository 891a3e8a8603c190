"""Building a task's repository from its record, once, into a cache directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

from etude.tasks.repo import apply_patch, commit_snapshot, copy_files
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
    done = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repository, capture_output=True, text=True
    )
    return done.stdout.strip() if done.returncode == 0 else None


def materialize(
    task: Task,
    cache_dir: Path,
    projects_dir: Path = PROJECTS_DIR,
    checkouts_dir: Path | None = None,
) -> Path:
    """The task's repository at its base commit under `cache_dir/<task id>` (reused when
    already there and at the right commit)."""
    target = cache_dir / task.id
    if target.is_dir():
        if _head(target) == task.base_commit:
            return target
        shutil.rmtree(target, ignore_errors=True)  # stale: built from another commit
    # Several processes (rollout workers, the reward service) may build the same task at
    # once: each in its own staging directory; the first rename wins, the others find it.
    staging = cache_dir / f".{task.id}.partial-{os.getpid()}-{threading.get_ident()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        if task.repo.startswith(BUNDLED_PREFIX):
            commit = _bundled(task, projects_dir, staging)
        else:
            commit = _checkout(task, checkouts_dir, staging)
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


def _checkout(task: Task, checkouts_dir: Path | None, workdir: Path) -> str:
    """SWE-bench-style tasks: clone from a directory of checkouts (`owner__name` or
    `owner/name`) and check out the base commit."""
    if checkouts_dir is None:
        raise MaterializeError(f"{task.id}: needs --checkouts, a directory of repositories")
    candidates = [checkouts_dir / task.repo.replace("/", "__"), checkouts_dir / task.repo]
    source = next((c for c in candidates if (c / ".git").exists()), None)
    if source is None:
        raise MaterializeError(f"{task.id}: no checkout of {task.repo} in {checkouts_dir}")
    for args in (
        ["git", "clone", "-q", "--shared", "--no-checkout", str(source), str(workdir)],
        ["git", "-C", str(workdir), "checkout", "-q", task.base_commit],
    ):
        done = subprocess.run(args, capture_output=True, text=True)
        if done.returncode != 0:
            raise MaterializeError(f"{task.id}: {' '.join(args[:3])}: {done.stderr.strip()}")
    return _head(workdir) or ""
