"""A rollout worker as a Ray actor (`etude train --ray` places one per worker on the local
Ray); `python -m etude.rollout` is the process form of the same worker. `run()` returns when
`stop()` is called, with the number of rollouts the worker completed."""

from __future__ import annotations

import asyncio
import contextlib

from etude.common.run_config import RunConfig
from etude.rollout.config import RolloutSettings
from etude.rollout.service import build_worker


class RolloutHost:
    def __init__(self, settings: RolloutSettings, config: RunConfig) -> None:
        self.settings = settings
        self.config = config
        self._stop = asyncio.Event()

    async def run(self) -> int:
        async with contextlib.AsyncExitStack() as resources:
            worker = await build_worker(self.settings, resources, self.config)
            await worker.run(self._stop)
            return worker.completed

    async def stop(self) -> None:
        self._stop.set()
