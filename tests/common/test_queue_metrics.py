"""Queue gauges on a service's /metrics page, from a real Redis."""

from __future__ import annotations

import asyncio
import contextlib
import urllib.request

import redis.asyncio as aioredis
from prometheus_client.parser import text_string_to_metric_families

from etude.common.metrics import start_metrics_endpoint
from etude.common.payloads import RolloutRequest
from etude.common.queue import WorkQueue
from etude.common.queue_metrics import export_queue_stats_forever
from etude.common.settings import QueueSettings


def request(i: int) -> RolloutRequest:
    return RolloutRequest(
        run_id="r", task_id=f"t{i}", group_id="g", sample_index=i, min_policy_version=0
    )


def gauges(url: str, stream: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=5) as response:
        families = text_string_to_metric_families(response.read().decode())
        return {
            s.name: s.value
            for f in families
            for s in f.samples
            if s.name.startswith("etude_queue_") and s.labels.get("stream") == stream
        }


async def test_queue_gauges_follow_the_stream(redis_url):
    client = aioredis.from_url(redis_url)
    queue = WorkQueue(client, "etude:m:rollouts", "g", "c1", (RolloutRequest,), QueueSettings())
    await queue.ensure_group()
    await queue.put_many([request(i) for i in range(5)])
    await queue.get(count=2)
    endpoint = start_metrics_endpoint("127.0.0.1", 0)
    exporter = asyncio.create_task(export_queue_stats_forever(queue, interval_seconds=0.05))
    try:
        url = f"http://127.0.0.1:{endpoint.port}/metrics"
        await asyncio.sleep(0.2)
        seen = gauges(url, queue.stream)
        assert seen["etude_queue_depth"] == 5
        assert seen["etude_queue_pending"] == 2
        assert seen["etude_queue_lag"] == 3
        assert seen["etude_queue_dead_letters"] == 0
        deliveries = await queue.get(count=3)
        await queue.ack(*(d.entry_id for d in deliveries))
        await asyncio.sleep(0.2)
        seen = gauges(url, queue.stream)
        assert (seen["etude_queue_depth"], seen["etude_queue_lag"]) == (2, 0)
    finally:
        exporter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await exporter
        endpoint.close()
        await client.aclose()
