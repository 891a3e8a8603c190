"""How a run knows its tasks and how it ends, through real services: the package's local
stack (redis-server, inference, environment, reward), rollout workers as processes, the
run driver in this process or as an `etude train` process.

* a task set from a JSONL file (copies of bundled tasks under new ids) is registered with
  the run, and every part finds its tasks there: the run trains, SFT skipped for want of
  anything to demonstrate;
* a task set of a git repository made here, given by `tasks.sources.repositories`, whose
  project needs a package only a wheelhouse made here has: the workers, the trainer's own
  episodes and the reward service build it from the run's registered sources, each episode
  in the task's Python environment; SFT and 2 RL steps;
* a rollout whose task the run does not have, or whose repository cannot be built (a
  bundled project that does not exist, a repository no source holds), fails the run at once
  with the reason, and its entry is not retried into the dead-letter stream;
* a run whose `etude train` process is killed is ended by the gateway's reaper: `stopped`
  when a stop was asked for, else `failed`;
* a run whose rollout workers all die while its trainer lives fails with their exit codes;
  one whose workers all hang reaches `stopped` when a stop is asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
import yaml
from fastapi.testclient import TestClient

from etude.common.auth import bearer_header
from etude.common.run_config import parse_run_config
from etude.common.runs import RunFailedError, RunRecord, RunRegistry
from etude.common.settings import get_settings
from etude.common.trajectory_log import read_trajectories
from etude.gateway.app import create_app
from etude.gateway.launcher import RecordOnlyLauncher
from etude.rollout.client import TaskCycle
from etude.rollout.streams import rollout_stream
from etude.tasks.materialize import TASKS_FILE
from etude.tasks.task import read_jsonl, write_jsonl
from etude.trainer.driver import Driver
from etude.trainer.run import TrainingRun
from tests.tasks.tiny_projects import make_stats_task, tinydep_wheelhouse
from tests.trainer.conftest import endpoints, register, worker_spec

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
# Short episodes: the run's plumbing is under test, not the policy.
RUN = {
    "name": "ends",
    "tasks": {"train_limit": 2, "eval_limit": 0},
    "sft": {"enabled": False},
    "rollout": {"group_size": 2, "groups_per_step": 1, "over_provision": 0, "max_staleness": 0,
                "max_turns": 2, "max_new_tokens": 32, "max_episode_tokens": 1800,
                "concurrency": 4},
    "trainer": {"steps": 2, "lr": 1e-4, "micro_batch": 2},
}  # fmt: skip


def copies(path: Path, **changes: Any) -> Path:
    """Two training tasks and one held-out task of etude-mini under ids of their own, as a
    user's JSONL file would bring them."""
    bundled = list(read_jsonl(TASKS_FILE))
    train = [t for t in bundled if t.split == "train"][:2]
    held_out = [t for t in bundled if t.split != "train"][:1]
    mine = [
        dataclasses.replace(t, id=f"mine-{i}", **changes) for i, t in enumerate([*train, *held_out])
    ]
    write_jsonl(path, mine)
    return path


class Quiet:
    """The driver's RunView, keeping what it is shown."""

    def __init__(self) -> None:
        self.shown: dict[str, Any] = {}

    def phase(self, text: str) -> contextlib.AbstractContextManager[Callable[[RunRecord], None]]:
        return contextlib.nullcontext(lambda record: None)

    def engines(self, addresses) -> None: ...

    def policy_saved(self, path: str) -> None: ...

    @contextlib.contextmanager
    def rl(self, steps: int) -> Iterator[Callable[[RunRecord], None]]:
        yield lambda record: None

    def summary(self, run_id: str, summary: dict[str, Any], output_dir: Path) -> None:
        self.shown = summary


async def record_of(redis_url: str, run_id: str) -> RunRecord:
    client = aioredis.Redis.from_url(redis_url)
    try:
        return await RunRegistry(client).get(run_id)
    finally:
        await client.aclose()


