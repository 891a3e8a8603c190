"""Clocks are the limiters' only source of time, so callers (and tests) control it."""

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic timeline; only differences between readings matter."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds``; used by blocking ``acquire``."""
        ...


class SystemClock:
    """Real time. Monotonic, so wall-clock adjustments never refill or drain a limiter."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class ManualClock:
    """A clock that moves only when told to; ``sleep`` advances it instantly.

    Every sleep is recorded in ``sleeps`` so callers can assert how long code would have
    blocked without actually waiting.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"cannot move a clock backwards by {seconds}s")
        self._now += seconds

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(max(seconds, 0.0))
