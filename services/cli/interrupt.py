"""SIGTERM as Ctrl-C, for commands that clean up through their `with` blocks.

`timeout`, a cancelled CI job and `kill` send SIGTERM; left to the default, only this
process dies and what it started (a pool's workers, a child process) runs on. Raised as
KeyboardInterrupt instead, the command unwinds as it does on Ctrl-C.

An interrupt raised at an arbitrary bytecode can land while a child process is being
started: after its fork, before the object that would kill or wait for it records it. That
child then runs on unknown to anyone (a `git commit` writing into a directory being
removed, a pool worker blocked for ever on its queue). So the interrupt is put off while
the main thread is inside such a start, and delivered again a moment later.
"""

from __future__ import annotations

import concurrent.futures.process
import contextlib
import multiprocessing.popen_fork
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from types import CodeType, FrameType

RETRY_S = 0.02

# The functions between a fork and the moment its process is recorded by its owner.
_STARTING_A_PROCESS: frozenset[CodeType] = frozenset(
    function.__code__
    for function in (
        subprocess.Popen.__init__,
        multiprocessing.popen_fork.Popen.__init__,
        getattr(concurrent.futures.process.ProcessPoolExecutor, "_spawn_process", None),
    )
    if function is not None
)


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises KeyboardInterrupt in the main thread (put off while
    a child process is being started)."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        if starting_a_process(frame):
            threading.Timer(RETRY_S, os.kill, (os.getpid(), signum)).start()
            return
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def starting_a_process(frame: FrameType | None) -> bool:
    """Whether `frame` or a caller of it is starting a child process."""
    while frame is not None:
        if frame.f_code in _STARTING_A_PROCESS:
            return True
        frame = frame.f_back
    return False
