"""Assembling a rollout worker from settings and its run's configuration: the clients of
inference (behind the router), environment and reward, the queues, the run's registered
tasks, the agent loop. Used by `python -m etude.rollout`, by the Ray actor of `etude train
--ray`, and (with in-process parts, `assemble_worker`) by the simulated fleet."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from etude.common.payloads import RolloutRequest
from etude.common.queue import queue_client
from etude.common.run_config import RolloutConfig, RunConfig, parse_run_config
from etude.common.runs import RunNotFoundError, RunRegistry
from etude.common.settings import QueueSettings
from etude.environment.client import EnvironmentClient, GrpcEnvironment
from etude.inference.client import GrpcInference
from etude.model.pretrained import policy_tokenizer
from etude.reward.client import GrpcReward
from etude.rollout.agent import EpisodeRunner, Scorer, TaskPreparation, Tokenizer
from etude.rollout.config import RolloutSettings, task_cache_dir
from etude.rollout.engines import keep_resolved, resolve
from etude.rollout.repositories import RepositoryCache, TaskPreparer, unusable_unless_built
from etude.rollout.router import Router
from etude.rollout.samplers import PolicySampler, sampling_seed
from etude.rollout.streams import rollout_key, rollout_queue, trajectory_queue
from etude.rollout.worker import RolloutWorker, TaskLookup
from etude.tasks.provisioning import PreparedTask
from etude.tasks.task import Task
from etude.tasks.taskset import RunTasks


class WorkerSetupError(RuntimeError):
    pass


def _address(value: str | None, name: str) -> str:
    if not value:
        raise WorkerSetupError(f"no {name} address: set ETUDE_SERVICES__{name.upper()}")
    return value


async def read_run_config(client: aioredis.Redis, run_id: str) -> RunConfig:
    if not run_id:
        raise WorkerSetupError("no run to work for: set ETUDE_ROLLOUT__RUN_ID")
    record = await RunRegistry(client).get(run_id)
    return parse_run_config(record.config)


async def _router(
    value: str, settings: RolloutSettings, resources: contextlib.AsyncExitStack
) -> Router:
    """The engines `value` names (etude.rollout.engines), behind a load-aware router."""

    def connect(address: str) -> GrpcInference:
        return GrpcInference(address, settings.client)

    addresses = await asyncio.to_thread(resolve, value)
    if not addresses:
        raise WorkerSetupError(f"no inference engine at {value!r}")
    router = Router([connect(a) for a in addresses], names=addresses)

    async def close() -> None:
        watching.cancel()
        await router.close()
        for engine in router.engines:
            await engine.client.close()

    watching = asyncio.create_task(keep_resolved(router, value, connect))
    resources.push_async_callback(close)
    return router


async def build_worker(
    settings: RolloutSettings, resources: contextlib.AsyncExitStack, run: RunConfig | None = None
) -> RolloutWorker:
    config = settings.rollout
    client = queue_client(settings.redis.url)
    resources.push_async_callback(client.aclose)
    run = run or await read_run_config(client, config.run_id)
    consumer = config.consumer or f"{socket.gethostname()}-{os.getpid()}"
    services = settings.services
    router = await _router(_address(services.inference, "inference"), settings, resources)
    environment = GrpcEnvironment(_address(services.environment, "environment"), settings.client)
    # The reward looks each task up in the task set registered with this worker's run.
    reward = GrpcReward(_address(services.reward, "reward"), settings.client, run_id=config.run_id)
    for client_ in (environment, reward):
        resources.push_async_callback(client_.close)
    tokenizer = policy_tokenizer(run.policy.init, settings.stack.models_dir)
    runs = RunTasks(client)
    # Each task built from where its run's registration says, into this worker's task cache
    # (on a cluster the shared task volume, where the environment's pods see it too).
    cache_dir = task_cache_dir(settings)
    prepare = TaskPreparer(RepositoryCache(cache_dir, config.projects_dir), runs.provisioning)
    return assemble_worker(
        WorkerParts(router, environment, reward, tokenizer, prepare, runs.get),
        client, config.run_id, consumer, run.rollout, settings.queue,
        concurrency=config.concurrency or run.rollout.concurrency,
        heartbeat_seconds=config.heartbeat_seconds, request_suffix=f"-{os.getpid()}",
    )  # fmt: skip


def repositories_only(repository_for: Callable[[Task], Path]) -> TaskPreparation:
    """`TaskPreparation` from a function building repositories alone (bundled tasks: the
    trainer's tests, the benchmarks, the simulated fleet): no Python environment."""

    async def prepare(run_id: str, task: Task) -> PreparedTask:
        def build() -> Path:
            with unusable_unless_built(task):
                return repository_for(task)

        return PreparedTask(await asyncio.to_thread(build))

    return prepare


@dataclass(frozen=True, slots=True)
class WorkerParts:
    """What a worker's episodes run against, however they are reached (gRPC clients, or
    in-process ones: the simulated fleet's)."""

    router: Router
    environment: EnvironmentClient
    reward: Scorer
    tokenizer: Tokenizer
    prepare: TaskPreparation
    """What a task's session opens (etude.rollout.repositories); TaskUnusableError when it
    cannot be built."""
    tasks: TaskLookup
    """The run's tasks by id (RunTasks.get: the task set registered with the run)."""


def assemble_worker(
    parts: WorkerParts,
    client: aioredis.Redis,
    run_id: str,
    consumer: str,
    rollout: RolloutConfig,
    queue: QueueSettings,
    *,
    request_suffix: str = "",
    **options: Any,
) -> RolloutWorker:
    """A rollout worker of `run_id` over `parts`; `options` go to `RolloutWorker`."""

    async def fail_run(failed_run: str, reason: str) -> None:
        with contextlib.suppress(RunNotFoundError, ValueError):  # unrecorded, or ended already
            await RunRegistry(client).update(failed_run, status="failed", error=reason)

    runner = EpisodeRunner(parts.environment, parts.reward, parts.tokenizer, rollout,
                           parts.prepare)  # fmt: skip

    def sampler_for(request: RolloutRequest) -> PolicySampler:
        return PolicySampler(
            parts.router, parts.tokenizer, request_id=f"{rollout_key(request)}{request_suffix}",
            temperature=rollout.temperature, top_p=rollout.top_p,
            seed=sampling_seed(rollout.seed, request),
        )  # fmt: skip

    return RolloutWorker(
        rollouts=rollout_queue(client, run_id, consumer, queue),
        trajectories=trajectory_queue(client, run_id, consumer, queue),
        runner=runner, tasks=parts.tasks, fail_run=fail_run, sampler_for=sampler_for,
        policy_version=parts.router.policy_version, **options,
    )  # fmt: skip
