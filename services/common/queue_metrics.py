"""The work queue's gauges: depth, lag, pending, dead letters, oldest pending entry.

Kept apart from `queue.py` so the queue logic has no Prometheus in it; a consumer process
runs `export_queue_stats_forever` as a task beside its work.
"""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import Gauge

from etude.common.queue import QueueStats, QueueUnavailableError, WorkQueue, raise_if_cancelled

log = logging.getLogger(__name__)

QUEUE_DEPTH = Gauge(
    "etude_queue_depth", "Entries in a work stream not yet acknowledged.", ["stream"]
)
QUEUE_LAG = Gauge("etude_queue_lag", "Entries never delivered to any consumer.", ["stream"])
QUEUE_PENDING = Gauge(
    "etude_queue_pending", "Entries delivered to a consumer and not yet acknowledged.", ["stream"]
)
QUEUE_DEAD = Gauge("etude_queue_dead_letters", "Entries in the dead-letter stream.", ["stream"])
QUEUE_OLDEST_PENDING_SECONDS = Gauge(
    "etude_queue_oldest_pending_idle_seconds",
    "Idle time of the longest-waiting delivered entry.",
    ["stream"],
)


def export_queue_stats(stats: QueueStats) -> None:
    """Copy a queue's stats snapshot into the queue gauges."""
    QUEUE_DEPTH.labels(stats.stream).set(stats.depth)
    QUEUE_LAG.labels(stats.stream).set(stats.lag)
    QUEUE_PENDING.labels(stats.stream).set(stats.pending)
    QUEUE_DEAD.labels(stats.stream).set(stats.dead)
    QUEUE_OLDEST_PENDING_SECONDS.labels(stats.stream).set(stats.oldest_pending_idle_seconds)


async def export_queue_stats_forever(queue: WorkQueue, interval_seconds: float = 5.0) -> None:
    """Refresh the queue gauges until cancelled; run it as a task beside a consumer.
    A Redis outage is logged and retried: the gauges keep their last values meanwhile."""
    while True:
        raise_if_cancelled()
        try:
            export_queue_stats(await queue.stats())
        except QueueUnavailableError as error:
            log.warning("queue stats unavailable: %s", error)
        await asyncio.sleep(interval_seconds)
