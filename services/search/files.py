"""Which files of a workspace are indexed, and reading them safely.

Text files only (UTF-8, no NUL byte), up to a size limit; hidden directories (`.git`,
`.venv`, caches) and build output are skipped (that path rule is `etude.search.types`, which
the environment follows too). Symlinks are never followed: a workspace is written by the
policy, and a link to a host file must not leak that file into search results.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from etude.search.types import SKIPPED_DIRS, is_indexed_path


def decode_text(data: bytes, max_bytes: int) -> str | None:
    """The file's text, or None when it is too large or not UTF-8 text."""
    if len(data) > max_bytes or b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def read_workspace(root: Path, max_bytes: int) -> Iterator[tuple[str, str]]:
    """(relative path, text) of every indexed file under root, in path order."""
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith(".") and d not in SKIPPED_DIRS)
        relative = os.path.relpath(directory, root)
        for name in sorted(names):
            path = name if relative == "." else f"{relative}/{name}"
            if not is_indexed_path(path):
                continue
            data = _read_no_follow(os.path.join(directory, name), max_bytes)
            text = decode_text(data, max_bytes) if data is not None else None
            if text is not None:
                yield path, text


def _read_no_follow(path: str, max_bytes: int) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:  # a symlink (ELOOP), a vanished file, an unreadable one
        return None
    with os.fdopen(fd, "rb") as stream:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # FIFOs and devices are not source
            return None
        return stream.read(max_bytes + 1)
