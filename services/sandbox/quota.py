"""Disk accounting of a session: what its writable layer holds on the host's disk.

The persistent overlay upper (or the copy-mode tree) lives on the host, so that forks and
restarts keep it; a size-limited tmpfs cannot hold it. So the quota is enforced by
accounting: the layer's allocated blocks are summed (a sparse file counts what it uses,
not its length), plus a small charge per entry so a million empty files count too. The
walk never follows a link, never opens a file (a FIFO or device is only `lstat`ed), and
stops at a deadline, so a huge or hostile tree cannot stall the caller; a walk cut short
is a lower bound, and says so.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

ENTRY_BYTES = 512  # charged per file, directory or link, for its inode
WALK_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class Usage:
    bytes: int
    complete: bool
    """False when the walk hit its deadline: `bytes` is then a lower bound."""


def allocated(root: Path, deadline_s: float = WALK_SECONDS) -> Usage:
    """Bytes allocated under `root` (itself excluded), walked without following links."""
    stop = time.monotonic() + deadline_s
    total = 0
    pending = [str(root)]
    while pending:
        if time.monotonic() > stop:
            return Usage(total, complete=False)
        directory = pending.pop()
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue  # removed meanwhile
                    total += info.st_blocks * 512 + ENTRY_BYTES
                    if stat.S_ISDIR(info.st_mode):
                        pending.append(entry.path)
        except OSError:
            continue  # removed meanwhile, or not a directory any more
    return Usage(total, complete=True)


class DiskQuota:
    """The usage of one session's layer against its quota, measured on demand."""

    def __init__(self, layer: Path, quota_bytes: int, baseline: Path | None = None) -> None:
        """`baseline`: a tree whose usage is not charged (copy mode's base, copied in)."""
        self.layer = layer
        self.quota_bytes = quota_bytes
        self._baseline = allocated(baseline).bytes if baseline is not None else 0
        self.used = 0
        self.measured_at = 0.0
        self.seconds_per_walk = 0.0

    def measure(self) -> int:
        started = time.monotonic()
        usage = allocated(self.layer)
        self.seconds_per_walk = time.monotonic() - started
        self.used = max(0, usage.bytes - self._baseline)
        self.measured_at = time.monotonic()
        return self.used

    def left(self, max_age_s: float = 1.0) -> int:
        """Bytes that may still be written (never negative); re-measured when the last
        measure is older than `max_age_s`."""
        if time.monotonic() - self.measured_at > max_age_s:
            self.measure()
        return max(0, self.quota_bytes - self.used)
