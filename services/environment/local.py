"""The environment's client interface in process: the core itself, no transport.

The service's servicer (server.py) and tests use it; other folders reach the environment
through `etude.environment.client.GrpcEnvironment`. Both meet the `EnvironmentClient`
protocol and raise the same errors (etude.environment.types).
"""

from __future__ import annotations

from pathlib import Path

from etude.common.toolcalls import ToolCall
from etude.environment.sessions import SessionManager
from etude.environment.tools import tool_catalog
from etude.environment.types import ExecutedCall, OpenedSession, ToolCatalog, WorkspaceDiff


class InProcessEnvironment:
    def __init__(self, manager: SessionManager) -> None:
        self.manager = manager

    async def create_session(
        self,
        task_id: str,
        repository_path: str,
        idle_ttl_seconds: float = 0,
        *,
        python_environment: str = "",
    ) -> OpenedSession:
        environment = Path(python_environment) if python_environment else None
        session = await self.manager.create(
            task_id, Path(repository_path), idle_ttl_seconds, python_environment=environment
        )
        return OpenedSession(session.id, session.layout.mode, self.manager.sandbox.backend)

    async def execute(
        self, session_id: str, calls: list[ToolCall], parallel: bool = True
    ) -> list[ExecutedCall]:
        return await self.manager.execute(session_id, calls, parallel)

    async def fork(self, session_id: str) -> str:
        return (await self.manager.fork(session_id)).id

    async def diff(self, session_id: str) -> WorkspaceDiff:
        return await self.manager.diff(session_id)

    async def close_session(self, session_id: str) -> None:
        await self.manager.close(session_id)

    async def list_tools(self) -> ToolCatalog:
        return tool_catalog()
