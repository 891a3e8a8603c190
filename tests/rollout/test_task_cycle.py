"""The order in which a run's rollouts take its training tasks: every task once per pass,
the projects spread, another order each pass, and a resumed run where it left off."""

from __future__ import annotations

from etude.common.run_config import TasksConfig
from etude.rollout.client import TaskCycle
from etude.tasks.draw import project_of
from etude.tasks.taskset import load_taskset


def test_each_pass_of_the_cycle_takes_every_task_once_spreading_projects():
    train, _ = load_taskset(TasksConfig(train_limit=40))
    cycle = TaskCycle(train, seed=3)
    passes = [[cycle.next() for _ in train] for _ in range(2)]
    for drawn in passes:
        assert sorted(t.id for t in drawn) == sorted(t.id for t in train)
        # One task of each project before any project's second.
        assert len({project_of(t) for t in drawn[:10]}) == 10
    assert [t.id for t in passes[0]] != [t.id for t in passes[1]]
    resumed = TaskCycle(train, seed=3, cursor=len(train) + 5)
    assert [resumed.next().id for _ in range(5)] == [t.id for t in passes[1][5:10]]
