"""Keeping the search service's index of every session current.

A task's repository is indexed once, as a base workspace named after its base directory;
each session's index is a fork of it (the service keeps only the session's delta), a forked
session's index a fork of its parent's. Indexing runs in the background from creation on,
like the sandbox's start, and a query or an update waits for it. Edits by edit_file,
write_file and delete_file are sent as they happen; files changed by shell commands are
found, when the next query comes, by comparing the workspace with what was last sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from etude.common.logging import log_fields
from etude.environment.tools.base import SearchHit, ToolError
from etude.environment.tools.paths import resolve
from etude.environment.tools.tree_scan import WalkBudget, scan_tree
from etude.search.types import SKIPPED_DIRS, is_indexed_path

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 1 << 20  # larger files are not source; the service skips them too
WALK_SECONDS = 30.0
WALK_MAX_ENTRIES = 200_000


class SearchIndexBackend(Protocol):
    async def index_workspace(self, workspace_id: str, root: Path | None, parent: str) -> None: ...

    async def update_files(
        self, workspace_id: str, changed: list[tuple[str, str]], deleted: list[str]
    ) -> None: ...

    async def drop_workspace(self, workspace_id: str) -> None: ...

    async def query(
        self, workspace_id: str, query: str, k: int, target_directories: list[str]
    ) -> list[SearchHit]: ...


class SearchOutOfDateError(RuntimeError):
    """An update could not be delivered: results would describe files that changed since."""


@dataclass
class _SessionIndex:
    indexing: asyncio.Task[None]
    root: Callable[[], Awaitable[Path]]
    """The session's workspace on this host, once its sandbox is up."""
    base: Path
    shell_ran: bool = False
    sent: dict[str, str] = field(default_factory=dict)
    """Digest of each path's bytes as last sent; "" for a path sent as deleted."""
    broken: bool = False


