"""A project's own git repository as upstream ones are: the fix of a task's bug is there,
reachable from a branch, a tag, the reflog, a stash, and as a blob no commit holds. What a
task's materialized repository must hide."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from etude.tasks.task import Task

FIX_MARKER = "FIXED-BY-UPSTREAM"
STRAY_MARKER = "STRAY-BLOB-WITH-THE-ANSWER"
IDENTITY = {
    "GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@example.invalid",
    "GIT_COMMITTER_NAME": "dev", "GIT_COMMITTER_EMAIL": "dev@example.invalid",
}  # fmt: skip


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **IDENTITY, "GIT_CONFIG_GLOBAL": os.devnull}
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, errors="replace"
    )
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {done.stderr}")
    return done


@dataclass
class Upstream:
    """A project's own repository, everything an upstream one leaks included."""

    root: Path
    base: str
    fix_commit: str
    fix_blob: str
    stray_blob: str

    def task(self, instance: str = "acme__widget-1", **changes) -> Task:
        fields = dict(
            id=instance, repo="acme/widget", base_commit=self.base,
            instruction="mean() of an empty list raises", test_patch="",
            fail_to_pass=(), pass_to_pass=(),
        )  # fmt: skip
        return Task(**{**fields, **changes})


def make_upstream(root: Path) -> Upstream:
    """acme/widget at `root`: an old commit, the base (the bug), then the fix on main, on a
    branch and a tag, in the reflog and a stash, and a blob of the answer no commit holds."""
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / "widget.py").write_text("def mean(xs):\n    return sum(xs) / len(xs)\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "first version")
    (root / "README").write_text("widget\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "readme")
    base = git(root, "rev-parse", "HEAD").stdout.strip()
    fixed = f"def mean(xs):\n    # {FIX_MARKER}\n    return sum(xs) / len(xs) if xs else 0.0\n"
    (root / "widget.py").write_text(fixed)
    (root / "test_widget.py").write_text("def test_empty():\n    assert mean([]) == 0.0\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", f"fix mean of nothing ({FIX_MARKER})")
    fix_commit = git(root, "rev-parse", "HEAD").stdout.strip()
    fix_blob = git(root, "rev-parse", "HEAD:widget.py").stdout.strip()
    git(root, "branch", "fix-branch")
    git(root, "tag", "-a", "v1.1", "-m", f"release with {FIX_MARKER}")
    # The working checkout sits back at the base, with the fix stashed and a loose blob
    # of it written: both only reachable by looking for them.
    git(root, "reset", "-q", "--hard", base)
    (root / "widget.py").write_text(fixed)
    git(root, "stash", "-q")
    stray = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"], cwd=root, input=STRAY_MARKER,
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    return Upstream(root, base, fix_commit, fix_blob, stray)
