"""Walking a directory tree of the workspace through fds, honouring `.gitignore`.

Shared by list_dir, file_search and grep's pure-Python engine, so the three agree on what is
visible. Every directory is opened with `O_NOFOLLOW` relative to its parent's fd: symlinks are
reported as entries but never entered, and one swapped in during the walk cannot redirect it
(see paths.py for why the kernel must not follow links for us). `.git` is always hidden.

Entries come depth-first, each directory's entries sorted by the bytes of their names, which is
the order `rg --sort path` uses.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from etude.common.gitignore import IgnoreRules, Pattern, parse
from etude.environment.tools.paths import Kind, WorkspacePath

GITIGNORE = ".gitignore"
ALWAYS_HIDDEN = ".git"
# A bigger .gitignore is almost certainly not one; reading it whole would only waste memory.
MAX_GITIGNORE_BYTES = 1 << 20

_OPEN_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | _OPEN_FLAGS
_PATH_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class Entry:
    path: str
    """Workspace-relative path."""
    name: str
    depth: int
    """1 for an entry of the start directory, 2 for one inside those, …"""
    kind: Kind
    parent_fd: int
    """The fd of the containing directory; valid only until the walk moves on."""

    def open_read(self) -> BinaryIO:
        """Open this regular file without following a link swapped in meanwhile."""
        fd = os.open(self.name, os.O_RDONLY | _OPEN_FLAGS, dir_fd=self.parent_fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise IsADirectoryError(f"{self.path} is no longer a regular file")
        return os.fdopen(fd, "rb")

    def link_target(self) -> str:
        return os.readlink(self.name, dir_fd=self.parent_fd)


def walk(start: WorkspacePath, *, max_depth: int | None = None) -> Iterator[Entry]:
    """Entries below the directory `start`, skipping ignored ones and never entering them."""
    rules = ancestor_rules(start, include_start=True)
    fd = start.open_dir()
    try:
        yield from _walk(fd, _directory(start), 1, rules, max_depth)
    finally:
        os.close(fd)


def ancestor_rules(start: WorkspacePath, *, include_start: bool) -> IgnoreRules:
    """The `.gitignore` rules of the root and every directory down to `start` (or its parent)."""
    rules = IgnoreRules()
    levels = len(start.parts) if include_start else len(start.parts) - 1
    if levels < 0:
        return rules  # the root's own rules were not asked for
    fd = os.open(start.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        rules.push("", read_gitignore(fd))
        for depth in range(1, levels + 1):
            next_fd = os.open(start.parts[depth - 1], _PATH_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = next_fd
            rules.push("/".join(start.parts[:depth]), read_gitignore(fd))
    finally:
        os.close(fd)
    return rules


def read_gitignore(dir_fd: int) -> list[Pattern]:
    """The rules in `.gitignore` of a directory; none when it is absent, a link or unreadable."""
    try:
        fd = os.open(GITIGNORE, os.O_RDONLY | _OPEN_FLAGS, dir_fd=dir_fd)
    except OSError:
        return []
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        data = file.read(MAX_GITIGNORE_BYTES)
    return parse(data.decode("utf-8", "replace"))


def _walk(
    fd: int, directory: str, depth: int, rules: IgnoreRules, max_depth: int | None
) -> Iterator[Entry]:
    with os.scandir(fd) as scan:
        entries = sorted(scan, key=lambda entry: os.fsencode(entry.name))
    for entry in entries:
        if entry.name == ALWAYS_HIDDEN:
            continue
        path = f"{directory}/{entry.name}" if directory else entry.name
        kind = _entry_kind(entry)
        if rules.ignored(path, kind == "dir"):
            continue
        yield Entry(path, entry.name, depth, kind, fd)
        if kind == "dir" and (max_depth is None or depth < max_depth):
            yield from _walk_child(fd, entry.name, path, depth + 1, rules, max_depth)


def _walk_child(
    parent_fd: int, name: str, path: str, depth: int, rules: IgnoreRules, max_depth: int | None
) -> Iterator[Entry]:
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError:
        return  # gone, replaced by a link, or unreadable: skipped, as ripgrep skips it
    try:
        rules.push(path, read_gitignore(fd))
        try:
            yield from _walk(fd, path, depth, rules, max_depth)
        finally:
            rules.pop()
    finally:
        os.close(fd)


def _entry_kind(entry: os.DirEntry[str]) -> Kind:
    try:
        if entry.is_symlink():
            return "symlink"
        if entry.is_dir(follow_symlinks=False):
            return "dir"
        return "file" if entry.is_file(follow_symlinks=False) else "other"
    except OSError:
        return "other"


def _directory(start: WorkspacePath) -> str:
    return "/".join(start.parts)
