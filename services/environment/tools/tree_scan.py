"""Listing and reading a whole workspace tree through fds, for host-side walks (Diff, search).

The workspace is written by an adversary while the host walks it, so the walk never lets the
kernel follow a name: every directory is opened with `O_NOFOLLOW` relative to its parent's fd
(a directory swapped for a symlink to `/` makes that open fail instead of leading to the
host), files are opened `O_NOFOLLOW | O_NONBLOCK` (a FIFO never blocks) and checked with
`fstat` after opening, and only regular files, directories and symlinks count. FIFOs, sockets
and devices are listed as skipped and never read. A `WalkBudget` bounds the time, the number
of entries and the bytes read, so one session's tree cannot stall the host for the others.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from etude.environment.types import WalkLimitError

NodeKind = Literal["file", "symlink"]

MAX_DEPTH = 256
"""Directories nested deeper are skipped: each level holds an fd while the walk is below it."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_PATH_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(slots=True)
class WalkBudget:
    """Limits shared by one walk and the reads that follow it; exceeding one raises
    `WalkLimitError` with a message saying which."""

    seconds: float
    max_entries: int
    max_bytes: int
    what: str = "the workspace walk"
    started: float = field(default_factory=time.monotonic)
    entries: int = 0
    bytes_read: int = 0

    def entry(self) -> None:
        self.entries += 1
        if self.entries > self.max_entries:
            raise WalkLimitError(
                f"{self.what} stopped: more than {self.max_entries} entries in the workspace"
            )
        self.check_time()

    def check_time(self) -> None:
        if time.monotonic() - self.started > self.seconds:
            raise WalkLimitError(f"{self.what} stopped: it took longer than {self.seconds:g} s")

    def remaining(self) -> int:
        return max(0, self.max_bytes - self.bytes_read)

    def spend(self, size: int) -> None:
        self.bytes_read += size
        if self.bytes_read > self.max_bytes:
            raise WalkLimitError(
                f"{self.what} stopped: more than {self.max_bytes} bytes of changed files"
            )


@dataclass(frozen=True, slots=True)
class Node:
    kind: NodeKind
    mode: int
    size: int
    mtime_ns: int


@dataclass(slots=True)
class Scan:
    nodes: dict[str, Node] = field(default_factory=dict)
    """Workspace-relative path → what is there (regular files and symlinks only)."""
    skipped: list[str] = field(default_factory=list)
    """Entries that are neither (FIFOs, sockets, devices) or nested too deep."""


def scan_tree(
    root: Path, budget: WalkBudget, skip_dir: Callable[[str, str], bool] = lambda p, n: False
) -> Scan:
    """Every regular file and symlink below `root`; `skip_dir(path, name)` prunes directories."""
    result = Scan()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the trusted handle
    try:
        _scan(fd, "", 0, budget, skip_dir, result)
    finally:
        os.close(fd)
    return result


def _scan(fd: int, directory: str, depth: int, budget, skip_dir, result: Scan) -> None:
    with os.scandir(fd) as entries:
        names = sorted(entry.name for entry in entries)
    for name in names:
        budget.entry()
        path = f"{directory}/{name}" if directory else name
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue  # gone meanwhile
        mode = info.st_mode
        if stat.S_ISDIR(mode):
            if skip_dir(path, name):
                continue
            if depth + 1 >= MAX_DEPTH:
                result.skipped.append(path)
                continue
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue  # replaced by a link or something else meanwhile: not entered
            try:
                if stat.S_ISDIR(os.fstat(child).st_mode):
                    _scan(child, path, depth + 1, budget, skip_dir, result)
            finally:
                os.close(child)
        elif stat.S_ISREG(mode) or stat.S_ISLNK(mode):
            kind: NodeKind = "file" if stat.S_ISREG(mode) else "symlink"
            result.nodes[path] = Node(kind, mode, info.st_size, info.st_mtime_ns)
        else:
            result.skipped.append(path)


@dataclass(frozen=True, slots=True)
class Content:
    kind: NodeKind
    mode: int
    data: bytes
    """A file's bytes, or a symlink's target."""


def read_node(root: Path, path: str, budget: WalkBudget) -> Content | None:
    """What is at `path` now, reached without following any link; None when it is gone or is
    not a regular file or symlink any more (a swap since the scan)."""
    parts = path.split("/")
    try:
        with _parent(root, parts[:-1]) as parent:
            name = parts[-1]
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                target = os.readlink(os.fsencode(name), dir_fd=parent)
                budget.spend(len(target))
                return Content("symlink", info.st_mode, target)
            fd = os.open(name, _FILE_FLAGS, dir_fd=parent)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            return None  # a FIFO or device swapped in: never read
        data = file.read(budget.remaining() + 1)
    budget.spend(len(data))
    return Content("file", opened.st_mode, data)


@contextmanager
def _parent(root: Path, directories: list[str]) -> Iterator[int]:
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in directories:
            next_fd = os.open(name, _PATH_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        yield fd
    finally:
        os.close(fd)
