"""Which task the reward grades: the one registered with the request's run (a real Redis),
the bundled sets' when the request names no run, and a clear error otherwise."""

from __future__ import annotations

import dataclasses

import pytest
import redis.asyncio as aioredis

from etude.common.run_config import TasksConfig
from etude.reward.scoring import NoRunTasksError, TaskGrading
from etude.tasks.materialize import TASKS_FILE
from etude.tasks.store import TaskNotFoundError, TaskStore
from etude.tasks.task import read_jsonl
from etude.tasks.taskset import RunTasks

BUNDLED = list(read_jsonl(TASKS_FILE))


async def test_a_task_is_found_in_its_run_s_registered_set(redis_url):
    client = aioredis.Redis.from_url(redis_url)
    try:
        runs = RunTasks(client)
        mine = [dataclasses.replace(t, id=f"mine-{i}") for i, t in enumerate(BUNDLED[:2])]
        await runs.ensure("r", TasksConfig(taskset="mine.jsonl"), mine)
        grading = TaskGrading(None, TaskStore((TASKS_FILE,)), None, runs)
        assert await grading.task("mine-1", "r") == mine[1]
        assert await grading.task(BUNDLED[0].id, "") == BUNDLED[0]  # no run: the bundled sets
        with pytest.raises(TaskNotFoundError, match="run 'r' has no task"):
            await grading.task(BUNDLED[0].id, "r")  # not one of this run's
        with pytest.raises(TaskNotFoundError, match="run 'other' has no registered task set"):
            await grading.task("mine-1", "other")
    finally:
        await client.aclose()
    without_redis = TaskGrading(None, TaskStore(()), None)
    with pytest.raises(NoRunTasksError, match="run 'r'"):
        await without_redis.task("mine-1", "r")