class SearchSync:
    def __init__(self, backend: SearchIndexBackend) -> None:
        self.backend = backend
        self._bases: dict[Path, asyncio.Task[str]] = {}
        self._sessions: dict[str, _SessionIndex] = {}
        self._base_digests: dict[Path, dict[str, str]] = {}

    # -- lifecycle -----------------------------------------------------------------------

    def session_created(
        self, session_id: str, base: Path, root: Callable[[], Awaitable[Path]]
    ) -> None:
        async def index() -> None:
            try:
                await self.backend.index_workspace(session_id, None, await self._base(base))
            except Exception:
                # The service may have lost the base (a restart): index it again, once.
                self._bases.pop(base, None)
                await self.backend.index_workspace(session_id, None, await self._base(base))

        self._track(session_id, index(), root, base, {})

    def session_forked(
        self, parent_id: str, child_id: str, root: Callable[[], Awaitable[Path]]
    ) -> None:
        parent = self._sessions.get(parent_id)
        if parent is None:
            return

        async def index() -> None:
            await self._ready(parent_id)
            await self.backend.index_workspace(child_id, None, parent_id)

        self._track(child_id, index(), root, parent.base, dict(parent.sent))

    async def session_closed(self, session_id: str) -> None:
        session = self._sessions.pop(session_id, None)
        if session is None:
            return
        session.indexing.cancel()
        with contextlib.suppress(BaseException):
            await session.indexing
        await self._drop(session_id)
        if not any(s.base == session.base for s in self._sessions.values()):
            # The base's last session: free its index; the next session of this repository
            # rebuilds it from cached embeddings (chunking only).
            self._base_digests.pop(session.base, None)
            base_task = self._bases.pop(session.base, None)
            if base_task is not None and _succeeded(base_task):
                await self._drop(base_task.result())

    async def _drop(self, workspace_id: str) -> None:
        try:
            await self.backend.drop_workspace(workspace_id)
        except Exception as error:  # the service may be gone; its index dies with it
            log.info(
                "search drop failed", extra=log_fields(workspace=workspace_id, error=str(error))
            )

    def _track(self, session_id, coroutine, root, base: Path, sent: dict[str, str]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._sessions[session_id] = _SessionIndex(task, root, base, sent=sent)

    async def _base(self, base: Path) -> str:
        """The base workspace's id, indexing it on first use (again if that failed)."""
        task = self._bases.get(base)
        if task is None or (task.done() and not _succeeded(task)):
            workspace_id = "base-" + hashlib.sha256(str(base).encode()).hexdigest()[:16]

            async def index() -> str:
                await self.backend.index_workspace(workspace_id, base, "")
                return workspace_id

            task = self._bases[base] = asyncio.get_running_loop().create_task(index())
        return await asyncio.shield(task)

    async def _ready(self, session_id: str) -> _SessionIndex:
        session = self._sessions.get(session_id)
        if session is None:
            raise SearchOutOfDateError(f"session {session_id} has no search index")
        await asyncio.shield(session.indexing)
        if session.broken:
            raise SearchOutOfDateError(f"session {session_id}: an index update was lost")
        return session

    # -- changes and queries ---------------------------------------------------------------

    async def files_changed(self, session_id: str, changed: list[str], deleted: list[str]) -> None:
        """After a tool changed files: send their new contents. Never raises: a lost update
        marks the session's index out of date, and codebase_search then says so."""
        try:
            session = await self._ready(session_id)
            await self._send(session_id, session, await session.root(), changed, deleted)
        except Exception as error:
            if session_id in self._sessions:
                self._sessions[session_id].broken = True
            log.warning(
                "search index update failed",
                extra=log_fields(session=session_id, error=str(error)),
            )

    def shell_ran(self, session_id: str) -> None:
        if session_id in self._sessions:
            self._sessions[session_id].shell_ran = True

    async def query(
        self, workspace_id: str, query: str, k: int, target_directories: list[str]
    ) -> list[SearchHit]:
        session = await self._ready(workspace_id)
        if session.shell_ran:
            session.shell_ran = False
            await self._catch_up(workspace_id, session)
        return await self.backend.query(workspace_id, query, k, target_directories)

    async def _catch_up(self, session_id: str, session: _SessionIndex) -> None:
        """Send what shell commands changed: every file whose content differs from the base's
        (or from what was last sent), and base files that are gone."""
        root = await session.root()
        if session.base not in self._base_digests:
            self._base_digests[session.base] = await asyncio.to_thread(base_digests, session.base)
        base = self._base_digests[session.base]
        changed, deleted = await asyncio.to_thread(_differences, base, root, session.sent)
        if changed or deleted:
            await self._send(session_id, session, root, changed, deleted)

    async def _send(
        self, session_id: str, session: _SessionIndex, root: Path, changed, deleted
    ) -> None:
        contents = await asyncio.to_thread(_read_texts, root, changed)
        changed_texts = [(path, text) for path, (text, _) in contents.items()]
        await self.backend.update_files(session_id, changed_texts, list(deleted))
        session.sent.update({path: digest for path, (_, digest) in contents.items()})
        session.sent.update({path: "" for path in deleted})


def _succeeded(task: asyncio.Task) -> bool:
    return task.done() and not task.cancelled() and task.exception() is None


def _read_texts(root: Path, paths: list[str]) -> dict[str, tuple[str, str]]:
    """Each path's (text, digest of its bytes). A file that is unreadable, too large or not
    text is sent as empty, which the service indexes as nothing (its old chunks disappear)."""
    found = {}
    for path in paths:
        data = _read(root, path)
        try:
            text = data.decode("utf-8") if data is not None else ""
        except UnicodeDecodeError:
            text = ""
        found[path] = (text, _digest(data))
    return found


def _digest(data: bytes | None) -> str:
    return hashlib.sha256(data).hexdigest() if data is not None else "unreadable"


def _read(root: Path, path: str) -> bytes | None:
    """A workspace file's bytes, resolved as the tools resolve paths (no escaping links)."""
    try:
        target = resolve(root, path)
        if target.kind != "file":
            return None
        with target.open_read() as stream:
            data = stream.read(MAX_FILE_BYTES + 1)
    except (OSError, ToolError):
        return None
    return data if len(data) <= MAX_FILE_BYTES else None


def base_digests(base: Path) -> dict[str, str]:
    """Digest of every file of a base; bases never change, so this is read once per base."""
    return {path: _digest(_read(base, path)) for path in _walk(base)}


def _differences(
    base: dict[str, str], root: Path, sent: dict[str, str]
) -> tuple[list[str], list[str]]:
    current = _walk(root)
    changed = []
    for path in current:
        known = sent.get(path) or base.get(path)
        if _digest(_read(root, path)) != known:
            changed.append(path)
    gone = {p for p, d in sent.items() if d} | set(base)
    deleted = sorted(p for p in gone - set(current) if sent.get(p) != "")
    return changed, deleted


def _walk(root: Path) -> list[str]:
    """The workspace's files the search service would index (the same rule, so nothing is
    sent only to be dropped there). Walked through fds, never into a link, FIFOs and devices
    left out, within a budget (tools/tree_scan.py): the workspace is the policy's."""
    budget = WalkBudget(WALK_SECONDS, WALK_MAX_ENTRIES, 0, what="the search index update")
    scan = scan_tree(root, budget, lambda _path, name: name.startswith(".") or name in SKIPPED_DIRS)
    return [path for path in scan.nodes if is_indexed_path(path)]
