"""Drawing tasks across projects, on a bundled task set."""

from __future__ import annotations

from etude.common.run_config import TasksConfig
from etude.tasks.draw import project_of, round_robin, split_by_project
from etude.tasks.taskset import load_taskset


def training_tasks():
    return load_taskset(TasksConfig(taskset="etude-locate-stubbed", hint_tier=3))[0]


def test_the_first_tasks_drawn_span_every_project():
    tasks = training_tasks()
    projects = {project_of(t) for t in tasks}
    drawn = round_robin(tasks, seed=3)
    assert sorted(t.id for t in drawn) == sorted(t.id for t in tasks)
    assert {project_of(t) for t in drawn[: len(projects)]} == projects


def test_project_halves_share_no_project_keep_every_task_and_follow_the_seed():
    tasks = training_tasks()
    first, second = split_by_project(tasks, seed=0)
    assert first and second
    assert not {project_of(t) for t in first} & {project_of(t) for t in second}
    assert sorted(t.id for t in first + second) == sorted(t.id for t in tasks)
    assert [t.id for t in first] == [t.id for t in tasks if t in first]  # order kept
    projects = len({project_of(t) for t in tasks})
    assert len({project_of(t) for t in first}) == (projects + 1) // 2
    assert split_by_project(tasks, seed=0) == (first, second)
    halves = {frozenset(project_of(t) for t in split_by_project(tasks, s)[0]) for s in range(5)}
    assert len(halves) > 1  # the seed chooses the halves
    one_project = [t for t in tasks if project_of(t) == project_of(tasks[0])]
    assert split_by_project(one_project, seed=0) == (one_project, [])
