"""What the tests of scripted demonstrations share: the training tasks, a sample of them, the
tasks with their hints (stored ones, else computed for the sample, the real way), playing a
script offline or in a real session, and grading a session's diff with the real Grader."""

from __future__ import annotations

import functools
import random
import tempfile
from pathlib import Path

from etude.environment.local import InProcessEnvironment
from etude.reward.grader import Grader
from etude.reward.types import Score
from etude.sandbox.bwrap import find_bwrap
from etude.tasks.hinting import hint_all
from etude.tasks.materialize import TASKS_FILE
from etude.tasks.task import Task, read_jsonl

ALL_TASKS = list(read_jsonl(TASKS_FILE))
TRAIN_TASKS = [t for t in ALL_TASKS if t.split == "train"]
HINTED_TIERS = (1, 2, 3)


def sample(tasks: list[Task], extra: int = 3) -> list[Task]:
    """Every project and every mutation kind at least once (ids read
    `etude-mini.<project>.<mutation>.<hash>`), in few tasks, and a few more at random."""
    chosen: list[Task] = []
    projects: set[str] = set()
    kinds: set[str] = set()
    for new_needed in (2, 1):  # first tasks that bring a new project and a new kind
        for task in tasks:
            _, project, kind, _ = task.id.split(".")
            if task not in chosen and (project not in projects) + (kind not in kinds) >= new_needed:
                chosen.append(task)
                projects.add(project)
                kinds.add(kind)
    rest = [t for t in tasks if t not in chosen]
    return chosen + random.Random(7).sample(rest, extra)


@functools.cache
def hinted_tasks() -> tuple[Task, ...]:
    """Training tasks that carry hints: every one when the bundled tasks store them, else the
    sample with hints computed as `etude tasks hints` does (the traceback from running the
    hidden tests in a sandbox)."""
    stored = tuple(t for t in TRAIN_TASKS if "hints" in t.metadata)
    if stored:
        return stored
    with tempfile.TemporaryDirectory(prefix="etude-hints-") as scratch:
        results = hint_all(sample(TRAIN_TASKS), Path(scratch), find_bwrap(None), workers=2)
    problems = [r.problem for r in results if r.problem]
    assert not problems, problems
    return tuple(r.task for r in results)


def fixed_text(task: Task, path: str) -> str:
    """The file as the gold patch leaves it: a bundled project holds the fixed code."""
    project = task.repo.removeprefix("etude-mini/")
    return (TASKS_FILE.parent / "projects" / project / path).read_text()


class SessionGrader:
    """The reward service's grading, in process: the session's diff through the Grader."""

    def __init__(self, environment: InProcessEnvironment, grader: Grader, tasks: list[Task]):
        self.environment, self.grader = environment, grader
        self.tasks = {t.id: t for t in tasks}

    async def score(self, task_id: str, *, session_id: str = "", patch: str = "") -> Score:
        diff = (await self.environment.diff(session_id)).unified_diff
        return await self.grader.score(self.tasks[task_id], diff)
