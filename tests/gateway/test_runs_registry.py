"""The run registry over a real Redis: records, ordering, the status rules, and concurrent
writers that must not lose each other's fields."""

from __future__ import annotations

import asyncio
import math

import pytest
import redis.asyncio as aioredis

from etude.common.run_config import RunConfig
from etude.common.runs import RunFailedError, RunNotFoundError, RunRegistry


@pytest.fixture
async def client(redis_url):
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def registry(client):
    return RunRegistry(client, prefix="t")


async def test_create_records_a_queued_run_under_the_documented_keys(registry, client):
    config = RunConfig.model_validate({"name": "demo", "trainer": {"steps": 3}})
    record = await registry.create(config)
    assert record.run_id.startswith("demo-") and record.status == "queued"
    assert await registry.get(record.run_id) == record
    assert record.config["trainer"]["steps"] == 3 and record.config["output_dir"] == ".etude/runs"
    assert await client.exists(f"t:run:{record.run_id}")
    assert await client.zscore("t:runs", record.run_id) == record.created_ms
    assert (record.step, record.metrics, record.stop_requested) == (0, {}, False)


async def test_an_existing_or_malformed_id_is_refused(registry):
    await registry.create(RunConfig(), run_id="fixed")
    with pytest.raises(ValueError, match="already exists"):
        await registry.create(RunConfig(), run_id="fixed")
    for bad in ("../escape", "-flag", "", "a b", "x" * 200):
        with pytest.raises(ValueError, match="must match"):
            await registry.create(RunConfig(), run_id=bad)


async def test_unknown_runs_raise_not_found(registry):
    with pytest.raises(RunNotFoundError, match="no run 'ghost'"):
        await registry.get("ghost")
    with pytest.raises(RunNotFoundError):
        await registry.update("ghost", step=1)
    with pytest.raises(RunNotFoundError):
        await registry.request_stop("ghost")
    with pytest.raises(RunNotFoundError):
        await registry.stop_requested("ghost")
    assert await registry.list() == []


async def test_list_is_newest_first_and_bounded(registry):
    ids = []
    for n in range(5):
        ids.append((await registry.create(RunConfig(), run_id=f"r{n}")).run_id)
        await asyncio.sleep(0.002)  # distinct creation milliseconds
    assert [r.run_id for r in await registry.list()] == ids[::-1]
    assert [r.run_id for r in await registry.list(limit=2)] == ["r4", "r3"]


async def test_update_sets_fields_and_merges_metrics(registry):
    run = await registry.create(RunConfig(), run_id="u")
    await registry.update("u", status="running", step=1, metrics={"loss": 2.0, "reward": 0.1})
    record = await registry.update("u", step=2, policy_version=2, metrics={"reward": 0.5},
                                   output_dir="/out/u")  # fmt: skip
    assert (record.status, record.step, record.policy_version) == ("running", 2, 2)
    assert record.metrics == {"loss": 2.0, "reward": 0.5}
    assert record.output_dir == "/out/u" and record.updated_ms >= run.updated_ms
    with pytest.raises(ValueError, match="unknown run status"):
        await registry.update("u", status="paused")


async def test_a_terminal_status_is_final(registry):
    await registry.create(RunConfig(), run_id="t1")
    await registry.update("t1", status="finished")
    with pytest.raises(ValueError, match="has ended"):
        await registry.update("t1", status="running")
    # Terminal to terminal is allowed: a run found broken after it finished.
    record = await registry.update("t1", status="failed", error="checkpoint corrupt")
    assert (record.status, record.error) == ("failed", "checkpoint corrupt")


async def test_a_resumed_run_is_reopened_from_any_ending(registry):
    record = await registry.create(RunConfig())
    await registry.request_stop(record.run_id)
    await registry.update(record.run_id, status="stopped", error="interrupted")
    reopened = await registry.reopen(record.run_id)
    assert (reopened.status, reopened.stop_requested, reopened.error) == ("running", False, "")
    assert not await registry.stop_requested(record.run_id)
    with pytest.raises(RunNotFoundError):
        await registry.reopen("no-such-run")


