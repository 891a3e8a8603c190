"""What a patch changed in the copy being graded, and putting paths back as the base has
them, without ever following a symlink.

The list of changes comes from comparing the two trees on disk (lstat only), not from
the patch's text: git decided what the patch does, and a path the patch's headers hide
is still found. Every write and delete here goes through `restore`, which replaces a
symlink or file standing where a directory should be instead of going through it, so no
path from a patch reaches outside the copy.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

# The top-level `.git` is the base's own, and git refuses to patch inside it.
_SKIPPED_TOP = {".git"}


def _entries(root: Path) -> dict[str, os.stat_result]:
    found: dict[str, os.stat_result] = {}
    for directory, subdirs, names in os.walk(root):  # never descends into a symlink
        relative = os.path.relpath(directory, root)
        if relative == ".":
            subdirs[:] = [d for d in subdirs if d not in _SKIPPED_TOP]
        for name in [*subdirs, *names]:
            path = name if relative == "." else f"{relative}/{name}"
            found[path] = os.lstat(Path(root, path))
    return found


def _same(base: Path, copy: Path, path: str, a: os.stat_result, b: os.stat_result) -> bool:
    if stat.S_IFMT(a.st_mode) != stat.S_IFMT(b.st_mode):
        return False
    if stat.S_ISLNK(a.st_mode):
        return os.readlink(base / path) == os.readlink(copy / path)
    if stat.S_ISDIR(a.st_mode):
        return True
    if (a.st_mode & 0o111) != (b.st_mode & 0o111) or a.st_size != b.st_size:
        return False
    if a.st_mtime_ns == b.st_mtime_ns:
        return True  # the copy kept the base's times; git gives what it writes new ones
    return (base / path).read_bytes() == (copy / path).read_bytes()


def changed_paths(base: Path, copy: Path) -> list[str]:
    """Paths added, removed or changed in `copy` relative to `base`, sorted (a changed
    directory is listed only when it is new, gone, or no longer a directory)."""
    before, after = _entries(base), _entries(copy)
    return sorted(
        path
        for path in before.keys() | after.keys()
        if path not in before
        or path not in after
        or not _same(base, copy, path, before[path], after[path])
    )


def regular_file(root: Path, path: str) -> bytes | None:
    """The bytes of `root/path` when it is a regular file reached through no symlink."""
    current = root
    for part in Path(path).parts:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except OSError:
            return None
        if stat.S_ISLNK(mode):
            return None
    return current.read_bytes() if stat.S_ISREG(mode) else None


def _remove(path: Path) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)  # removes symlinks inside, never their targets
    else:
        path.unlink()


def real_directory(root: Path, path: str) -> Path:
    """`root/path` made a plain directory reached through plain directories: any symlink
    or file standing on the way is removed (not followed) and replaced."""
    if Path(path).is_absolute() or ".." in Path(path).parts:
        raise ValueError(f"{path!r} is not a path inside the repository")
    current = root
    for part in Path(path).parts:
        current = current / part
        try:
            if stat.S_ISDIR(os.lstat(current).st_mode):
                continue
        except FileNotFoundError:
            pass
        _remove(current)
        current.mkdir()
    return current


def restore(base: Path, copy: Path, path: str) -> None:
    """Make `copy/path` what `base/path` is (removed when the base has nothing there)."""
    parent = real_directory(copy, str(Path(path).parent))
    target = parent / Path(path).name
    _remove(target)
    source = base / path
    if source.is_symlink():
        os.symlink(os.readlink(source), target)
    elif source.is_dir():
        shutil.copytree(source, target, symlinks=True)
    elif source.exists():
        shutil.copy2(source, target)


def write_file(root: Path, path: str, content: bytes) -> None:
    """Write `root/path` as a new regular file, replacing whatever stands there."""
    parent = real_directory(root, str(Path(path).parent))
    target = parent / Path(path).name
    _remove(target)
    target.write_bytes(content)
