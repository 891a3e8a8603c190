"""Projects on disk, unified diffs between versions of them, and single-commit repositories.

A task's repository is rebuilt from its record alone: the bundled project, minus its hidden
tests, with the bug patch applied, committed once with a fixed author and date so the
commit id is the same on every machine (and no history leaks the fix).
"""

from __future__ import annotations

import difflib
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

# Caches and tool output, never part of a project (and never committed).
IGNORED = {
    "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", ".hypothesis", ".git",
    ".etude-junit.xml",
}  # fmt: skip
FIXED_DATE = "2024-01-01T00:00:00+00:00"
COMMITTER = {
    "GIT_AUTHOR_NAME": "etude", "GIT_AUTHOR_EMAIL": "tasks@etude.invalid",
    "GIT_COMMITTER_NAME": "etude", "GIT_COMMITTER_EMAIL": "tasks@etude.invalid",
    "GIT_AUTHOR_DATE": FIXED_DATE, "GIT_COMMITTER_DATE": FIXED_DATE,
}  # fmt: skip


class PatchError(ValueError):
    """A patch that does not apply; the message carries git's explanation."""


def project_files(root: Path, exclude_dirs: Iterable[str] = ()) -> list[str]:
    """Relative paths of a project's files, sorted, without caches and `exclude_dirs`."""
    excluded = set(exclude_dirs)
    found = []
    for directory, subdirs, names in os.walk(root):
        relative = Path(directory).relative_to(root)
        subdirs[:] = sorted(
            d for d in subdirs if d not in IGNORED and str(relative / d) not in excluded
        )
        found += [str(relative / n) for n in names if n not in IGNORED and not n.endswith(".pyc")]
    return sorted(p.removeprefix("./") for p in found)


def content_hash(root: Path, files: list[str]) -> str:
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode() + b"\0" + (root / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def unified_diff(path: str, before: str | None, after: str | None) -> str:
    """A git-style diff of one file; None on a side means the file is absent there."""
    old = [] if before is None else before.splitlines(keepends=True)
    new = [] if after is None else after.splitlines(keepends=True)
    a = "/dev/null" if before is None else f"a/{path}"
    b = "/dev/null" if after is None else f"b/{path}"
    body = "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
        for line in difflib.unified_diff(old, new, a, b)
    )
    if not body:
        return ""
    mode = (
        "new file mode 100644\n"
        if before is None
        else "deleted file mode 100644\n"
        if after is None
        else ""
    )
    return f"diff --git a/{path} b/{path}\n{mode}{body}"


def apply_patch(workdir: Path, patch: str) -> None:
    """`git apply` the patch in `workdir` (a git repository or not).

    git refuses paths inside `.git`, above `workdir` and beyond a symlink, but it does
    create symlinks that point anywhere: a patch that leaves a symlink reaching out of
    `workdir` (new, or retargeted) is refused, so nothing that later writes or deletes
    under `workdir` can be sent to the host. The tree may then hold the patch's changes.
    """
    if not patch.strip():
        return
    escaping_before = _escaping_symlinks(workdir)
    # Without a ceiling, a `workdir` inside another repository (a cache under a checkout)
    # makes git apply the patch relative to that repository's root, silently skipping it.
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(workdir.resolve().parent)}
    done = subprocess.run(
        ["git", "apply", "--whitespace=nowarn", "-"],
        input=patch.encode(), cwd=workdir, capture_output=True, env=env,
    )  # fmt: skip
    if done.returncode != 0:
        raise PatchError(done.stderr.decode(errors="replace").strip() or "patch does not apply")
    if escaping := sorted(_escaping_symlinks(workdir) - escaping_before):
        path, target = escaping[0]
        raise PatchError(f"{path} would be a symlink to {target}, outside the repository")


def _escaping_symlinks(root: Path) -> set[tuple[str, str]]:
    """(path, target) of every symlink under `root` that resolves outside it."""
    top = Path(os.path.realpath(root))
    found = set()
    for directory, subdirs, names in os.walk(root):  # does not descend into symlinks
        for name in [*subdirs, *names]:
            link = Path(directory, name)
            if link.is_symlink() and not Path(os.path.realpath(link)).is_relative_to(top):
                found.add((str(link.relative_to(root)), os.readlink(link)))
        subdirs[:] = [d for d in subdirs if d != ".git" or directory != str(root)]
    return found


def copy_files(source: Path, target: Path, files: list[str]) -> None:
    for name in files:
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / name, destination)


def commit_snapshot(workdir: Path, message: str) -> str:
    """Make `workdir` a repository with one commit of its files; returns the commit id."""
    env = {**os.environ, **COMMITTER, "GIT_CEILING_DIRECTORIES": str(workdir.resolve().parent)}

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-c", "init.defaultBranch=main", "-c", "core.autocrlf=false", *args],
            cwd=workdir, env=env, capture_output=True, check=True,
        )  # fmt: skip
        return done.stdout.decode().strip()

    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "--no-gpg-sign", "-m", message)
    return git("rev-parse", "HEAD")
