"""What an episode's session opens, prepared on local disk: the task's repository, built once
per base commit from the sources the run registered, and its Python environment where the
run wants one (etude.tasks.provisioning), shared by the episodes that need them (one lock per
repository, so concurrent episodes of a group build it once; environments lock themselves,
across processes too).

A task that cannot be prepared (a repository no source holds, a commit it lacks, a
dependency no package source has) can never run: `TaskUnusableError` says why, and the
rollout worker fails the run with it rather than retrying."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from etude.rollout.worker import TaskUnusableError
from etude.tasks.materialize import materialize, repository_key
from etude.tasks.provisioning import PreparedTask, TaskProvisioning, python_environment
from etude.tasks.pyenv import EnvironmentBuildError
from etude.tasks.sources import RepositorySources
from etude.tasks.task import Task


class RepositoryCache:
    def __init__(self, cache_dir: Path, projects_dir: Path) -> None:
        self.cache_dir = cache_dir
        self.projects_dir = projects_dir
        self._locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
        self._guard = threading.Lock()

    def __call__(self, task: Task, sources: RepositorySources | None = None) -> Path:
        """The task's repository; one that is not bundled from `sources` (the run's)."""
        with self._guard:
            lock = self._locks[repository_key(task)]
        with lock:
            return materialize(task, self.cache_dir, self.projects_dir, sources=sources)


class TaskPreparer:
    """`TaskPreparation` from the provisioning each run registered with its tasks."""

    def __init__(
        self,
        repositories: RepositoryCache,
        provisioning_of: Callable[[str], Awaitable[TaskProvisioning]],
    ) -> None:
        """`provisioning_of(run id)`: the run's registered provisioning (RunTasks.provisioning),
        or a fixed one for the episodes of one run (the trainer's own)."""
        self.repositories = repositories
        self.provisioning_of = provisioning_of

    async def __call__(self, run_id: str, task: Task) -> PreparedTask:
        # Outside the guard below: Redis being away is no reason to fail the run.
        provisioning = await self.provisioning_of(run_id)
        return await asyncio.to_thread(self._prepare, task, provisioning)

    def _prepare(self, task: Task, provisioning: TaskProvisioning) -> PreparedTask:
        repositories = self.repositories
        with unusable_unless_built(task):
            repository = repositories(task, provisioning.sources)
            environment = python_environment(
                task, provisioning, repositories.cache_dir, repositories.projects_dir
            )
        return PreparedTask(repository, environment)


@contextlib.contextmanager
def unusable_unless_built(task: Task) -> Iterator[None]:
    """Any failure to build a task's repository or environment as TaskUnusableError: building
    is deterministic (a bad record, a missing checkout, a dependency nowhere to be found), so
    no retry can succeed."""
    try:
        yield
    except Exception as error:
        what = "Python environment" if isinstance(error, EnvironmentBuildError) else "repository"
        raise TaskUnusableError(f"{task.id}: its {what} cannot be built: {error}") from error
