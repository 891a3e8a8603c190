"""What a killed process left of its sandboxes, found and reclaimed by whoever starts next.

A process that dies by SIGKILL runs no cleanup. Its bwrap sandboxes die with it (bwrap's
`--die-with-parent`, and the kernel ends a pid namespace with its init), but what the
`process` backend started is re-parented and keeps running, and every cgroup and
directory it made stays behind. Several services may share a host, a cgroup parent and
even a root directory, so only what belongs to an owner that is gone is reclaimed.

An owner is a process named by pid, start time (clock ticks after boot) and boot id:
`<pid>.<start>.<boot>`. The pid alone would be enough while the owner lives, but pids are
reused (pid_max is often 32768): the start time tells a reused pid apart, and the boot id a
directory that outlived a reboot, where an early-started service may get the same pid at
the same tick again.

What carries the owner:

- a cgroup's name: `<prefix><anything>@<owner>`. Names without it, `<prefix><pid>-<anything>`
  (etude.tasks.testrun's `etude-grade-<pid>-…`), are judged by the pid alone: a reused pid
  keeps the cgroup, the safe mistake. Names of neither shape are never touched;
- a directory `<parent>/<owner>/` (`owned_dir`) holding what that process made: workspaces;
  the cgroup parents it made its cgroups in (a restarted service may run in another
  cgroup than its predecessor: a new login, another unit); and, without a writable cgroup
  tree, one `<name>.pids` record per sandbox of the pid and start time of each process it
  started (`etude.sandbox.limits.limited` writes them), so that their process sessions
  can still be found after the owner died.

`reclaim_cgroups(prefix)` and `reclaim_owned_dirs(parent)` kill every process of what they
reclaim (stopped first, so a fork bomb cannot refill what is freed) and remove it.
Nothing is unmounted: the sandboxes' mounts live in their own mount namespaces and end
with them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path

from etude.sandbox.limits import RECORD_SUFFIX, CgroupSupport, cgroup_pids
from etude.sandbox.procs import descendants, in_session, kill_all, stat_fields

log = logging.getLogger(__name__)

CGROUP_PARENTS = "cgroups"  # in an owner's directory: where it made its cgroups
EMPTY_WAIT_SECONDS = 2.0  # a killed process leaves its cgroup a moment after the signal


@dataclass(frozen=True, slots=True)
class Owner:
    pid: int
    start: int | None = None
    """Clock ticks after boot at which it started; None: judged by the pid alone."""
    boot: str | None = None

    @classmethod
    def current(cls) -> Owner:
        owner = cls.of(os.getpid())
        assert owner is not None
        return owner

    @classmethod
    def of(cls, pid: int) -> Owner | None:
        """The live process `pid`, None if there is none."""
        start = _start_time(pid)
        return None if start is None else cls(pid, start, _boot_id())

    @property
    def token(self) -> str:
        return f"{self.pid}.{self.start}.{self.boot}"

    @classmethod
    def parse(cls, token: str) -> Owner | None:
        pid, _, rest = token.partition(".")
        start, _, boot = rest.partition(".")
        if not (pid.isdigit() and start.isdigit() and boot.isalnum()):
            return None
        return cls(int(pid), int(start), boot)

    def alive(self) -> bool:
        if self.boot is not None and self.boot != _boot_id():
            return False
        start = _start_time(self.pid)
        return start is not None and self.start in (None, start)


def owner_of_cgroup(rest: str) -> Owner | None:
    """The owner a cgroup's name gives after its prefix (see the module docstring)."""
    if "@" in rest:
        return Owner.parse(rest.rpartition("@")[2])
    pid, dash, _ = rest.partition("-")
    return Owner(int(pid)) if dash and pid.isdigit() else None


@dataclass(slots=True)
class Reclaimed:
    """What one reclaim found of owners that are gone."""

    cgroups: int = 0
    processes: int = 0
    directories: int = 0

    def __add__(self, other: Reclaimed) -> Reclaimed:
        return Reclaimed(
            self.cgroups + other.cgroups,
            self.processes + other.processes,
            self.directories + other.directories,
        )

    def __bool__(self) -> bool:
        return bool(self.cgroups or self.processes or self.directories)


def reclaim_cgroups(prefix: str, parents: Iterable[Path] | None = None) -> Reclaimed:
    """Empty and remove every cgroup `<prefix>…` under `parents` whose owner is gone.
    `parents` defaults to where this process makes cgroups (its own, per controller;
    `CgroupSupport.detect`): a service restarted the same way finds its predecessor's there.
    Cgroups whose processes cannot be killed (a task stuck in the kernel) are left, logged.
    """

    def gone(name: str) -> bool:
        owner = owner_of_cgroup(name[len(prefix) :]) if name.startswith(prefix) else None
        return owner is not None and not owner.alive()

    if parents is None:
        parents = CgroupSupport.detect().parents.values()
    return _reclaim_cgroups_where(gone, parents)


def _reclaim_cgroups_where(gone: Callable[[str], bool], parents: Iterable[Path]) -> Reclaimed:
    found, removed = Reclaimed(), set()
    for parent in parents:  # cgroup v1: one per controller, the same names in each
        names: list[str] = []
        with contextlib.suppress(OSError):
            names = os.listdir(parent)
        for name in sorted(filter(gone, names)):
            killed, emptied = _remove_cgroup(parent / name)
            found.processes += killed
            if emptied:
                removed.add(name)
    found.cgroups = len(removed)
    return found


