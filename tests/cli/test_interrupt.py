"""SIGTERM raised as KeyboardInterrupt, put off while a child process is being started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from etude.cli.interrupt import terminate_as_interrupt


class _SignalsOnFileno:
    """A stdin whose `fileno()` (called by Popen while it starts the child) SIGTERMs this
    process: the signal lands inside the start, as a SIGTERM from `kill` may."""

    def __init__(self, file) -> None:
        self.file = file

    def fileno(self) -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        return self.file.fileno()


def test_a_sigterm_during_a_process_start_interrupts_once_the_process_is_recorded(tmp_path):
    started: list[subprocess.Popen] = []
    with open(os.devnull) as devnull, pytest.raises(KeyboardInterrupt):
        with terminate_as_interrupt():
            child = subprocess.Popen(
                [sys.executable, "-c", "import time; time.sleep(30)"],
                stdin=_SignalsOnFileno(devnull),
            )
            started.append(child)  # reached: the start was not cut
            time.sleep(5)  # the interrupt, delivered again, lands here
    [child] = started
    child.kill()  # the command can stop what it started: it knows its pid
    assert child.wait(timeout=10) == -signal.SIGKILL


def test_a_sigterm_elsewhere_interrupts_at_once_and_the_handler_is_restored_after():
    previous = signal.getsignal(signal.SIGTERM)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with terminate_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    assert time.monotonic() - started < 2
    assert signal.getsignal(signal.SIGTERM) is previous
