"""`python -m etude.rollout`: one rollout worker — the agent loop over the run's rollout
queue, with gRPC health, reflection and /metrics like every service. On SIGTERM it takes no
new rollout and finishes the ones it is running before it exits."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal

from etude.common.grpc_server import Registration, run_service
from etude.rollout.config import RolloutSettings
from etude.rollout.service import build_worker

log = logging.getLogger("etude.rollout")


async def build(
    settings: RolloutSettings, resources: contextlib.AsyncExitStack
) -> list[Registration]:
    worker = await build_worker(settings, resources)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))

    def exit_on_crash(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("rollout worker stopped: %r", task.exception())
            os.kill(os.getpid(), signal.SIGTERM)  # take the whole service down, visibly

    running.add_done_callback(exit_on_crash)

    async def finish() -> None:
        stop.set()
        with contextlib.suppress(Exception):  # a crash was logged when it happened
            await running

    resources.push_async_callback(finish)
    return []


if __name__ == "__main__":
    run_service("rollout", build, RolloutSettings())
