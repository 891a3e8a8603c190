"""Process trees seen from the host, through /proc."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path


def stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name (which may hold spaces or ')'): the state,
    parent pid, process group and session first, the start time at index 19."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _table() -> dict[int, tuple[int, int, int, str]]:
    """pid → (parent pid, process group, session, state) of every process."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = stat_fields(int(entry.name))
                table[int(entry.name)] = (int(fields[1]), int(fields[2]), int(fields[3]), fields[0])
    return table


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, nearest first."""
    children: dict[int, list[int]] = {}
    for child, (parent, *_rest) in _table().items():
        children.setdefault(parent, []).append(child)
    found, frontier = [], [pid]
    while frontier:
        frontier = [c for p in frontier for c in children.get(p, [])]
        found += frontier
    return found


def in_group(group: int) -> list[int]:
    return [pid for pid, (_parent, g, *_rest) in _table().items() if g == group]


def in_session(session: int) -> list[int]:
    """Live processes whose session id is `session` (the leader included)."""
    return [
        pid for pid, (*_ids, s, state) in _table().items()
        if s == session and state not in ("Z", "X")
    ]  # fmt: skip


def children(pid: int) -> list[int]:
    return [child for child, (parent, *_rest) in _table().items() if parent == pid]


def kill_all(find: Callable[[], list[int]], rounds: int = 200) -> int:
    """SIGKILL every process `find()` returns, fork bombs included: first SIGSTOP each one
    as it appears (a stopped process cannot fork) until no new one does, then kill them
    all. Killing right away would let a bomb refill every freed slot. A signal takes
    effect a moment after `kill` returns, so a parent may still fork once after it was
    sent SIGSTOP: "no new process" must hold over a short pause, and whatever is left
    after the kill is hunted again."""
    stopped: set[int] = set()
    for _attempt in range(3):
        quiet = 0
        for _ in range(rounds):
            found = [p for p in find() if p not in stopped]
            if not found:
                quiet += 1
                if quiet >= 2:
                    break
                time.sleep(0.005)
                continue
            quiet = 0
            for victim in found:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(victim, signal.SIGSTOP)
                stopped.add(victim)
        for victim in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
        time.sleep(0.005)
        if not [p for p in find() if p not in stopped or _alive(p)]:
            break
    return len(stopped)


def _alive(pid: int) -> bool:
    """Still a live process (a zombie waiting for its parent counts as gone)."""
    try:
        state = stat_fields(pid)[0]
    except (OSError, IndexError):
        return False
    return state not in {"Z", "X"}


def subtree(pid: int) -> list[int]:
    """Every process below `pid`, read from the kernel's per-task child lists: cost grows
    with the tree, not with the host's process count (for frequent polling)."""
    found, frontier = [], [pid]
    while frontier:
        nxt = []
        for parent in frontier:
            try:
                tasks = os.listdir(f"/proc/{parent}/task")
            except OSError:
                continue
            for task in tasks:
                with contextlib.suppress(OSError, ValueError):
                    text = Path(f"/proc/{parent}/task/{task}/children").read_text()
                    nxt += [int(child) for child in text.split()]
        found += nxt
        frontier = nxt
    return found


def tasks_of_user(uid: int) -> int:
    """Threads of every process `uid` owns on this host: what RLIMIT_NPROC counts."""
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError):  # gone meanwhile
            if os.stat(f"/proc/{name}").st_uid == uid:
                total += len(os.listdir(f"/proc/{name}/task"))
    return total