def _remove_cgroup(directory: Path) -> tuple[int, bool]:
    """(processes killed, whether it is gone). Its own child cgroups go first."""
    killed = 0
    for inner, _subdirs, _files in os.walk(directory, topdown=False):
        pids = partial(cgroup_pids, Path(inner))
        killed += kill_all(pids)
        deadline = time.monotonic() + EMPTY_WAIT_SECONDS
        while pids() and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            os.rmdir(inner)
        except FileNotFoundError:
            pass  # another reclaimer was faster
        except OSError as error:
            log.warning("cannot remove the leftover cgroup %s: %s", inner, error)
            return killed, False
    return killed, True


def owned_dir(parent: Path, cgroup_parents: Iterable[Path] = ()) -> Path:
    """This process's directory under `parent`, made if missing. `cgroup_parents`: where
    it makes cgroups named `…@<owner>`, written down so that they are found after its
    death even if the next process to start runs in another cgroup."""
    directory = parent / Owner.current().token
    directory.mkdir(parents=True, exist_ok=True)
    if lines := "".join(f"{p}\n" for p in cgroup_parents):
        (directory / CGROUP_PARENTS).write_text(lines)
    return directory


def _named_for(owner: Owner, cgroup: str) -> bool:
    return cgroup.endswith(f"@{owner.token}")


def release_owned_dir(directory: Path) -> None:
    """At a clean stop: remove this process's directory unless something (a session of
    another user of it in this process) is still in it."""
    with contextlib.suppress(OSError):
        if not any(entry.name != CGROUP_PARENTS for entry in directory.iterdir()):
            (directory / CGROUP_PARENTS).unlink(missing_ok=True)
            directory.rmdir()


def reclaim_owned_dirs(parent: Path) -> Reclaimed:
    """Remove every `<parent>/<owner>/` whose owner is gone, first its cgroups under the
    parents it wrote down and the processes its `.pids` records name. Entries that do not
    name an owner are left alone."""
    found = Reclaimed()
    entries: list[Path] = []
    with contextlib.suppress(OSError):
        entries = list(parent.iterdir())
    for directory in entries:
        owner = Owner.parse(directory.name)
        if owner is None or owner.alive() or not directory.is_dir():
            continue
        with contextlib.suppress(OSError):
            recorded = [Path(p) for p in (directory / CGROUP_PARENTS).read_text().splitlines()]
            ours = partial(_named_for, owner)
            found += _reclaim_cgroups_where(ours, recorded)
        for record in directory.glob(f"*{RECORD_SUFFIX}"):
            found.processes += reclaim_recorded(record)
        found.directories += sum(1 for entry in directory.iterdir() if entry.is_dir())
        remove_tree(directory)
    return found


def reclaim_recorded(record: Path) -> int:
    """Kill what the sandbox of `record` started (`reclaim_sessions` of each recorded
    `<pid> <start>` line)."""
    leaders = []
    with contextlib.suppress(OSError):
        for line in record.read_text().splitlines():
            pid, _, start = line.partition(" ")
            if pid.isdigit() and start.isdigit():
                leaders.append(Owner(int(pid), int(start)))
    killed = reclaim_sessions(leaders)
    record.unlink(missing_ok=True)
    return killed


def reclaim_sessions(leaders: Iterable[Owner]) -> int:
    """Kill the processes of each leader's session, and the leader's descendants. A leader
    whose pid another process now holds (another start time, another boot) is skipped. A
    session id stays in use, and so cannot be reused, for as long as one process is left in
    it: a process whose session id is the pid of a leader that is gone is one of its own."""
    killed = 0
    for leader in leaders:
        if leader.boot is not None and leader.boot != _boot_id():
            continue  # from before a reboot: nothing of it runs
        now = _start_time(leader.pid)
        if now is not None and leader.start is not None and now != leader.start:
            continue  # the pid was reused: not ours

        def ours(pid: int = leader.pid) -> list[int]:
            return sorted(set(in_session(pid)) | set(descendants(pid)))

        killed += kill_all(ours)
    return killed


def remove_tree(path: Path) -> None:
    """`rm -rf path`, also of directories left without permissions (overlayfs' work dir),
    never following a symlink: every directory is opened relative to its parent's
    descriptor, so nothing swapped in during the walk leads it outside `path`."""
    with contextlib.suppress(OSError):
        _make_removable(path)
        for _top, subdirs, _files, dir_fd in os.fwalk(path):
            for name in subdirs:
                _make_removable(name, dir_fd)
    shutil.rmtree(path, ignore_errors=True)


def _make_removable(path: str | Path, dir_fd: int | None = None) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY, dir_fd=dir_fd)
        try:
            os.chmod(f"/proc/self/fd/{fd}", 0o700)  # the directory the fd holds, no link
        finally:
            os.close(fd)


def _start_time(pid: int) -> int | None:
    """When `pid` started, None if there is no such live process (a zombie is gone)."""
    try:
        fields = stat_fields(pid)
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


@cache
def _boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:12]
