"""Projects on disk, unified diffs between versions of them, and single-commit repositories.

A task's repository is rebuilt from its record alone: the bundled project, minus its hidden
tests, with the bug patch applied, committed once with a fixed author and date so the
commit id is the same on every machine (and no history leaks the fix). A SWE-bench-style
task's repository is its base commit exported from a source repository with nothing else
(`export_commit`): the agent runs git on it, and a branch, tag, reflog or stray object of
the source would hand it the fix.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
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
        safe_git("apply", "--whitespace=nowarn", "-"),
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
    git = _git(workdir, COMMITTER)
    git("init", "-q", "--template=", "-b", "main")
    git("add", "-A")
    git("commit", "-q", "--no-gpg-sign", "-m", message)
    for key, value in AGENT_IDENTITY.items():
        git("config", key, value)
    seal(workdir)
    return git("rev-parse", "HEAD")


class GitError(RuntimeError):
    """A git command failed; the message carries what git said."""


class CommitNotFoundError(LookupError):
    """The source repository does not hold the commit asked for."""


# Settings a repository's own `.git/config` could use to make the git commands here run a
# program (a hook, an fsmonitor, an alternates command, an `ext::` transport): overridden on
# every one, since a task's source repository is data from the internet. `-c` wins over the
# repository's configuration and reaches the git processes the command starts (the
# `upload-pack` of a fetch from a path runs in the source repository). Filters and diff
# drivers need no override: only the repositories made here are checked out, and their
# configuration is etude's.
SAFE_GIT_CONFIG = (
    "core.hooksPath=/dev/null", "core.fsmonitor=false", "core.alternateRefsCommand=true",
    "protocol.ext.allow=never",
)  # fmt: skip


def safe_git(*args: str) -> list[str]:
    """The argv of `git args…` with `SAFE_GIT_CONFIG`."""
    return ["git", *(word for setting in SAFE_GIT_CONFIG for word in ("-c", setting)), *args]


# A full object id (SHA-1 or SHA-256): anything else handed to git as a revision could
# be an abbreviation that resolves differently, or an option (`--upload-pack=…`).
OBJECT_ID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
# So that `git commit` and `git stash` work for the agent (HOME is empty in a sandbox).
AGENT_IDENTITY = {"user.name": "etude agent", "user.email": "agent@etude.invalid"}


def export_commit(source: Path, commit: str, workdir: Path) -> str:
    """Make the empty `workdir` a repository of `commit` of the repository at `source` (a
    working checkout or a bare one) and of nothing else; returns the commit id.

    The commit keeps its id and is checked out on branch `main`; its parents are cut off
    (a shallow repository of depth 1), so every object there is one the commit's tree
    holds. Nothing made after the commit (the fix, its tests) has a trace: no remote, no
    other branch or tag, no reflog, no FETCH_HEAD, no alternates pointing at `source`.
    """
    if not OBJECT_ID.fullmatch(commit):
        raise CommitNotFoundError(f"{commit!r} is not a full commit id")
    if not source.is_dir():
        raise CommitNotFoundError(f"no repository at {source}")
    probe = subprocess.run(
        safe_git("cat-file", "-e", f"{commit}^{{commit}}"),
        cwd=source, env=git_env(source), capture_output=True,
    )  # fmt: skip
    if probe.returncode != 0:
        raise CommitNotFoundError(f"commit {commit} is not in {source}")
    git = _git(workdir)
    git("init", "-q", "--template=", "-b", "main")
    # By path, not as a remote: the repository keeps no address of its source. Only the
    # commit is asked for, one deep, without tags: the pack holds its tree and no more.
    git("fetch", "-q", "--no-tags", "--no-write-fetch-head", "--depth", "1", "--",
        str(source.resolve()), commit)  # fmt: skip
    git("reset", "-q", "--hard", commit)  # the unborn `main` becomes the commit
    for key, value in AGENT_IDENTITY.items():
        git("config", key, value)
    seal(workdir)
    return git("rev-parse", "HEAD")


class LeakyRepositoryError(RuntimeError):
    """A task repository holds something beyond its one branch (a bug here, or a git that
    behaves differently): refused rather than handed to an agent."""


def seal(workdir: Path) -> None:
    """Forget what the repository remembers besides branch `main`, then check that nothing
    else is left: no other ref, no reflog, no alternates, no object `main` does not reach."""
    git = _git(workdir)
    dot_git = workdir / ".git"
    for name in ("FETCH_HEAD", "ORIG_HEAD", "MERGE_HEAD", "logs"):
        shutil.rmtree(dot_git / name, ignore_errors=True)
        (dot_git / name).unlink(missing_ok=True)
    refs = git("for-each-ref", "--format=%(refname)").split()
    if refs != ["refs/heads/main"]:
        raise LeakyRepositoryError(f"{workdir}: refs besides main: {refs}")
    if (dot_git / "objects" / "info" / "alternates").exists():
        raise LeakyRepositoryError(f"{workdir}: borrows objects from another repository")
    if git("remote"):
        raise LeakyRepositoryError(f"{workdir}: has a remote")
    present = set(git("cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split())
    reachable = {line.split()[0] for line in git("rev-list", "--objects", "main").splitlines()}
    if present - reachable:
        raise LeakyRepositoryError(
            f"{workdir}: {len(present - reachable)} objects main does not reach"
        )


def git_env(workdir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """git's environment with nothing of the host's: no GIT_* variable (GIT_DIR would
    redirect every command), no user or system configuration (a template directory, hooks,
    `fetch.*` defaults), and no discovery above `workdir`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return {
        **env, **(extra or {}),
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CEILING_DIRECTORIES": str(workdir.resolve().parent), "GIT_TERMINAL_PROMPT": "0",
    }  # fmt: skip


def _git(workdir: Path, extra: dict[str, str] | None = None):
    env = git_env(workdir, extra)

    def git(*args: str) -> str:
        done = subprocess.run(
            safe_git("-c", "core.autocrlf=false", *args),
            cwd=workdir, env=env, capture_output=True,
        )  # fmt: skip
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip()
            raise GitError(f"git {' '.join(args[:2])} in {workdir}: {said}")
        return done.stdout.decode().strip()

    return git
