"""Assembling a rollout worker from settings and its run's configuration: the clients of
inference, environment and reward, the queues, the task store, the agent loop. Used by
`python -m etude.rollout` and by the Ray actor of `etude train --ray`."""

from __future__ import annotations

import contextlib
import os
import socket

import redis.asyncio as aioredis

from etude.common.payloads import RolloutRequest
from etude.common.queue import queue_client
from etude.common.run_config import RunConfig, parse_run_config
from etude.common.runs import RunRegistry
from etude.environment.client import GrpcEnvironment
from etude.inference.client import GrpcInference
from etude.model.pretrained import policy_tokenizer
from etude.reward.client import GrpcReward
from etude.rollout.agent import EpisodeRunner
from etude.rollout.config import RolloutSettings
from etude.rollout.repositories import RepositoryCache
from etude.rollout.samplers import PolicySampler, sampling_seed
from etude.rollout.streams import rollout_key, rollout_queue, trajectory_queue
from etude.rollout.worker import RolloutWorker
from etude.tasks.store import TaskStore


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


async def build_worker(
    settings: RolloutSettings, resources: contextlib.AsyncExitStack, run: RunConfig | None = None
) -> RolloutWorker:
    config = settings.rollout
    client = queue_client(settings.redis.url)
    resources.push_async_callback(client.aclose)
    run = run or await read_run_config(client, config.run_id)
    consumer = config.consumer or f"{socket.gethostname()}-{os.getpid()}"
    services = settings.services
    inference = GrpcInference(_address(services.inference, "inference"), settings.client)
    environment = GrpcEnvironment(_address(services.environment, "environment"), settings.client)
    reward = GrpcReward(_address(services.reward, "reward"), settings.client)
    for client_ in (inference, environment, reward):
        resources.push_async_callback(client_.close)
    tokenizer = policy_tokenizer(run.policy.init, settings.stack.models_dir)
    cache = RepositoryCache(
        config.cache_dir or settings.stack.run_dir / "tasks", config.projects_dir
    )
    runner = EpisodeRunner(environment, reward, tokenizer, run.rollout, cache)

    def sampler_for(request: RolloutRequest) -> PolicySampler:
        key = rollout_key(request)
        return PolicySampler(
            inference, tokenizer, request_id=f"{key}-{os.getpid()}",
            temperature=run.rollout.temperature, top_p=run.rollout.top_p,
            seed=sampling_seed(run.rollout.seed, request),
        )  # fmt: skip

    async def policy_version() -> int:
        return (await inference.get_policy()).version

    run_id = config.run_id
    return RolloutWorker(
        rollouts=rollout_queue(client, run_id, consumer, settings.queue),
        trajectories=trajectory_queue(client, run_id, consumer, settings.queue),
        runner=runner,
        tasks=TaskStore(config.tasks_files),
        sampler_for=sampler_for,
        policy_version=policy_version,
        concurrency=config.concurrency or run.rollout.concurrency,
        heartbeat_seconds=config.heartbeat_seconds,
    )
