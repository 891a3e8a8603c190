"""Projects given by path (`etude tasks synth|materialize|verify|grade|hints --path`): a
directory or an sdist archive, named as its own metadata names it.

A task synthesized from such a source records where it came from (`metadata.origin`)
and the content hash of the project; given the same source again
(`RepositorySources.projects`), `source_of` finds it and `etude.tasks.materialize`
rebuilds the task's repository from it as it builds a bundled one (same files, same
commit), wherever the task is graded or rolled out.
"""

from __future__ import annotations

import configparser
import contextlib
import email.parser
import hashlib
import os
import re
import subprocess
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from etude.tasks.repo import IGNORED, git_env, safe_git
from etude.tasks.sources import SourceNotFoundError, unprotected
from etude.tasks.synth.suite import discover
from etude.tasks.synth.synthesize import Project
from etude.tasks.task import Task

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar", ".zip")
# Never part of a project: environments, build output, caches. Copying a virtualenv into
# every mutant's sandbox would cost more than the suite.
SKIPPED_DIRS = frozenset({
    ".venv", "venv", ".tox", ".nox", "build", "dist", "node_modules", ".eggs", "htmlcov",
    "site-packages", *IGNORED,
})  # fmt: skip


class SourceError(ValueError):
    """A path that is not a usable project: the message says why, for the user."""


@contextlib.contextmanager
def opened(path: Path) -> Iterator[Project]:
    """The project at `path` (a directory, or an archive unpacked for as long as the
    context lasts)."""
    if not path.exists():
        raise SourceError(f"{path}: no such file or directory")
    if path.is_dir():
        yield _project(path.resolve(), {"kind": "directory", "path": str(path.resolve())})
        return
    if not path.name.endswith(ARCHIVE_SUFFIXES):
        raise SourceError(f"{path}: not a directory or an sdist ({', '.join(ARCHIVE_SUFFIXES)})")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with tempfile.TemporaryDirectory(prefix="etude-sdist-") as scratch:
        _unpack(path, Path(scratch))
        entries = [p for p in Path(scratch).iterdir() if not p.name.startswith(".")]
        root = entries[0] if len(entries) == 1 and entries[0].is_dir() else Path(scratch)
        yield _project(root, {"kind": "sdist", "file": path.name, "sha256": digest})


def _unpack(archive: Path, target: Path) -> None:
    try:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as opened_zip:
                opened_zip.extractall(target)  # names with .. or a leading / are made safe
        else:
            with tarfile.open(archive) as opened_tar:
                opened_tar.extractall(target, filter="data")  # nothing outside `target`
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError) as error:
        raise SourceError(f"{archive}: cannot unpack: {error}") from error


def _project(root: Path, origin: dict[str, str]) -> Project:
    files = _files(root)
    if not files:
        raise SourceError(f"{root}: no files")
    try:
        suite = discover(root, files)
    except ValueError as error:
        raise SourceError(str(error)) from error
    return Project(project_name(root), root, files, suite, origin)


def _files(root: Path) -> list[str]:
    """The project's files: what git tracks or would track in a repository (untracked
    files count, ignored ones do not), else everything outside environments and caches;
    never a symlink that leads out of the project (its target's content would be copied
    into every task and sandbox made from it)."""
    if (root / ".git").exists():
        # The project's own git configuration is the project's: nothing it names may run
        # (`core.fsmonitor` runs a program on `ls-files`), nor any of the host's.
        done = subprocess.run(
            safe_git("ls-files", "-z", "--cached", "--others", "--exclude-standard"),
            cwd=root, capture_output=True, env=git_env(root),
        )  # fmt: skip
        if done.returncode == 0:
            names = {n for n in done.stdout.decode(errors="replace").split("\0") if n}
            return sorted(
                n for n in names if (root / n).is_file() and not _skipped(n) and _within(root, n)
            )
    found = []
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not _skipped(d))
        relative = Path(directory).relative_to(root)
        found += [str(relative / n) for n in names if not _skipped(n) and not n.endswith(".pyc")]
    return sorted(p.removeprefix("./") for p in found if _within(root, p.removeprefix("./")))


def _within(root: Path, name: str) -> bool:
    """Whether `name` (relative) stays inside `root` with its symlinks resolved."""
    return Path(os.path.realpath(root / name)).is_relative_to(os.path.realpath(root))


def _skipped(path: str) -> bool:
    return any(part in SKIPPED_DIRS or part.endswith(".egg-info") for part in Path(path).parts)


def project_name(root: Path) -> str:
    """The name the project publishes under: PKG-INFO's, pyproject's `[project]`,
    setup.cfg's `[metadata]`, setup.py's `name=`; else the folder's, less a version."""
    if (root / "PKG-INFO").is_file():
        name = email.parser.Parser().parsestr((root / "PKG-INFO").read_text(errors="replace"))
        if name.get("Name"):
            return str(name["Name"]).strip()
    if (root / "pyproject.toml").is_file():
        with contextlib.suppress(tomllib.TOMLDecodeError):
            project = tomllib.loads((root / "pyproject.toml").read_text(errors="replace"))
            if isinstance(name := project.get("project", {}).get("name"), str):
                return name
    if (root / "setup.cfg").is_file():
        parser = configparser.ConfigParser(interpolation=None)
        with contextlib.suppress(configparser.Error):
            parser.read_string((root / "setup.cfg").read_text(errors="replace"))
            if parser.get("metadata", "name", fallback=""):
                return parser.get("metadata", "name")
    if (root / "setup.py").is_file():
        found = re.search(r"\bname\s*=\s*['\"]([\w.-]+)['\"]", (root / "setup.py").read_text(
            errors="replace"))  # fmt: skip
        if found:
            return found[1]
    return re.sub(r"-\d[\w.]*$", "", root.name)


@contextlib.contextmanager
def source_of(task: Task, paths: Iterable[Path]) -> Iterator[Project]:
    """The project `task` was synthesized from, among the sources at `paths` (opened one
    by one, each closed again unless it is the one): same name, same content hash.
    SourceError when none is, saying what was given instead."""
    wanted, expected = task.metadata.get("project"), task.metadata.get("project_hash")
    differing = []
    for path in paths:
        try:
            unprotected(str(wanted), path)
        except SourceNotFoundError as error:
            raise SourceError(str(error)) from None
        with opened(path) as project:
            if project.name != wanted:
                continue
            if project.hash == expected:
                yield project
                return
            differing.append(f"{path} (hash {project.hash})")
    origin = task.metadata.get("origin") or {}
    made_from = origin.get("file") or origin.get("path") or "its source"
    if differing:
        raise SourceError(
            f"the given {wanted} differs from the one the task was made from ({made_from}, "
            f"hash {expected}): {', '.join(differing)}"
        )
    raise SourceError(
        f"synthesized from {made_from}, and no project source of {wanted} is given "
        "(etude tasks: --path)"
    )
