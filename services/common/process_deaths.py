"""Why a process ended, said so a user can act on it.

An exit code or a signal number alone hides the usual cause on a small machine: the kernel's
out-of-memory killer ends the largest process with SIGKILL, and the service that lost its
engine only sees that the engine is gone. The kernel's log says which process it ended
(`/dev/kmsg`, readable by root; elsewhere the note is left out).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from dataclasses import dataclass

_OOM_KILL = re.compile(r"Killed process (\d+) \(([^)]*)\)")


def ended_because(returncode: int) -> str:
    """`exited with code 1`, `was killed by SIGKILL`."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"was killed by {name}"


@dataclass(frozen=True, slots=True)
class OomKill:
    pid: int
    command: str
    seconds_ago: float


def oom_kills(within_seconds: float) -> list[OomKill]:
    """The processes the kernel's out-of-memory killer ended in the last `within_seconds`;
    empty where its log cannot be read."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return []
    now_us = time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6  # the log's clock
    found = []
    try:
        while True:
            try:
                record = os.read(fd, 8192).decode(errors="replace")
            except BlockingIOError:
                break  # read it all
            except OSError:
                continue  # a record overwritten while reading (EPIPE): go on
            header, _, message = record.partition(";")
            fields = header.split(",")
            match = _OOM_KILL.search(message)
            if match is None or len(fields) < 3:
                continue
            with contextlib.suppress(ValueError):
                ago = (now_us - int(fields[2])) / 1e6
                if ago <= within_seconds:
                    found.append(OomKill(int(match[1]), match[2], ago))
    finally:
        os.close(fd)
    return found


def memory_note(within_seconds: float) -> str:
    """`; the kernel ran out of memory and ended python3 (pid 1234) 12 s ago` or ``."""
    kills = oom_kills(within_seconds)
    if not kills:
        return ""
    ended = ", ".join(f"{k.command} (pid {k.pid}) {k.seconds_ago:.0f} s ago" for k in kills[-3:])
    return f"; the machine ran out of memory: the kernel's OOM killer ended {ended}"