async def test_a_run_on_a_jsonl_task_set_of_its_own_trains(stack, tmp_path):
    """Tasks the bundled sets do not have, by id: the workers, the reward service and the
    trainer's own episodes find them in the run's registered set. None has a gold patch, so
    there is nothing to demonstrate: SFT is skipped with the reason, RL trains 2 steps."""
    path = copies(tmp_path / "my.jsonl", gold_patch="")
    config = parse_run_config({
        **RUN, "output_dir": str(tmp_path / "out"),
        "tasks": {"taskset": str(path), "eval_limit": 1},
        "sft": {"steps": 1, "batch_size": 1},
    })  # fmt: skip
    view = Quiet()
    driver = Driver(config, None, stack.settings, endpoints(stack), view, stack=stack)
    assert await asyncio.wait_for(driver.main(resume=False), timeout=240) == 0
    record = await record_of(endpoints(stack).redis_url, driver.run_id)
    assert (record.status, record.step, record.error) == ("finished", 2, "")
    assert record.heartbeat_ms > 0
    shown = view.shown
    assert "none of 2 tasks could be demonstrated (unscriptable 2)" in shown["sft_skipped"]
    assert shown["steps"] == 2
    assert shown["eval_before"]["episodes"] == shown["eval_after"]["episodes"] == 1
    trained = [json.loads(line) for line in (Path(record.output_dir) / "metrics.jsonl").open()]
    assert [r["step"] for r in trained if r["phase"] == "rl"] == [1, 2]


async def test_a_run_on_a_repository_of_its_own_trains_in_the_task_s_environment(stack, tmp_path):
    """acme/stats from its own git repository (the fix in its history), its dependency from
    a wheelhouse: nothing of it is bundled or installed where etude runs. SFT demonstrates
    the task through the real services, then RL trains 2 steps; every score is the hidden
    tests' verdict in the task's environment (a missing dependency would be a suite error)."""
    task = make_stats_task(tmp_path / "repos" / "stats")
    path = tmp_path / "stats.jsonl"
    write_jsonl(path, [task])
    config = parse_run_config({
        **RUN, "output_dir": str(tmp_path / "out"),
        "tasks": {"taskset": str(path), "eval_limit": 0,
                  "sources": {"repositories": {"acme/stats": str(tmp_path / "repos" / "stats")}},
                  "packages": {"wheelhouse": str(tinydep_wheelhouse(tmp_path))}},
        "sft": {"steps": 1, "batch_size": 1},
        # Room for the scripted demonstration: search, read, edit, submit.
        "rollout": {**RUN["rollout"], "max_turns": 6, "max_episode_tokens": 3072},
    })  # fmt: skip
    view = Quiet()
    driver = Driver(config, None, stack.settings, endpoints(stack), view, stack=stack)
    assert await asyncio.wait_for(driver.main(resume=False), timeout=300) == 0
    record = await record_of(endpoints(stack).redis_url, driver.run_id)
    assert (record.status, record.step, record.error) == ("finished", 2, "")
    shown = view.shown
    assert "sft_skipped" not in shown and shown["sft_steps"] == 1, shown
    trained = [json.loads(line) for line in (Path(record.output_dir) / "metrics.jsonl").open()]
    assert [r["step"] for r in trained if r["phase"] == "rl"] == [1, 2]
    # What the run ran with, and what the agent did in each kept trajectory.
    run_dir = Path(record.output_dir)
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["tasks"]["taskset"] == str(path)
    assert "torch" in json.loads((run_dir / "versions.json").read_text())
    kept = read_trajectories(run_dir, limit=100)
    assert sorted(r["step"] for r in kept) == [1, 1, 2, 2]  # one group of 2 per step, all kept
    for trajectory in kept:
        assert trajectory["task_id"] == task.id and trajectory["grading_error"] == ""
        assert set(trajectory["fail_to_pass"]) == set(task.fail_to_pass)
        roles = [m["role"] for m in trajectory["messages"]]
        assert roles[0] == "prompt" and "policy" in roles
    # One environment of the task's dependencies, shared by the workers, the trainer and the
    # reward service of this machine, built from the registered wheelhouse.
    [environment] = (stack.run_dir / "tasks" / "envs").glob("acme__stats@*")
    assert "tinydep==1.0" in (environment / "etude-environment.json").read_text()


