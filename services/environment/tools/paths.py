"""Workspace paths: turn the path an agent wrote into a place inside the workspace, or refuse.

Every tool that takes a `path` goes through `resolve()` and then touches the file only through
the returned `WorkspacePath`. Why this is done by hand instead of `Path.resolve()`:

* `ctx.root` may be `/proc/<pid>/root/workspace`. The kernel resolves an absolute symlink target
  against the root of the process that follows it, i.e. the host's `/`, not the sandbox's. A
  link `workspace/x -> /etc/passwd` would hand the host's file to the agent. So the kernel is
  never allowed to follow a link: each component is opened with `O_PATH | O_NOFOLLOW` relative
  to the directory fd before it, links are read with `readlink` and their targets resolved here.
* Only relative link targets that stay inside the workspace are followed; absolute targets,
  `..` above the root and more than `MAX_SYMLINK_HOPS` links (loops, long chains) are refused.
* The result is a list of real directory names with no symlinks in it. Using it walks those
  names again from the root with `O_NOFOLLOW`, so a symlink swapped in after resolution makes
  the operation fail instead of being followed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

from etude.environment.tools.base import ToolError

MAX_SYMLINK_HOPS = 40

# An fd that names a directory without opening it for reading; fine as `dir_fd` for *at calls.
_DIR_PATH_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO must fail or return at once, never wait for a writer or reader.
_SAFE_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK

Kind = Literal["dir", "file", "symlink", "other", "missing"]


@dataclass(frozen=True, slots=True)
class WorkspacePath:
    """A resolved path: real names from the workspace root, none of them a followed symlink."""

    root: Path
    parts: tuple[str, ...]
    kind: Kind
    missing: int = 0
    """How many trailing parts do not exist yet (only with `allow_missing`)."""

    @property
    def relative(self) -> str:
        """Workspace-relative POSIX path; "." for the root itself."""
        return "/".join(self.parts) or "."

    @property
    def name(self) -> str:
        return self.parts[-1] if self.parts else "."

    def open_read(self) -> BinaryIO:
        """Open a regular file for reading (a directory or special file is an error)."""
        with self._parent_fd() as parent:
            fd = os.open(self.name, os.O_RDONLY | _SAFE_FLAGS, dir_fd=parent)
        _require_regular(fd, self.relative)
        return os.fdopen(fd, "rb")

    def write_bytes(self, data: bytes) -> None:
        """Create or overwrite a regular file, creating missing parent directories first."""
        with self._parent_fd(create_parents=True) as parent:
            fd = os.open(self.name, os.O_WRONLY | os.O_CREAT | _SAFE_FLAGS, 0o666, dir_fd=parent)
        _require_regular(fd, self.relative)
        with os.fdopen(fd, "wb") as file:
            # Truncate only after the checks, so a directory or device is never truncated.
            file.truncate(0)
            file.write(data)

    def open_dir(self) -> int:
        """An fd open for listing this directory; the caller closes it."""
        if not self.parts:
            return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        with self._parent_fd() as parent:
            return os.open(self.name, os.O_RDONLY | os.O_DIRECTORY | _SAFE_FLAGS, dir_fd=parent)

    def unlink(self) -> None:
        with self._parent_fd() as parent:
            os.unlink(self.name, dir_fd=parent)

    def stat(self) -> os.stat_result:
        with self._parent_fd() as parent:
            return os.stat(self.name, dir_fd=parent, follow_symlinks=False)

    @contextmanager
    def _parent_fd(self, *, create_parents: bool = False) -> Iterator[int]:
        """The directory holding the last part, reached again without following any link."""
        if not self.parts:
            raise ToolError("is_directory", "the workspace root is a directory, not a file")
        first_missing = len(self.parts) - self.missing
        fd = os.open(self.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for index, name in enumerate(self.parts[:-1]):
                if create_parents and index >= first_missing:
                    # Created meanwhile is fine: the O_NOFOLLOW open below still checks it.
                    with suppress(FileExistsError):
                        os.mkdir(name, dir_fd=fd)
                next_fd = os.open(name, _DIR_PATH_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = next_fd
            yield fd
        finally:
            os.close(fd)


def resolve(
    root: Path, path: str, *, follow_final: bool = True, allow_missing: bool = False
) -> WorkspacePath:
    """Resolve `path` (relative to the workspace root) or raise `ToolError`.

    `follow_final=False` keeps a symlink in the last position as the link itself (for deleting
    it); `allow_missing=True` accepts a path whose tail does not exist yet (for creating it).
    """
    shown = path.strip() if isinstance(path, str) else ""
    if not shown or "\0" in shown:
        raise ToolError("invalid_path", "path must be a non-empty path without NUL characters")
    if shown.startswith("/"):
        raise _outside(
            f"absolute paths are not accepted ({shown}). Use a path relative to the workspace "
            "root, e.g. 'src/app.py' rather than '/workspace/src/app.py'."
        )
    pending = _split(shown)
    parts: list[str] = []
    fds = [os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)]
    hops = 0
    try:
        while pending:
            name = pending.pop(0)
            if name == "..":
                if not parts:
                    raise _outside(f"{shown} climbs above the workspace root with '..'.")
                parts.pop()
                os.close(fds.pop())
                continue
            last = not pending
            try:
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fds[-1])
            except FileNotFoundError:
                rest = [name, *pending]
                if allow_missing and ".." not in rest:
                    return WorkspacePath(root, (*parts, *rest), "missing", missing=len(rest))
                raise ToolError("not_found", _not_found(shown)) from None
            mode = os.fstat(fd).st_mode
            if stat.S_ISLNK(mode) and (follow_final or not last):
                os.close(fd)
                hops += 1
                if hops > MAX_SYMLINK_HOPS:
                    raise ToolError(
                        "too_many_symlinks",
                        f"{shown}: too many symlinks (more than {MAX_SYMLINK_HOPS}; a loop?)",
                    )
                pending[:0] = _link_target(fds[-1], name, parts, shown)
                continue
            if last:
                os.close(fd)
                return WorkspacePath(root, (*parts, name), _kind(mode))
            if not stat.S_ISDIR(mode):
                os.close(fd)
                where = "/".join((*parts, name))
                raise ToolError("not_a_directory", f"{shown}: {where} is a file, not a directory")
            fds.append(fd)
            parts.append(name)
        return WorkspacePath(root, tuple(parts), "dir")
    finally:
        for fd in fds:
            os.close(fd)


def _link_target(dir_fd: int, name: str, parts: list[str], shown: str) -> list[str]:
    """The components of a relative link target, to be resolved from the link's directory."""
    target = os.readlink(name, dir_fd=dir_fd)
    if target.startswith("/"):
        link = "/".join((*parts, name))
        raise _outside(
            f"{shown} goes through the symlink {link} -> {target}, which points outside the "
            "workspace (only relative symlinks that stay inside are followed)."
        )
    # Climbing above the root through the target's '..' is caught by the main loop.
    return _split(target)


def _split(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def _kind(mode: int) -> Kind:
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "symlink" if stat.S_ISLNK(mode) else "other"


def _require_regular(fd: int, shown: str) -> None:
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):
        return
    os.close(fd)
    if stat.S_ISDIR(mode):
        raise ToolError("is_directory", f"{shown} is a directory, not a file")
    raise ToolError("not_a_file", f"{shown} is not a regular file")


def _outside(message: str) -> ToolError:
    return ToolError("outside_workspace", f"Refused: {message}")


def _not_found(shown: str) -> str:
    return f"{shown} does not exist. Use list_dir or file_search to find the right path."
