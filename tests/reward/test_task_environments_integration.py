"""A run's task whose project needs a package etude's own environment lacks, end to end
through real parts: a redis-server holding the run's registration (its sources, its
wheelhouse), the task prepared as a rollout worker prepares it, the environment and reward
services over gRPC on loopback, bubblewrap sandboxes.

* a session runs with the task's Python environment: the package imports, `python -m
  pytest` runs the project's tests, and the environment cannot be written to;
* the reward service grades the gold patch 1 and the untouched session 0 (the suite ran:
  the FAIL_TO_PASS test failed, the PASS_TO_PASS one passed);
* a run that turns environments off gets 0 with the import error as the reason;
* a run whose repository the reward service has no source of cannot be graded at all.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json

import pytest
import redis.asyncio as aioredis

from etude.api.v1 import common_pb2, reward_pb2, reward_pb2_grpc
from etude.common.grpc_client import open_channel
from etude.common.grpc_server import ServiceRuntime
from etude.common.run_config import TasksConfig
from etude.common.settings import ClientSettings, GrpcSettings
from etude.common.toolcalls import ToolCall
from etude.reward.client import GrpcReward, TaskUngradableError
from etude.reward.config import RewardConfig
from etude.reward.grader import Grader
from etude.reward.server import RewardServicer, registration
from etude.rollout.repositories import RepositoryCache, TaskPreparer
from etude.tasks.materialize import PROJECTS_DIR
from etude.tasks.store import TaskStore
from etude.tasks.taskset import RunTasks
from tests.environment.conftest import make_manager, serving
from tests.tasks.tiny_projects import DEPENDENCY, make_stats_task, tinydep_wheelhouse

pytestmark = pytest.mark.integration


def shell(command: str, index: int = 0) -> ToolCall:
    return ToolCall("run_terminal_command", {"command": command}, f"call_{index}")


async def score(address: str, request: reward_pb2.ScoreRequest) -> reward_pb2.ScoreResponse:
    async with open_channel(address, ClientSettings()) as channel:
        return await reward_pb2_grpc.RewardServiceStub(channel).Score(request, timeout=180)


async def test_a_task_needing_a_package_etude_lacks_runs_and_grades_in_its_environment(
    tmp_path, redis_url, bwrap
):
    assert importlib.util.find_spec(DEPENDENCY) is None  # only the task's environment has it
    task = make_stats_task(tmp_path / "upstream" / "stats")
    tasks = {
        "repositories": {"acme/stats": tmp_path / "upstream" / "stats"},
    }
    with_environment = TasksConfig(
        taskset="stats.jsonl", sources=tasks, packages={"wheelhouse": tinydep_wheelhouse(tmp_path)}
    )
    client = aioredis.Redis.from_url(redis_url)
    runs = RunTasks(client)
    await runs.ensure("stats-run", with_environment, [task])
    await runs.ensure("no-env-run", TasksConfig(taskset="stats.jsonl", sources=tasks,
                                                environments="off"), [task])  # fmt: skip

    # As a rollout worker does: from the run's registration, into the worker's task cache.
    prepare = TaskPreparer(RepositoryCache(tmp_path / "tasks", PROJECTS_DIR), runs.provisioning)
    prepared = await prepare("stats-run", task)
    environment = prepared.python_environment
    assert environment is not None and environment.parent == tmp_path / "tasks" / "envs"
    assert (await prepare("no-env-run", task)).python_environment is None

    manager = make_manager(tmp_path, repository_roots=(tmp_path / "tasks",))
    grader = Grader(
        RewardConfig(cache_dir=tmp_path / "reward-cache", tasks_files=(), timeout_seconds=60),
        bwrap,
    )
    try:
        async with serving(manager) as (sessions, _):
            reward = RewardServicer(grader, TaskStore(()), sessions, runs)
            runtime = ServiceRuntime(
                "reward", GrpcSettings(drain_seconds=0), [registration(reward)]
            )
            await runtime.start()
            try:
                opened = await sessions.create_session(
                    task.id, str(prepared.repository), python_environment=str(environment)
                )
                session = opened.session_id
                imported, tested, written = await sessions.execute(
                    session,
                    [
                        shell(f"python -c 'import {DEPENDENCY}, sys; "
                              f"print({DEPENDENCY}.double(21), sys.prefix)'", 0),
                        shell("python -m pytest -q -p no:cacheprovider tests", 1),
                        shell(f"touch {environment}/planted; echo >> {environment}/pyvenv.cfg",
                              2),
                    ],
                    parallel=False,
                )  # fmt: skip
                assert imported.result.exit_code == 0, imported.result.output
                assert imported.result.output.split()[:2] == ["42", str(environment)]
                assert tested.result.exit_code == 0, tested.result.output
                assert "1 passed" in tested.result.output
                assert written.result.exit_code != 0
                assert written.result.output.count("Read-only file system") == 2
                assert not (environment / "planted").exists()

                def asked(**fields) -> reward_pb2.ScoreRequest:
                    return reward_pb2.ScoreRequest(task_id=common_pb2.TaskId(value=task.id),
                                                   **fields)  # fmt: skip

                untouched = await score(
                    runtime.address,
                    asked(session_id=common_pb2.SessionId(value=session), run_id="stats-run"),
                )
                gold = await score(
                    runtime.address, asked(patch=task.gold_patch, run_id="stats-run")
                )
                without = await score(
                    runtime.address, asked(patch=task.gold_patch, run_id="no-env-run")
                )
                # A run whose repository this machine has no source of: no grading can
                # succeed, and the client says so (a rollout worker fails the run on it).
                moved = dataclasses.replace(task, id="acme__moved-1", repo="acme/moved")
                gone = tmp_path / "upstream" / "gone"
                await runs.ensure("moved-run", TasksConfig(
                    taskset="moved.jsonl", sources={"repositories": {"acme/moved": gone}},
                ), [moved])  # fmt: skip
                client_of_moved = GrpcReward(runtime.address, run_id="moved-run")
                try:
                    with pytest.raises(TaskUngradableError, match=f"{gone} is not a git repo"):
                        await client_of_moved.score(moved.id, patch=task.gold_patch)
                finally:
                    await client_of_moved.close()
            finally:
                await runtime.shutdown()
    finally:
        await manager.close_all()
        await client.aclose()

    def outcomes(reply) -> dict[str, bool]:
        return {o.test_id: o.passed for o in (*reply.fail_to_pass, *reply.pass_to_pass)}

    assert (gold.reward, gold.error) == (1.0, ""), gold.error
    assert (untouched.reward, untouched.error) == (0.0, ""), untouched.error
    assert outcomes(untouched) == {
        "tests/test_stats.py::test_one_value": False,
        "tests/test_stats.py::test_empty": True,
    }
    assert without.reward == 0.0
    assert "could not run" in without.error and f"No module named '{DEPENDENCY}'" in without.error
    # The reward service built its own environment, from the same registration.
    built = [json.loads((p / "etude-environment.json").read_text())["installed"]
             for p in (tmp_path / "reward-cache" / "envs").iterdir() if p.is_dir()]  # fmt: skip
    assert built == [[f"{DEPENDENCY}==1.0"]]
