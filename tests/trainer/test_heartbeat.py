"""The driver's heartbeat and the reaper's rule: a run is dead only when its driver wrote no
heartbeat for the whole window. A live driver writes one whatever its event loop is doing,
and a Redis that answers slowly delays a beat by a second, never by the window."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aioredis

from etude.common.run_config import RunConfig
from etude.common.runs import RunRegistry
from etude.trainer.heartbeat import Heartbeat

WINDOW = 3.0  # driver_timeout_seconds, scaled down


@pytest.fixture
async def registry(fresh_redis):
    client = aioredis.Redis.from_url(fresh_redis.url)
    yield RunRegistry(client, prefix="hb")
    await client.aclose()


async def running(registry: RunRegistry, run_id: str) -> str:
    run = await registry.create(RunConfig(), run_id=run_id)
    await registry.heartbeat(run.run_id)
    await registry.update(run.run_id, status="running")
    return run.run_id


async def silence(registry: RunRegistry, run_id: str) -> float:
    return time.time() - (await registry.get(run_id)).heartbeat_ms / 1000


async def test_a_driver_whose_event_loop_is_held_still_beats(fresh_redis, registry):
    run_id = await running(registry, "busy")
    with Heartbeat(fresh_redis.url, run_id, 0.2, WINDOW, prefix="hb"):
        time.sleep(WINDOW + 1)  # a step that holds the loop longer than the window
        assert await silence(registry, run_id) < 1.0
        assert await registry.reap(WINDOW) == {}
    assert (await registry.get(run_id)).status == "running"


async def test_a_slow_redis_delays_a_beat_by_a_second_and_ends_nothing(fresh_redis, registry):
    run_id = await running(registry, "slow")
    with Heartbeat(fresh_redis.url, run_id, 0.2, WINDOW, prefix="hb"):
        await asyncio.sleep(0.5)
        # Redis holds every write for most of the window (as under memory pressure);
        # the reaper, reading, is served meanwhile.
        await registry.redis.execute_command("CLIENT", "PAUSE", int(WINDOW * 800), "WRITE")
        await asyncio.sleep(WINDOW * 0.8 + 1.5)
        assert await silence(registry, run_id) < 1.5
        assert await registry.reap(WINDOW) == {}
    assert (await registry.get(run_id)).status == "running"


async def test_a_driver_silent_for_the_whole_window_is_ended_with_the_reason(fresh_redis, registry):
    run_id = await running(registry, "gone")
    with Heartbeat(fresh_redis.url, run_id, 0.2, WINDOW, prefix="hb"):
        await asyncio.sleep(0.5)
    await asyncio.sleep(WINDOW / 2)  # its process gone, for less than the window
    assert await registry.reap(WINDOW) == {}
    await asyncio.sleep(WINDOW / 2 + 0.5)
    assert await registry.reap(WINDOW) == {run_id: "failed"}
    assert "no heartbeat from the run's driver" in (await registry.get(run_id)).error


async def test_a_redis_that_went_away_and_came_back_gets_the_beats_again(fresh_redis, registry):
    run_id = await running(registry, "restarted")
    with Heartbeat(fresh_redis.url, run_id, 0.2, WINDOW, prefix="hb"):
        fresh_redis.stop()
        await asyncio.sleep(1.5)
        fresh_redis.start()
        await asyncio.sleep(2.0)
        assert await silence(registry, run_id) < 1.5
