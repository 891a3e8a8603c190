"""A rollout worker that is cancelled stops, however the cancellation meets its Redis
calls (redis-py can swallow one mid-command; a worker that then retried would never end)."""

from __future__ import annotations

import asyncio

from etude.common.queue import queue_client
from etude.common.settings import QueueSettings
from etude.rollout.streams import rollout_queue, trajectory_queue
from etude.rollout.worker import RolloutWorker


async def test_a_cancelled_worker_stops_every_time(redis_url):
    client = queue_client(redis_url)
    settings = QueueSettings()
    try:
        for attempt in range(30):
            worker = RolloutWorker(
                rollouts=rollout_queue(client, "cancel", "w", settings),
                trajectories=trajectory_queue(client, "cancel", "w", settings),
                runner=None, tasks=None, fail_run=None, sampler_for=None, policy_version=None,
                poll_ms=20,
            )  # fmt: skip
            running = asyncio.create_task(worker.run(asyncio.Event()))
            await asyncio.sleep(0.005 * (attempt % 6))  # land the cancel at various points
            running.cancel()
            done, _ = await asyncio.wait([running], timeout=5)
            assert done, f"attempt {attempt}: the cancelled worker is still running"
            assert running.cancelled()
    finally:
        await client.aclose()
