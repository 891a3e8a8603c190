"""The unified diff of a workspace against its base."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path

SKIP_DIRS = frozenset({".git"})
MAX_TEXT_BYTES = 2 * 1024 * 1024
NO_NEWLINE = "\\ No newline at end of file\n"


@dataclass(frozen=True, slots=True)
class WorkspaceDiff:
    unified_diff: str
    changed_paths: list[str]


def _files(root: Path) -> dict[str, os.stat_result]:
    found = {}
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in SKIP_DIRS)
        for name in names:
            path = Path(directory, name)
            stat = path.lstat()
            found[str(path.relative_to(root))] = stat
    return found


def _read(path: Path) -> bytes:
    if path.is_symlink():
        return f"-> {os.readlink(path)}\n".encode()
    return path.read_bytes()


def _lines(data: bytes) -> list[str] | None:
    if b"\0" in data[:8192] or len(data) > MAX_TEXT_BYTES:
        return None
    return data.decode("utf-8", errors="replace").splitlines(keepends=True)


def diff_trees(base: Path, current: Path) -> WorkspaceDiff:
    """Compare file by file; size and mtime spare reading files that did not change
    (an overlay shows untouched files with the base's own inode data)."""
    before, after = _files(base), _files(current)
    parts, changed = [], []
    for rel in sorted(before.keys() | after.keys()):
        old, new = before.get(rel), after.get(rel)
        if old and new and (old.st_size, old.st_mtime_ns) == (new.st_size, new.st_mtime_ns):
            continue
        old_data = _read(base / rel) if old else b""
        new_data = _read(current / rel) if new else b""
        if old and new and old_data == new_data:
            continue
        changed.append(rel)
        a = f"a/{rel}" if old else "/dev/null"
        b = f"b/{rel}" if new else "/dev/null"
        old_lines, new_lines = _lines(old_data), _lines(new_data)
        header = f"diff --git a/{rel} b/{rel}\n"
        if old_lines is None or new_lines is None:
            parts.append(f"{header}Binary files {a} and {b} differ\n")
            continue
        body = difflib.unified_diff(old_lines, new_lines, a, b)
        text = "".join(line if line.endswith("\n") else f"{line}\n{NO_NEWLINE}" for line in body)
        parts.append(header + text)
    return WorkspaceDiff("".join(parts), changed)
