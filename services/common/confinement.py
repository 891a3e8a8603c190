"""Confining a caller-chosen directory to configured roots.

A service that opens a directory a request names (a session's repository, a workspace to
index) would otherwise read anything on the host: `/etc`, `/proc/self/root`, another
tenant's files. The path is resolved first (symlinks and `..` followed, as opening it would
follow them), then it must lie strictly inside one of the roots and outside every
forbidden directory. Callers open the resolved path, so a symlink swapped after the check
changes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


class PathNotAllowedError(PermissionError):
    """The directory lies outside every allowed root, or inside a forbidden one."""


def _real(path: Path | str) -> Path:
    return Path(os.path.realpath(path))


def confined_directory(
    path: str, roots: Iterable[Path], forbidden: Iterable[Path] = (), *, field: str = "path"
) -> Path:
    """The real path of `path` if it is allowed, else PathNotAllowedError (naming `field`)."""
    if not os.path.isabs(path):
        raise PathNotAllowedError(f"{field} {path!r} must be an absolute path")
    real = _real(path)
    for directory in map(_real, forbidden):
        if real == directory or real.is_relative_to(directory):
            raise PathNotAllowedError(f"{field} {path!r} is inside the service's own directory")
    # Strictly inside: a root itself would hand out everything under it at once.
    if not any(real != root and real.is_relative_to(root) for root in map(_real, roots)):
        raise PathNotAllowedError(f"{field} {path!r} is not under an allowed root")
    return real
