"""Child processes that never outlive their parent, and their orderly termination."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_SETPRIV = shutil.which("setpriv")


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: if the parent dies, even by SIGKILL,
    # the kernel sends the child SIGTERM, so no service is left orphaned.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _bound_to_parent(argv: Sequence[str]) -> tuple[list[str], object]:
    """`argv` made to receive SIGTERM when its parent dies. util-linux's `setpriv` sets
    that before exec with no Python in the child, which matters in a process running gRPC
    threads (a forked child inherits their locks, and Python code there can crash);
    without setpriv, a `preexec_fn` does it."""
    if sys.platform != "linux":
        return list(argv), None
    if _SETPRIV:
        return [_SETPRIV, "--pdeathsig", "TERM", "--", *argv], None
    return list(argv), _die_with_parent


def spawn(
    argv: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start `argv` with stdout and stderr appended to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    argv, preexec = _bound_to_parent(argv)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            preexec_fn=preexec,
        )


def terminate(proc: subprocess.Popen[bytes], timeout: float) -> int | None:
    """SIGTERM, wait up to `timeout`, then SIGKILL. Returns the exit code."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
    return proc.returncode


def pid_alive(pid: int) -> bool:
    """True while `pid` names a process that has not exited (zombies count as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def log_tail(path: Path, lines: int = 20) -> str:
    """The last lines of a child's log, for error messages."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"