async def test_stop_request_wins_over_a_late_running_report(registry):
    await registry.create(RunConfig(), run_id="s")
    await registry.heartbeat("s")  # a driver has taken the run
    assert not await registry.stop_requested("s")
    record = await registry.request_stop("s")
    assert (record.status, record.stop_requested) == ("stopping", True)
    assert await registry.stop_requested("s")
    # The trainer, starting up, reports `running` without having seen the stop yet.
    assert (await registry.update("s", status="running", step=1)).status == "stopping"
    assert (await registry.update("s", status="stopped")).status == "stopped"
    # Stopping an ended run changes nothing.
    before = await registry.get("s")
    assert await registry.request_stop("s") == before


async def test_concurrent_writers_lose_no_fields(registry):
    await registry.create(RunConfig(), run_id="c")
    await registry.heartbeat("c")
    writes = [registry.update("c", metrics={f"m{n}": float(n)}) for n in range(50)]
    writes += [registry.update("c", step=7), registry.update("c", policy_version=3),
               registry.request_stop("c")]  # fmt: skip
    await asyncio.gather(*writes)
    record = await registry.get("c")
    assert record.metrics == {f"m{n}": float(n) for n in range(50)}
    assert (record.step, record.policy_version, record.status) == (7, 3, "stopping")


async def test_non_finite_metrics_survive_and_serialize_as_null(registry):
    await registry.create(RunConfig(), run_id="n")
    record = await registry.update("n", metrics={"loss": math.nan, "grad_norm": math.inf})
    assert math.isnan(record.metrics["loss"]) and record.metrics["grad_norm"] == math.inf
    assert record.as_dict()["metrics"] == {"grad_norm": None, "loss": None}


async def test_a_decoding_client_is_refused(redis_url):
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    with pytest.raises(ValueError, match="decode_responses"):
        RunRegistry(client)
    await client.aclose()


async def test_a_queued_run_no_driver_took_stops_at_once(registry):
    """Nothing would ever move it on from `stopping`; the driver a launcher starts later
    finds it ended and does not run it."""
    await registry.create(RunConfig(), run_id="q")
    record = await registry.request_stop("q")
    assert (record.status, record.stop_requested) == ("stopped", True)
    await registry.heartbeat("q")
    with pytest.raises(ValueError, match="has ended"):
        await registry.update("q", status="running")


async def test_should_stop_reports_a_stop_and_raises_for_a_failure(registry):
    await registry.create(RunConfig(), run_id="w")
    await registry.heartbeat("w")
    await registry.update("w", status="running")
    assert not await registry.should_stop("w")
    await registry.request_stop("w")
    assert await registry.should_stop("w")
    await registry.create(RunConfig(), run_id="f")
    await registry.update("f", status="failed", error="TaskNotFoundError: no task 'x'")
    with pytest.raises(RunFailedError, match="no task 'x'") as failed:
        await registry.should_stop("f")
    assert failed.value.reason == "TaskNotFoundError: no task 'x'"
    with pytest.raises(RunNotFoundError):
        await registry.should_stop("ghost")


async def test_the_reaper_ends_runs_whose_driver_went_silent(registry, client):
    for run_id in ("alive", "dead", "dead-stopping", "queued", "done"):
        await registry.create(RunConfig(), run_id=run_id)
    for run_id in ("alive", "dead", "dead-stopping"):
        await registry.heartbeat(run_id)
        await registry.update(run_id, status="running")
    await registry.request_stop("dead-stopping")
    await registry.update("done", status="finished")
    assert await client.smembers("t:runs:active") == {b"alive", b"dead", b"dead-stopping",
                                                      b"queued"}  # fmt: skip
    # Their drivers' last heartbeats, a minute ago; "alive" beats on.
    for run_id in ("dead", "dead-stopping"):
        await client.hset(f"t:run:{run_id}", mapping={"heartbeat_ms": 1, "updated_ms": 1})
    assert await registry.reap(30.0) == {"dead": "failed", "dead-stopping": "stopped"}
    dead, stopped = await registry.get("dead"), await registry.get("dead-stopping")
    assert "no heartbeat from the run's driver for over 30 s" in dead.error
    assert stopped.error == dead.error
    assert (await registry.get("alive")).status == "running"
    assert (await registry.get("queued")).status == "queued"  # no driver yet: a launcher's
    assert await client.smembers("t:runs:active") == {b"alive", b"queued"}
    assert await registry.reap(30.0) == {}  # once
    # A driver that comes back cannot take its run back.
    with pytest.raises(ValueError, match="has ended"):
        await registry.update("dead", status="running")
