"""The driver's heartbeat, from a thread of its own.

The rule the gateway's reaper applies (etude.common.runs.RunRegistry.reap): a run is dead
when its driver has written no heartbeat for `runs.driver_timeout_seconds`. For that to
mean "the process is gone", a live driver must write one whatever it is doing, so the beat
does not share the driver's event loop: a step that holds the loop, a model loading, a
machine short of memory that makes the loop late do not delay it. It has its own Redis
connection and event loop; a write that fails or times out (Redis slow under memory
pressure) is tried again every `RETRY_SECONDS` until one lands, so one slow answer costs a
second, not a period. Only a driver whose process is gone, or that cannot reach Redis for
the whole window, falls silent for it.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from redis.exceptions import RedisError

from etude.common.queue import queue_client
from etude.common.runs import RunRegistry

log = logging.getLogger(__name__)

RETRY_SECONDS = 1.0


class Heartbeat:
    def __init__(
        self, redis_url: str, run_id: str, every_seconds: float, window_seconds: float,
        prefix: str = "etude",
    ) -> None:  # fmt: skip
        self.redis_url, self.run_id, self.prefix = redis_url, run_id, prefix
        self.every_seconds = every_seconds
        # A write may wait a quarter of the window: a slow Redis answers within that and
        # the beat lands, and a dead connection leaves time for several more tries.
        self.write_timeout = max(1.0, window_seconds / 4)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="driver-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stopped.set()
        self._thread.join(timeout=self.write_timeout + 1)

    def _run(self) -> None:
        asyncio.run(self._beat())

    async def _beat(self) -> None:
        client = queue_client(self.redis_url, max_connections=2, socket_timeout=self.write_timeout)
        registry = RunRegistry(client, self.prefix)
        try:
            while not self._stopped.is_set():
                try:
                    await registry.heartbeat(self.run_id)
                    wait = self.every_seconds
                except (RedisError, OSError) as error:  # Redis back soon: try again shortly
                    log.warning("heartbeat not written (trying again): %s", error)
                    wait = RETRY_SECONDS
                # Blocking this loop is fine: the beat is all that runs on it.
                self._stopped.wait(wait)
        finally:
            await client.aclose()
