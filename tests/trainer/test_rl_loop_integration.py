"""The RL loop through real services: a redis-server, the inference, environment and reward
services and rollout workers as processes on loopback, the trainer in this process."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import urllib.request

import pytest
import redis.asyncio as aioredis
import torch

from etude.common.processes import pid_alive
from etude.common.run_config import parse_run_config
from etude.common.settings import QueueSettings
from etude.inference.client import GrpcInference
from etude.model.checkpoint import from_pretrained
from etude.rollout.client import Orchestrator, TaskCycle
from etude.rollout.streams import rollout_queue, rollout_stream, trajectory_queue
from etude.tasks.draw import project_of
from etude.tasks.taskset import RunTasks
from etude.trainer import checkpoint
from etude.trainer.run import TrainingRun
from etude.trainer.trainer import PolicyTrainer
from tests.trainer.conftest import endpoints, finished, register, worker_spec

pytestmark = pytest.mark.integration

# Short episodes: the loop, not the policy's skill, is under test. No staleness, so every
# token is sampled by the weights the trainer steps from (their numerics must agree).
LOOP_CONFIG = {
    "name": "loop",
    "tasks": {"train_limit": 2, "eval_limit": 0},
    "sft": {"enabled": False},
    "rollout": {"group_size": 2, "groups_per_step": 2, "over_provision": 0, "max_staleness": 0,
                "max_turns": 2,
                "max_new_tokens": 32, "max_episode_tokens": 1800, "concurrency": 4},
    "trainer": {"steps": 2, "lr": 1e-4, "micro_batch": 2, "keep_checkpoints": 3},
}  # fmt: skip


async def test_two_tasks_two_rollouts_two_steps_and_an_exact_resume(stack, tmp_path):
    config = parse_run_config({**LOOP_CONFIG, "output_dir": str(tmp_path)})
    where = endpoints(stack)
    run_id = await register(where.redis_url, config)
    run = TrainingRun(run_id, config, where, stack.settings)
    await run.setup()
    await run.publish()
    start_version = run.state.policy_version
    worker = stack.add_service(worker_spec("rollout-loop", run_id))
    batches = {}
    try:
        steps = await run.rl(
            stop_requested=_never,
            on_batch=lambda step, groups, stats: batches.__setitem__(step, (groups, stats)),
        )
        with urllib.request.urlopen(worker.metrics_url, timeout=5) as page:
            worker_metrics = page.read().decode()
    finally:
        stack.stop_service("rollout-loop")
    assert "etude_rollout_seconds_count" in worker_metrics
    assert f'etude_queue_depth{{stream="etude:{run_id}:rollouts"}}' in worker_metrics
    assert steps == 2
    for groups, stats in batches.values():
        assert sorted(len(g) for g in groups) == [2, 2]  # G = 2 rollouts of each of 2 tasks
        assert {t.task_id for g in groups for t in g} <= {t.id for t in run.train_tasks}
        assert stats.tokens > 0 and stats.mismatch_kl < 1e-3  # trainer ≈ sampler numerics
        for t in (t for g in groups for t in g):
            assert len(t.token_ids) == len(t.logprobs) == len(t.policy_versions) == len(t.loss_mask)
            assert t.turns >= 1 and t.finish_reason
    inference = GrpcInference(where.inference[0])
    try:
        assert (await inference.get_policy()).version == start_version + 2
    finally:
        await inference.close()
    history = run.reporter.history()
    assert [r["step"] for r in history] == [1, 2]
    assert history[-1]["policy_version"] == start_version + 2
    with urllib.request.urlopen(run.metrics_url, timeout=5) as page:
        exported = page.read().decode()
    assert f"etude_trainer_policy_version {float(start_version + 2)}" in exported
    assert "etude_trainer_staleness_bucket" in exported
    assert "etude_trainer_weight_sync_seconds_count" in exported
    await finished(run)

    # Resume from step 1: the same step-2 batch gives the identical loss.
    model = from_pretrained(config.policy.init, seed=config.policy.seed)
    resumed = PolicyTrainer(model, config.trainer)
    state = checkpoint.load(checkpoint.step_dir(run.checkpoint_dir, 1), model, resumed.optimizer)
    assert state.step == 1 and "orchestrator" in state.extra
    groups, stats = batches[2]
    again = resumed.step(groups)
    assert again.loss == stats.loss and again.grad_norm == stats.grad_norm


async def _never() -> bool:
    return False


async def one_group_scheduled(stack, tmp_path, queue: QueueSettings, **rollout):
    """A registered run whose orchestrator has put one group of rollouts on the queue; the
    test starts the workers. Returns (run id, Redis client, orchestrator)."""
    config = parse_run_config({
        **LOOP_CONFIG, "output_dir": str(tmp_path),
        "rollout": {**LOOP_CONFIG["rollout"], "groups_per_step": 1, **rollout},
    })  # fmt: skip
    where = endpoints(stack)
    run_id = await register(where.redis_url, config)
    client = aioredis.Redis.from_url(where.redis_url)
    # Registered with the run, where the workers look the tasks up.
    train = (await RunTasks(client).ensure(run_id, config.tasks)).train
    orchestrator = Orchestrator(
        run_id=run_id, rollouts=rollout_queue(client, run_id, "orchestrator", queue),
        trajectories=trajectory_queue(client, run_id, "trainer", queue),
        tasks=TaskCycle(train, 0), group_size=config.rollout.group_size, groups_per_step=1,
        over_provision=0, max_staleness=1,
    )  # fmt: skip
    await orchestrator.start()
    await orchestrator.schedule(trainer_version=0)
    return run_id, client, orchestrator


async def test_a_killed_worker_s_rollout_is_completed_by_another_and_trained_on_once(
    stack, tmp_path
):
    run_id, client, orchestrator = await one_group_scheduled(
        stack, tmp_path, QueueSettings(claim_idle_seconds=3.0),
        group_size=1, max_turns=3, max_new_tokens=160,
    )  # fmt: skip
    env = {"ETUDE_QUEUE__CLAIM_IDLE_SECONDS": "3", "ETUDE_ROLLOUT__HEARTBEAT_SECONDS": "0.5"}
    try:
        doomed = stack.add_service(worker_spec("rollout-doomed", run_id, **env))
        stream = rollout_stream(run_id)
        deadline = time.monotonic() + 30
        while not await client.xpending_range(stream, "rollout", "-", "+", 1):
            assert time.monotonic() < deadline, "the worker never took the rollout"
            await asyncio.sleep(0.05)
        [held] = await client.xpending_range(stream, "rollout", "-", "+", 1)
        assert held["consumer"] == b"rollout-doomed"
        os.kill(doomed.pid, signal.SIGKILL)  # mid-rollout: no trajectory was written
        stack.stop_service("rollout-doomed")
        assert await client.xlen(f"etude:{run_id}:trajectories") == 0
        stack.add_service(worker_spec("rollout-survivor", run_id, **env))
        waited = await asyncio.wait_for(orchestrator.next_batch(trainer_version=0), timeout=120)
        [group] = waited.batch.groups
        [trajectory] = group.trajectories
        assert trajectory.sample_index == 0 and trajectory.turns >= 1
        await orchestrator.acknowledge(waited)
        # Exactly once: nothing else arrives and both streams are empty.
        assert await orchestrator.trajectories.get(count=10, block_ms=1500) == []
        assert await client.xlen(f"etude:{run_id}:trajectories") == 0
        assert await client.xlen(stream) == 0
        assert (await client.xpending(stream, "rollout"))["pending"] == 0
    finally:
        stack.stop_service("rollout-survivor")
        await client.aclose()


async def test_a_worker_sent_sigterm_finishes_its_rollout_before_it_exits(stack, tmp_path):
    """What a rollout pod does when scaled in: no new work, the current episode completed,
    its trajectory written and its entry acknowledged, then exit."""
    run_id, client, _ = await one_group_scheduled(
        stack, tmp_path, QueueSettings(), group_size=2, max_turns=2, max_new_tokens=96
    )
    stream = rollout_stream(run_id)
    try:
        worker = stack.add_service(worker_spec("rollout-scaled-in", run_id))
        deadline = time.monotonic() + 30
        while not await client.xpending_range(stream, "rollout", "-", "+", 2):
            assert time.monotonic() < deadline, "the worker never took a rollout"
            await asyncio.sleep(0.05)
        code = await asyncio.to_thread(stack.stop_service, "rollout-scaled-in")  # SIGTERM
        assert code == 0 and not pid_alive(worker.pid)
        # Everything it had started is done and acknowledged; nothing is left pending.
        assert (await client.xpending(stream, "rollout"))["pending"] == 0
        finished = await client.xlen(f"etude:{run_id}:trajectories")
        assert finished >= 1 and finished + await client.xlen(stream) == 2
    finally:
        await client.aclose()


async def test_the_kl_reference_is_the_policy_rl_starts_from_even_after_a_resume(stack, tmp_path):
    """With an SFT warm start, the KL term must hold the policy near the SFT policy: a
    reference copied from the initial weights pulls RL back to before SFT (a run measured a
    KL of 0.55 at its first step, before any RL update)."""
    config = parse_run_config({
        **LOOP_CONFIG, "output_dir": str(tmp_path),
        "tasks": {"taskset": "etude-locate", "train_limit": 2, "eval_limit": 0, "hint_tier": 3},
        "sft": {"steps": 2, "batch_size": 2, "lr": 1e-3, "held_out_fraction": 0.0},
        "trainer": {**LOOP_CONFIG["trainer"], "loss": {"kl_coef": 0.1}},
    })  # fmt: skip
    where = endpoints(stack)
    run_id = await register(where.redis_url, config)
    run = TrainingRun(run_id, config, where, stack.settings)
    await run.setup()
    initial = _weights(run.model)
    await run.warm_start()
    sft_policy = _weights(run.model)
    assert _weights(run.trainer.reference) == sft_policy != initial
    # RL moves the policy and a checkpoint is written; the run dies and resumes from it
    with torch.no_grad():
        next(p for p in run.model.parameters() if p.requires_grad).add_(0.5)
    await run.checkpoint()
    moved = _weights(run.model)
    await run.close()

    resumed = TrainingRun(run_id, config, where, stack.settings)
    await resumed.setup(resume=True)
    assert resumed.resumed
    await resumed.warm_start()
    assert _weights(resumed.model) == moved
    assert _weights(resumed.trainer.reference) == sft_policy
    await finished(resumed)


async def test_with_split_projects_rl_trains_on_projects_sft_never_demonstrated(stack, tmp_path):
    config = parse_run_config({
        **LOOP_CONFIG, "output_dir": str(tmp_path),
        "tasks": {"taskset": "etude-locate-stubbed", "train_limit": 4, "eval_limit": 0,
                  "hint_tier": 3},
        "sft": {"steps": 1, "batch_size": 2, "lr": 1e-3, "held_out_fraction": 0.0,
                "split_projects": True},
    })  # fmt: skip
    where = endpoints(stack)
    run = TrainingRun(await register(where.redis_url, config), config, where, stack.settings)
    await run.setup()
    try:
        demonstrated = {project_of(t) for t in run.demonstrated_tasks}
        trained = {project_of(t) for t in run.orchestrator.tasks.tasks}
        assert len(demonstrated) == len(trained) == 2 and not demonstrated & trained
        assert {t.id for t in run.train_tasks} == {
            t.id for t in run.demonstrated_tasks + run.orchestrator.tasks.tasks
        }
        summary = await run.warm_start()
        assert summary["demonstrations"] == 2  # the two demonstrated tasks, tier 3, one style
    finally:
        await finished(run)


def _weights(model) -> dict[str, list]:
    return {name: tensor.float().flatten()[:64].tolist()
            for name, tensor in model.state_dict().items()}  # fmt: skip
