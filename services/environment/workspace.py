"""Workspaces: a read-only base per task repository, and a copy-on-write layer per session.

Overlay mode stacks the session's writable `upper` directory over the base (and over
snapshots of the sessions it was forked from); creating a session is two `mkdir`s. Copy
mode, for hosts where overlay is unavailable, copies the base into a private tree.
Directories, for a root `R` and the service process `O` that made the session (its pid,
start time and boot, `etude.sandbox.reclaim.Owner`):

    R/bases/<key>/                    a task repository, copied once, never written
    R/sessions/O/<id>/upper, work     overlay: the session's changes, overlayfs' work dir
    R/sessions/O/<id>/snapshot        overlay: the parent's changes at fork time (a lower layer)
    R/sessions/O/<id>/tree            copy: the whole workspace

Grouping sessions by their process lets several services share a root, and lets the next
one to start remove exactly the sessions of a service that was killed.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

from etude.environment.config import SESSIONS_DIR
from etude.environment.types import RepositoryError
from etude.sandbox.reclaim import owned_dir, release_owned_dir, remove_tree
from etude.sandbox.types import Layout, Mode


class WorkspaceStore:
    def __init__(self, root_dir: Path, mode: Mode, cgroup_parents: Iterable[Path] = ()) -> None:
        """`cgroup_parents`: where the sessions' cgroups are made, noted in this process's
        directory for whoever reclaims it after a crash."""
        self.root = root_dir.resolve()
        self.mode = mode
        self.root.mkdir(parents=True, exist_ok=True)
        # Only the service's own account may enter: what a sandbox writes lands here owned
        # by that account (root, as services often run), set-user-id bits included, and a
        # local user who could reach such a file could run it as that account.
        self.root.chmod(0o700)
        self.bases = self.root / "bases"
        self.bases.mkdir(parents=True, exist_ok=True)
        self.sessions = owned_dir(self.root / SESSIONS_DIR, cgroup_parents)

    def prepare_base(self, repository: Path) -> Path:
        """Copy a repository once into a read-only base; later sessions reuse it."""
        source = repository.resolve()
        if not source.is_dir():
            raise RepositoryError(f"repository {repository} is not a directory")
        if source.is_relative_to(self.bases):
            return source
        key = hashlib.sha256(str(source).encode()).hexdigest()[:16]
        base = self.bases / key
        if not base.exists():
            # A staging directory of its own per call: sessions of one group often prepare
            # the same base at once, from several threads of one process.
            staging = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=self.bases))
            try:
                _copy_tree(source, staging)  # `cp -a src/.` also gives it the source's mode
                staging.rename(base)  # atomic: a concurrent preparer loses the race cleanly
            except OSError:
                if not base.is_dir():
                    raise
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        return base

    def create(self, session_id: str, base: Path) -> Layout:
        layout = Layout(self.mode, self.sessions / session_id, base, [base])
        layout.session_dir.mkdir(parents=True)  # its owner's directory goes at a clean stop
        if self.mode == "overlay":
            layout.upper.mkdir()
            layout.work.mkdir()
        else:
            _copy_tree(base, layout.tree)
        return layout

    def fork(self, parent: Layout, session_id: str, parent_view: Path) -> Layout:
        """A new session starting from `parent`'s current files (`parent_view`: its merged
        workspace as seen from the host)."""
        session_dir = self.sessions / session_id
        session_dir.mkdir(parents=True)
        if self.mode == "copy":
            layout = Layout("copy", session_dir, parent.base, [parent.base])
            _copy_tree(parent_view, layout.tree)
            return layout
        snapshot = session_dir / "snapshot"
        try:
            # The parent's upper layer, whiteouts and opaque markers included, becomes a
            # read-only layer of the child: a fork costs the size of the changes only.
            _copy_tree(parent.upper, snapshot)
            lowers = [*parent.lowers, snapshot]
        except (OSError, subprocess.CalledProcessError):
            # Whiteouts cannot be copied without privileges: take the whole merged view.
            shutil.rmtree(snapshot, ignore_errors=True)
            _copy_tree(parent_view, snapshot)
            lowers = [snapshot]
        layout = Layout("overlay", session_dir, parent.base, lowers)
        layout.upper.mkdir()
        layout.work.mkdir()
        return layout

    def remove(self, layout: Layout) -> None:
        remove_tree(layout.session_dir)  # also overlayfs' work dir, left unreadable to others

    def release(self) -> None:
        """At a clean stop, after every session was removed: this process's directory goes
        too (it stays if another manager of this process still has sessions there)."""
        release_owned_dir(self.sessions)


def _copy_tree(source: Path, target: Path) -> None:
    """`cp -a` keeps links, modes, times, xattrs and device nodes (overlay whiteouts), and
    shares blocks on filesystems that can (reflink)."""
    subprocess.run(
        ["cp", "-a", "--reflink=auto", f"{source}/.", str(target)],
        check=True,
        capture_output=True,
    )
