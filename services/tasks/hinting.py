"""Computing the hints of a task set (`etude tasks hints`): materialize each task's buggy
repository, run its first failing test for the traceback, locate the function the fix
changes, and store the result in `metadata["hints"]`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from etude.sandbox.bwrap import Bwrap
from etude.sandbox.config import SandboxConfig
from etude.tasks.grading_config import UnsupportedTestCommand
from etude.tasks.hints import HintError, Hints, locate
from etude.tasks.materialize import PROJECTS_DIR, MaterializeError, materialize
from etude.tasks.repo import PatchError
from etude.tasks.sources import RepositorySources
from etude.tasks.task import Task
from etude.tasks.tracebacks import TracebackError, first_failure


@dataclass(frozen=True, slots=True)
class HintResult:
    task: Task
    """The task with `metadata["hints"]` set, or without any hints when they failed."""
    problem: str = ""
    """Why no hints could be computed ("" when they were)."""


def with_hints(task: Task, hints: Hints | None) -> Task:
    metadata = {k: v for k, v in task.metadata.items() if k != "hints"}
    if hints is not None:
        metadata["hints"] = hints.to_dict()
    return dataclasses.replace(task, metadata=metadata)


def compute_hints(
    task: Task,
    cache_dir: Path,
    bwrap: Bwrap | None,
    *,
    projects_dir: Path = PROJECTS_DIR,
    checkouts_dir: Path | None = None,
    sandbox: SandboxConfig | None = None,
    sources: RepositorySources | None = None,
) -> Hints:
    """`sources` (and `checkouts_dir`): where the task's repository comes from when it is
    not bundled (etude.tasks.sources)."""
    repository = materialize(task, cache_dir, projects_dir, checkouts_dir, sources=sources)
    traceback = first_failure(task, repository, bwrap=bwrap, sandbox=sandbox)
    return locate(task, repository, traceback)


def hint_all(
    tasks: list[Task],
    cache_dir: Path,
    bwrap: Bwrap | None,
    *,
    workers: int = 2,
    checkouts_dir: Path | None = None,
    sandbox: SandboxConfig | None = None,
    sources: RepositorySources | None = None,
    on_done: Callable[[HintResult], None] = lambda result: None,
) -> list[HintResult]:
    """Every task with its hints (in input order); a task whose hints fail keeps none and
    says why (stale hints from an earlier computation are dropped). `sandbox`: the limits
    and binds of the test runs (grading's); unset, the defaults."""

    def one(task: Task) -> HintResult:
        try:
            hints = compute_hints(
                task, cache_dir, bwrap, checkouts_dir=checkouts_dir, sandbox=sandbox,
                sources=sources,
            )  # fmt: skip
            result = HintResult(with_hints(task, hints))
        except (HintError, TracebackError, MaterializeError, PatchError,
                UnsupportedTestCommand) as error:  # fmt: skip
            problem = str(error) if task.id in str(error) else f"task {task.id}: {error}"
            result = HintResult(with_hints(task, None), problem)
        on_done(result)
        return result

    with ThreadPoolExecutor(max(1, workers)) as pool:
        return list(pool.map(one, tasks))