async def test_a_task_whose_repository_no_source_holds_fails_the_run_with_the_reason(
    stack, tmp_path
):
    task = make_stats_task(tmp_path / "repos" / "stats")
    path = tmp_path / "stats.jsonl"
    write_jsonl(path, [task])
    missing = tmp_path / "repos" / "moved-away"
    config = parse_run_config({
        **RUN, "output_dir": str(tmp_path / "out"),
        "tasks": {"taskset": str(path), "eval_limit": 0,
                  "sources": {"repositories": {"acme/stats": str(missing)}}},
    })  # fmt: skip
    driver = Driver(config, None, stack.settings, endpoints(stack), Quiet(), stack=stack)
    started = time.monotonic()
    with pytest.raises(RunFailedError, match="its repository cannot be built"):
        await asyncio.wait_for(driver.main(resume=False), timeout=120)
    assert time.monotonic() - started < 60
    record = await record_of(endpoints(stack).redis_url, driver.run_id)
    assert record.status == "failed"
    assert "TaskUnusableError" in record.error, record.error
    assert f"acme/stats: {missing} is not a git repository" in record.error, record.error


async def test_a_rollout_of_a_task_the_run_does_not_have_fails_the_run_at_once(stack, tmp_path):
    config = parse_run_config({**RUN, "output_dir": str(tmp_path)})
    where = endpoints(stack)
    run_id = await register(where.redis_url, config)
    run = TrainingRun(run_id, config, where, stack.settings)
    await run.setup()
    # The orchestrator asks for a task that is not in the run's registered set.
    ghost = dataclasses.replace(run.rl_tasks[0], id="ghost-task")
    run.orchestrator.tasks = TaskCycle([ghost], seed=0)
    stack.add_service(worker_spec("rollout-ghost", run_id))
    started = time.monotonic()
    try:
        with pytest.raises(RunFailedError, match="has no task 'ghost-task'"):
            await asyncio.wait_for(run.rl(lambda: run.registry.should_stop(run_id)), 60)
        took = time.monotonic() - started
        stack.stop_service("rollout-ghost")  # it finishes what it took
        stream = rollout_stream(run_id)
        # Both entries of the group were processed once: acknowledged, never dead-lettered.
        assert (await run.redis.xpending(stream, "rollout"))["pending"] == 0
        assert await run.redis.xlen(f"{stream}:dead") == 0
    finally:
        stack.stop_service("rollout-ghost")
        await run.close()
    assert took < 20, f"the run took {took:.0f} s to fail"
    record = await record_of(where.redis_url, run_id)
    assert record.status == "failed"
    assert "TaskNotFoundError" in record.error and "ghost-task" in record.error


async def test_a_task_whose_repository_cannot_be_built_fails_the_run_with_the_reason(
    stack, tmp_path
):
    path = copies(tmp_path / "broken.jsonl", repo="etude-mini/no-such-project")
    config = parse_run_config(
        {
            **RUN,
            "output_dir": str(tmp_path / "out"),
            "tasks": {"taskset": str(path), "eval_limit": 0},
        }
    )
    driver = Driver(config, None, stack.settings, endpoints(stack), Quiet(), stack=stack)
    with pytest.raises(RunFailedError, match="its repository cannot be built"):
        await asyncio.wait_for(driver.main(resume=False), timeout=120)
    record = await record_of(endpoints(stack).redis_url, driver.run_id)
    assert record.status == "failed"
    assert "TaskUnusableError" in record.error and "no-such-project" in record.error


