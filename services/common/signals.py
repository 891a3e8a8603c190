"""Ctrl-C and SIGTERM for commands that supervise processes (`etude up`, `etude train`):
a signal at any point, even during start-up, becomes an exception that unwinds through the
command's clean-up; during the clean-up further signals are ignored so it can finish. Shared:
the run driver (`etude.trainer.driver`) records a run such a signal ends as stopped."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequested(Exception):
    """Raised in the main thread when SIGINT or SIGTERM arrives; args[0] names it."""


def _raise_stop(signum: int, _frame: object) -> None:
    raise StopRequested(signal.Signals(signum).name)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    for sig in STOP_SIGNALS:
        signal.signal(sig, _raise_stop)
    try:
        yield
    finally:
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)  # let the clean-up finish
