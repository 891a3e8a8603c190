"""A run's progress line in the registry, written from the event loop and from the SFT
thread, throttled, with the last count of a phase always written."""

from __future__ import annotations

import asyncio
import gc
import threading
import time

import pytest
import redis.asyncio as aioredis

from etude.common.run_config import RunConfig
from etude.common.runs import RunRegistry
from etude.trainer.progress import RunProgress, eta


@pytest.fixture
async def registry(redis_url):
    client = aioredis.Redis.from_url(redis_url)
    yield RunRegistry(client, prefix="t")
    await client.aclose()


async def settled(registry: RunRegistry, run_id: str) -> str:
    await asyncio.sleep(0.2)  # writes from a thread are scheduled onto the loop
    return (await registry.get(run_id)).progress


async def test_a_counter_from_another_thread_writes_its_last_count_whatever_the_pace(registry):
    run = await registry.create(RunConfig(), run_id="p")
    progress = RunProgress(registry, run.run_id, min_seconds=60)
    tell = progress.counter("SFT step", 3)

    def sft() -> None:  # three steps faster than the throttle
        for step in (1, 2, 3):
            tell(step, f"loss {1 / step:.2f}")

    await asyncio.to_thread(sft)
    assert await settled(registry, run.run_id) == "SFT step 3/3: loss 0.33"


async def test_lines_closer_than_the_throttle_are_dropped_but_a_last_one_is_not(registry):
    run = await registry.create(RunConfig(), run_id="q")
    progress = RunProgress(registry, run.run_id, min_seconds=60)
    progress.say("first")
    assert await settled(registry, run.run_id) == "first"
    progress.say("dropped")
    assert await settled(registry, run.run_id) == "first"
    progress.say("published", last=True)
    assert await settled(registry, run.run_id) == "published"


async def test_a_dead_registry_is_logged_not_raised_into_the_sft_thread(redis_url, caplog):
    client = aioredis.Redis.from_url(redis_url)
    registry = RunRegistry(client, prefix="t")
    run = await registry.create(RunConfig(), run_id="d")
    await client.aclose()
    gone = RunRegistry(aioredis.Redis.from_url("redis://127.0.0.1:1"), prefix="t")
    progress = RunProgress(gone, run.run_id)
    failures: list[BaseException] = []

    def step() -> None:
        try:
            progress.say("SFT step 1/2", last=True)
        except BaseException as error:  # the failure asserted against
            failures.append(error)

    thread = threading.Thread(target=step)
    thread.start()
    thread.join()
    await asyncio.sleep(0.5)
    assert failures == []
    assert "progress not recorded" in caplog.text


def test_the_eta_follows_the_pace_so_far():
    assert eta(0, 10, 0.0) == "" and eta(10, 10, 0.0) == ""
    started = time.monotonic() - 30  # 3 of 10 in 30 s: 70 s to go
    assert eta(3, 10, started) == "ETA 70 s"
    assert eta(1, 10, time.monotonic() - 60) == "ETA 9 min"


async def test_close_lands_the_lines_sent_and_drops_what_a_thread_says_after_it(registry):
    run = await registry.create(RunConfig(), run_id="c")
    progress = RunProgress(registry, run.run_id, min_seconds=0)
    stop = threading.Event()
    said_after_close: list[str] = []

    def sft() -> None:  # goes on saying while the run shuts down, as a thread ending its step
        step = 0
        while not stop.is_set():
            step += 1
            progress.say(f"SFT step {step}")
            time.sleep(0.001)
        progress.say("after close", last=True)
        said_after_close.append("after close")

    thread = threading.Thread(target=sft)
    thread.start()
    await asyncio.sleep(0.1)
    await progress.close()
    landed = (await registry.get(run.run_id)).progress
    assert landed.startswith("SFT step ")
    stop.set()
    await asyncio.to_thread(thread.join)
    assert said_after_close and (await settled(registry, run.run_id)) == landed
    assert not [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]


async def test_a_line_that_cannot_reach_a_dead_redis_is_logged_and_close_stays_quiet(
    caplog,
):
    """Redis gone (nothing listens on the port): the write fails, `progress not recorded`
    says why, and closing leaves no unread exception for asyncio to print as a traceback."""
    client = aioredis.from_url("redis://127.0.0.1:1", socket_connect_timeout=1)
    progress = RunProgress(RunRegistry(client, prefix="t"), "gone", min_seconds=0)
    progress.say("SFT step 1", last=True)
    await progress.close()
    await client.aclose()
    gc.collect()  # an unread future exception is reported when the future is collected
    await asyncio.sleep(0)
    messages = [record.getMessage() for record in caplog.records]
    assert any(m.startswith("progress not recorded") for m in messages), messages
    assert not [m for m in messages if "never retrieved" in m], messages
