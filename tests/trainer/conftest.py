"""One local stack for the trainer's integration tests: a redis-server and the inference,
environment and reward services as processes on loopback, started once for the package.
Each test registers a run of its own, so runs never share streams."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis

from etude.cli.stack import LocalStack, ServiceSpec
from etude.cli.status import read_status
from etude.common.run_config import RunConfig
from etude.common.runs import RunRegistry
from etude.common.settings import EtudeSettings, StackSettings
from etude.trainer.run import TrainingRun
from etude.trainer.types import Endpoints


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    run_dir = tmp_path_factory.mktemp("rl-stack")
    settings = EtudeSettings(stack=StackSettings(run_dir=run_dir, ready_timeout_seconds=60))
    services = tuple(ServiceSpec.module(n) for n in ("inference", "environment", "reward"))
    local = LocalStack(settings, services)
    local.start()
    yield local
    local.stop()


def endpoints(stack: LocalStack) -> Endpoints:
    status = read_status(stack.run_dir)
    return Endpoints.of_stack(status.redis_url, {c.name: c.address for c in status.components})


def worker_spec(name: str, run_id: str, **env: str) -> ServiceSpec:
    extra = {"ETUDE_ROLLOUT__RUN_ID": run_id, "ETUDE_ROLLOUT__CONSUMER": name, **env}
    return ServiceSpec(name, (sys.executable, "-m", "etude.rollout"), env=tuple(extra.items()))


async def register(redis_url: str, config: RunConfig) -> str:
    client = aioredis.Redis.from_url(redis_url)
    try:
        return (await RunRegistry(client).create(config)).run_id
    finally:
        await client.aclose()


async def finished(run: TrainingRun) -> None:
    """End a run driven here as its driver would (`finished`), then close it: the next run
    on the package's stack takes the inference engine over (etude.inference.ownership)."""
    await run.registry.update(run.run_id, status="finished")
    await run.close()
