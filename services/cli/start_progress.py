"""Whether a starting service is still getting somewhere.

On a cold machine every start is slow (imports read from disk, a model is loaded, an engine
warms up), by how much depends on the disk and the page cache rather than on the service: a
fixed deadline either fails a slow but healthy start or waits long for a stuck one. So a start
is waited for while it shows progress: the processes of its session use CPU or read, or its
log grows. A start that shows none of that for `stall_seconds` is stuck.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

from etude.sandbox.procs import in_session, stat_fields

SAMPLE_SECONDS = 1.0  # a look at /proc costs a walk over every process


@dataclass(frozen=True, slots=True)
class Activity:
    cpu_ticks: int
    """User and system time of the session's live processes, in clock ticks."""
    read_bytes: int
    """What they read (`rchar`: files, pipes, sockets; the page cache included)."""
    log_bytes: int


def activity(leader: int, log_path: Path) -> Activity:
    ticks = reads = 0
    for pid in in_session(leader):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat_fields(pid)
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        with contextlib.suppress(OSError, ValueError, StopIteration):
            lines = Path(f"/proc/{pid}/io").read_text().splitlines()
            reads += int(next(x for x in lines if x.startswith("rchar:")).split()[1])
    try:
        size = log_path.stat().st_size
    except OSError:
        size = 0
    return Activity(ticks, reads, size)


class StartWatch:
    """Tells a stuck start (`stalled`) from a slow one; `idle_seconds` is how long it has
    shown no progress."""

    def __init__(self, leader: int, log_path: Path, stall_seconds: float) -> None:
        self.leader, self.log_path, self.stall_seconds = leader, log_path, stall_seconds
        self._seen: Activity | None = None
        self._changed = self._sampled = time.monotonic()

    @property
    def idle_seconds(self) -> float:
        return time.monotonic() - self._changed

    def stalled(self) -> bool:
        now = time.monotonic()
        if now - self._sampled >= SAMPLE_SECONDS or self._seen is None:
            self._sampled = now
            seen = activity(self.leader, self.log_path)
            if seen != self._seen:
                self._seen, self._changed = seen, now
        return self.idle_seconds > self.stall_seconds
