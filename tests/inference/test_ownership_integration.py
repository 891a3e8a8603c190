"""One stack, several runs: an engine serves one run's policy. Through the inference service
as `python -m etude.inference` builds it (gRPC on loopback, the run registry in a real
redis-server): a second run's weights are refused while the first run is alive, with an
error naming both, and change nothing; once the first run has ended (or its driver went
silent) the second takes the engine over."""

from __future__ import annotations

import contextlib

import pytest
import redis.asyncio as aioredis
import torch

from etude.common.grpc_server import ServiceRuntime
from etude.common.run_config import parse_run_config
from etude.common.runs import RunRegistry
from etude.common.settings import GrpcSettings, RedisSettings, RunsSettings
from etude.inference.__main__ import build
from etude.inference.client import GrpcInference
from etude.inference.config import InferenceConfig, InferenceSettings
from etude.inference.types import GenerationRequest, PolicyOwnedError, SamplingParams
from etude.model.checkpoint import from_pretrained
from etude.trainer.publish import WeightPublisher
from tests.inference.completions import run_request

pytestmark = pytest.mark.integration


@pytest.fixture
async def engine(redis_url, tmp_path):
    settings = InferenceSettings(
        inference=InferenceConfig(max_num_seqs=2, max_model_len=128),
        grpc=GrpcSettings(port=0, drain_seconds=0),
        redis=RedisSettings(url=redis_url),
        runs=RunsSettings(driver_timeout_seconds=30),
    )
    threads = torch.get_num_threads()  # the service sets the process's torch threads
    async with contextlib.AsyncExitStack() as resources:
        resources.callback(torch.set_num_threads, threads)  # for the tests after this one
        runtime = ServiceRuntime("inference", settings.grpc, await build(settings, resources))
        await runtime.start()
        resources.push_async_callback(runtime.shutdown)
        client = GrpcInference(runtime.address)
        resources.push_async_callback(client.close)
        yield client


@pytest.fixture
async def registry(redis_url):
    client = aioredis.Redis.from_url(redis_url)
    yield RunRegistry(client)
    await client.aclose()


async def started(registry: RunRegistry, name: str) -> str:
    run_id = (await registry.create(parse_run_config({"name": name}))).run_id
    await registry.update(run_id, status="running")
    await registry.heartbeat(run_id)
    return run_id


async def test_a_second_run_cannot_replace_a_live_run_s_policy(engine, registry):
    weights = list(from_pretrained("tiny", seed=1).state_dict().items())
    first, second = await started(registry, "first"), await started(registry, "second")

    await engine.update_weights(1, weights, run_id=first)
    assert ((await engine.get_policy()).run_id, (await engine.get_policy()).version) == (first, 1)
    await engine.update_weights(2, weights, run_id=first)  # its own run, again

    for intruder in (second, ""):  # another run, or an update naming none
        with pytest.raises(PolicyOwnedError, match=f"serves run {first}'s policy") as refused:
            await engine.update_weights(3, weights, run_id=intruder)
        assert "still going" in str(refused.value)
    policy = await engine.get_policy()
    assert (policy.run_id, policy.version) == (first, 2)  # nothing changed
    greedy = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    request = GenerationRequest(request_id="after", prompt_token_ids=(1, 2, 3), sampling=greedy)
    completion = (await run_request(engine, request))[0]
    assert set(completion["versions"]) == {2}  # and it still serves

    # A trainer starting the second run says so at once, before its warm start.
    publisher = WeightPublisher([engine], second)
    with pytest.raises(PolicyOwnedError, match=f"serves run {first}'s policy"):
        await publisher.check_free(lambda run: registry.is_alive(run, 30))

    await registry.update(first, status="finished")
    await publisher.check_free(lambda run: registry.is_alive(run, 30))
    await engine.update_weights(3, weights, run_id=second)
    policy = await engine.get_policy()
    assert (policy.run_id, policy.version) == (second, 3)


async def test_a_run_whose_driver_went_silent_loses_its_engine(engine, registry, redis_url):
    weights = list(from_pretrained("tiny", seed=1).state_dict().items())
    first, second = await started(registry, "first"), await started(registry, "second")
    await engine.update_weights(1, weights, run_id=first)
    # The driver was killed: its last heartbeat is older than the driver timeout (30 s).
    await registry.redis.hset(registry._key(first), "heartbeat_ms", "1")
    await engine.update_weights(2, weights, run_id=second)
    assert (await engine.get_policy()).run_id == second
