"""Simulated time: real time multiplied by the scenario's time scale, so that an hour of a
cluster's time passes in a minute of this machine's (at scale 60). Everything simulated
waits on this clock; everything else (Redis, the orchestrator, the workers) runs as is."""

from __future__ import annotations

import asyncio
import time


class SimClock:
    def __init__(self, time_scale: float) -> None:
        if not time_scale > 0:
            raise ValueError(f"a time scale is positive, got {time_scale}")
        self.time_scale = time_scale
        self._origin = time.monotonic()

    def now(self) -> float:
        """Simulated seconds since the clock was made."""
        return (time.monotonic() - self._origin) * self.time_scale

    def real_seconds(self, simulated: float) -> float:
        return simulated / self.time_scale

    async def sleep(self, simulated: float) -> None:
        await asyncio.sleep(max(0.0, simulated) / self.time_scale)


_SHARED: dict[float, SimClock] = {}


def shared_clock(time_scale: float) -> SimClock:
    """The process's clock at `time_scale`. The sim parts a process builds from its settings
    (an engine, the environment, the reward) share it, so one simulated instant is the same
    instant for all of them."""
    clock = _SHARED.get(time_scale)
    if clock is None:
        clock = _SHARED[time_scale] = SimClock(time_scale)
    return clock