@pytest.mark.parametrize("stop", [True, False], ids=["stopped", "not-stopped"])
def test_stop_reaches_stopped_after_the_trainer_process_is_killed(stack, tmp_path, stop):
    """Killed in its RL loop, the trainer leaves its run `running`; the gateway's reaper ends
    it once the heartbeat is over 3 s old: `stopped` when a stop was asked for (the stop
    reaches `stopped`), else `failed` — never `running` or `stopping` for nobody."""
    run_id = f"killed-trainer-{stop}"
    config = tmp_path / "run.yaml"
    long_run = {**RUN, "trainer": {**RUN["trainer"], "steps": 500}}
    config.write_text(yaml.safe_dump({**long_run, "output_dir": str(tmp_path / "out")}))
    env = {**os.environ, "ETUDE_RUNS__HEARTBEAT_SECONDS": "0.5"}
    argv = [sys.executable, "-m", "etude.cli", "train", str(config), "--run-id", run_id,
            "--run-dir", str(stack.run_dir)]  # fmt: skip
    with open(tmp_path / "train.log", "wb") as log:
        trainer = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    app = create_app(endpoints(stack).redis_url, RecordOnlyLauncher(),
                     driver_timeout_seconds=3, reap_interval_seconds=0.5)  # fmt: skip
    operator = bearer_header(get_settings().auth, "operator")
    try:
        with TestClient(app, headers=operator) as gateway:

            def show() -> dict:
                return gateway.get(f"/runs/{run_id}").json()

            deadline = time.monotonic() + 90
            # Killed in its RL loop: rollouts queued, a worker taking them.
            while not (show().get("status") == "running" and _rollouts_queued(stack, run_id)):
                assert trainer.poll() is None, (tmp_path / "train.log").read_text()[-3000:]
                assert time.monotonic() < deadline, show()
                time.sleep(0.3)
            os.killpg(trainer.pid, signal.SIGKILL)  # the trainer, and its workers with it
            trainer.wait(timeout=10)
            if stop:
                asked = gateway.post(f"/runs/{run_id}/stop")
                assert asked.status_code == 202 and asked.json()["status"] == "stopping"
            deadline = time.monotonic() + 15
            while (record := show())["status"] in ("running", "stopping"):
                assert time.monotonic() < deadline, record
                time.sleep(0.2)
            assert record["status"] == ("stopped" if stop else "failed"), record
            assert "no heartbeat from the run's driver" in record["error"]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(trainer.pid, signal.SIGKILL)


async def _driving_rl(stack, tmp_path) -> tuple[Driver, asyncio.Task]:
    """A driver in its RL loop (many steps ahead), its workers started and rollouts queued."""
    config = parse_run_config({
        **RUN, "output_dir": str(tmp_path / "out"),
        "trainer": {**RUN["trainer"], "steps": 500},
    })  # fmt: skip
    driver = Driver(config, None, stack.settings, endpoints(stack), Quiet(), stack=stack)
    main = asyncio.create_task(driver.main(resume=False))
    deadline = time.monotonic() + 120
    while not (driver.workers and await asyncio.to_thread(_rollouts_queued, stack, driver.run_id)):
        assert not main.done(), main.result()
        assert time.monotonic() < deadline, "the run never reached its RL loop"
        await asyncio.sleep(0.3)
    return driver, main


async def test_a_run_whose_rollout_workers_all_die_fails_with_their_exit_codes(stack, tmp_path):
    """No worker left, no rollouts will come: the run fails within seconds, naming them, and
    does not wait in `running` for ever beside a live trainer."""
    driver, main = await _driving_rl(stack, tmp_path)
    for name in driver.workers:
        stack.processes[name].kill()
    started = time.monotonic()
    with pytest.raises(RunFailedError, match="every rollout worker exited"):
        await asyncio.wait_for(main, timeout=60)
    assert time.monotonic() - started < 15
    record = await record_of(endpoints(stack).redis_url, driver.run_id)
    assert record.status == "failed"
    assert f"rollout-{driver.run_id}-0 (exit code -9)" in record.error, record.error


async def test_stop_reaches_stopped_when_every_rollout_worker_hangs(stack, tmp_path):
    """Workers alive but stuck (stopped by SIGSTOP: a hung sandbox, a swapped-out host)
    answer nothing: the stop does not wait for their rollouts, and a worker that ignores its
    SIGTERM is killed after the stack's stop timeout."""
    driver, main = await _driving_rl(stack, tmp_path)
    hung = [stack.processes[name] for name in driver.workers]
    for process in hung:
        os.kill(process.pid, signal.SIGSTOP)
    try:
        client = aioredis.Redis.from_url(endpoints(stack).redis_url)
        try:
            asked = await RunRegistry(client).request_stop(driver.run_id)
        finally:
            await client.aclose()
        assert asked.status == "stopping"
        limit = stack.settings.stack.stop_timeout_seconds + 30
        assert await asyncio.wait_for(main, timeout=limit) == 0
    finally:
        for process in hung:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
    record = await record_of(endpoints(stack).redis_url, driver.run_id)
    assert (record.status, record.stop_requested) == ("stopped", True)
    assert all(process.poll() is not None for process in hung)


def _rollouts_queued(stack, run_id: str) -> bool:
    async def length() -> int:
        client = aioredis.Redis.from_url(endpoints(stack).redis_url)
        try:
            return await client.xlen(rollout_stream(run_id))
        finally:
            await client.aclose()

    return asyncio.run(length()) > 0
