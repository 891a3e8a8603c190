"""Child processes that never outlive their parent, and their orderly termination.

Each child started here leads a session (and process group) of its own, so what it starts in
turn (vLLM's engine core, multiprocessing workers) can be ended with it: `terminate` asks the
child to stop, then kills whatever is left of its group, and `reap` does the same for a child
that ended on its own. The group is killed before the child is reaped: until then its pid
cannot be reused, so the signal cannot reach a stranger's group.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
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
    """Start `argv` with stdout and stderr appended to `log_path`, as the leader of a new
    session: its descendants that stay in it end with it (`terminate`, `reap`)."""
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
            start_new_session=True,
        )


def terminate(proc: subprocess.Popen[bytes], timeout: float) -> int | None:
    """SIGTERM, wait up to `timeout`, then SIGKILL; then SIGKILL what is left of its process
    group (children that ignore SIGTERM or were never told). Returns the exit code."""
    if not _has_ended(proc):
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while not _has_ended(proc) and time.monotonic() < deadline:
            time.sleep(0.02)
    return reap(proc, kill=True)


def reap(proc: subprocess.Popen[bytes], *, kill: bool = False) -> int | None:
    """The exit code of a child that has ended, after killing the rest of its process group;
    None while it runs (unless `kill`: then it is killed first)."""
    if not _has_ended(proc):
        if not kill:
            return None
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    if proc.returncode is None:  # ended but not reaped: its pid still names its group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.wait()


def _has_ended(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the child has ended, reaped or not; never reaps it."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped behind Popen's back
        return True


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
