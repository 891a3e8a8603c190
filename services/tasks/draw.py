"""Drawing tasks across projects: one from each project in turn, so the first N tasks of a
run (or of a pass over them) span every project instead of exhausting the first one."""

from __future__ import annotations

import random
from collections.abc import Sequence

from etude.tasks.task import Task


def project_of(task: Task) -> str:
    return str(task.metadata.get("project") or task.repo)


def round_robin(tasks: Sequence[Task], seed: int | str) -> list[Task]:
    """Every task once: projects in a seeded order, each project's tasks in a seeded order
    (its own, so one project's order does not change when another's tasks do), taken one
    per project in turn until each is exhausted."""
    by_project: dict[str, list[Task]] = {}
    for task in tasks:
        by_project.setdefault(project_of(task), []).append(task)
    projects = sorted(by_project)
    random.Random(f"{seed}/projects").shuffle(projects)
    queues = []
    for name in projects:
        members = sorted(by_project[name], key=lambda t: t.id)  # not the file's order
        random.Random(f"{seed}/{name}").shuffle(members)
        queues.append(members)
    drawn = []
    for turn in range(max((len(q) for q in queues), default=0)):
        drawn += [q[turn] for q in queues if turn < len(q)]
    return drawn


def split_by_project(tasks: Sequence[Task], seed: int | str) -> tuple[list[Task], list[Task]]:
    """(first, second): the projects in a seeded order, the first half of them (rounded up)
    and the rest, each side keeping `tasks`' order. No project has tasks on both sides."""
    projects = sorted({project_of(t) for t in tasks})
    random.Random(f"{seed}/halves").shuffle(projects)
    first_projects = set(projects[: (len(projects) + 1) // 2])
    first: list[Task] = []
    second: list[Task] = []
    for task in tasks:
        (first if project_of(task) in first_projects else second).append(task)
    return first, second
