"""What a run is doing right now, as one line in its registry record (`RunRecord.progress`).

The trainer may live in a Ray actor, so its progress reaches the driver, `etude runs show`
and the gateway the way everything else does: through the run registry. Steps report from
the SFT thread as well as from the event loop; writes are at most one per `min_seconds`,
except a phase's last, so a fast loop does not flood Redis. `close` ends the writing before
the loop ends: a line the SFT thread says while the run shuts down would otherwise become a
task the closing loop destroys half-sent.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from etude.common.runs import RunRegistry

log = logging.getLogger(__name__)


def eta(done: int, total: int, started: float) -> str:
    """`ETA 4 min` from the pace so far (monotonic `started`); empty before the first."""
    if done <= 0 or done >= total:
        return ""
    left = (time.monotonic() - started) / done * (total - done)
    return f"ETA {left / 60:.0f} min" if left >= 90 else f"ETA {left:.0f} s"


class RunProgress:
    def __init__(self, registry: RunRegistry, run_id: str, min_seconds: float = 1.0) -> None:
        self.registry, self.run_id, self.min_seconds = registry, run_id, min_seconds
        self.loop = asyncio.get_running_loop()
        self._lock = threading.Lock()
        self._last = 0.0
        self._closed = False
        self._pending: set[Future] = set()

    def say(self, text: str, *, last: bool = False) -> None:
        """Record `text` (from any thread); dropped if the previous line is too recent,
        unless `last`."""
        with self._lock:
            now = time.monotonic()
            if self._closed or (not last and now - self._last < self.min_seconds):
                return
            self._last = now
            write = self.registry.update(self.run_id, progress=text)
            future = asyncio.run_coroutine_threadsafe(write, self.loop)
            self._pending.add(future)
        future.add_done_callback(self._settled)

    async def close(self, timeout: float = 5.0) -> None:
        """Say nothing more, and let the lines already sent reach the registry (or give up
        on them after `timeout`) while the loop and the Redis client still run."""
        with self._lock:
            self._closed = True
            pending = [asyncio.wrap_future(f) for f in self._pending]
        if pending:
            done, _ = await asyncio.wait(pending, timeout=timeout)
            for mirror in done:  # a failed write is logged by `_settled`; its mirror's
                if not mirror.cancelled():  # exception is read here, or asyncio prints
                    mirror.exception()  # "Future exception was never retrieved"
        for future in list(self._pending):
            future.cancel()

    def _settled(self, future: Future) -> None:
        with self._lock:
            self._pending.discard(future)
        _log_failure(future)

    def counter(self, what: str, total: int) -> Callable[[int, str], None]:
        """`tell(done, detail)` says `{what} {done}/{total}: {detail}, ETA …`, the ETA from
        the pace since this call; the last count is always written."""
        started = time.monotonic()

        def tell(done: int, detail: str = "") -> None:
            parts = ", ".join(p for p in (detail, eta(done, total, started)) if p)
            self.say(f"{what} {done}/{total}" + (f": {parts}" if parts else ""), last=done >= total)

        return tell


def _log_failure(future: Future) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("progress not recorded: %s", future.exception())
