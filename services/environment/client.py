"""One client interface to the environment, and its form over gRPC.

The rollout worker, the trainer's run and the reward service use `GrpcEnvironment`; tests
use the in-process form, `etude.environment.local.InProcessEnvironment` (the core, no
transport). Both raise the same errors (etude.environment.types). Importing this module
loads neither the sessions nor the tools.
"""

from __future__ import annotations

from typing import Protocol

import grpc
from grpc import aio

from etude.api.v1 import common_pb2, environment_pb2, environment_pb2_grpc
from etude.common.grpc_client import open_channel
from etude.common.settings import ClientSettings
from etude.common.toolcalls import ToolCall
from etude.environment.types import (
    ExecutedCall,
    OpenedSession,
    RepositoryError,
    SessionLimitError,
    SessionNotFoundError,
    ToolCatalog,
    WorkspaceDiff,
)
from etude.environment.wire import call_to_proto, catalog_from_proto, result_from_proto


class EnvironmentClient(Protocol):
    async def create_session(
        self,
        task_id: str,
        repository_path: str,
        idle_ttl_seconds: float = 0,
        *,
        python_environment: str = "",
    ) -> OpenedSession:
        """A session on the repository; its commands run with `python_environment` (the
        root of a task's Python environment, etude.tasks.pyenv) where one is given."""
        ...

    async def execute(
        self, session_id: str, calls: list[ToolCall], parallel: bool = True
    ) -> list[ExecutedCall]: ...

    async def fork(self, session_id: str) -> str: ...

    async def diff(self, session_id: str) -> WorkspaceDiff: ...

    async def close_session(self, session_id: str) -> None: ...

    async def list_tools(self) -> ToolCatalog:
        """The tools as the policy is told about them (the rollout's prompt is rendered
        from this, not from a local copy of the tools)."""
        ...


_ERRORS = {
    grpc.StatusCode.NOT_FOUND: SessionNotFoundError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: SessionLimitError,
    grpc.StatusCode.INVALID_ARGUMENT: RepositoryError,
}


# A batch of tool calls may run a command for up to 600 s, and a diff walks the workspace.
LONG_METHODS = ("etude.api.v1.EnvironmentService/Execute", "etude.api.v1.EnvironmentService/Diff")


class GrpcEnvironment:
    def __init__(self, target: str, settings: ClientSettings) -> None:
        self.channel: aio.Channel = open_channel(target, settings, long_methods=LONG_METHODS)
        self.stub = environment_pb2_grpc.EnvironmentServiceStub(self.channel)

    async def _call(self, method, request):
        try:
            return await method(request)
        except aio.AioRpcError as error:
            mapped = _ERRORS.get(error.code())
            if mapped is not None:
                raise mapped(error.details()) from error
            raise

    async def create_session(
        self,
        task_id: str,
        repository_path: str,
        idle_ttl_seconds: float = 0,
        *,
        python_environment: str = "",
    ) -> OpenedSession:
        reply = await self._call(
            self.stub.CreateSession,
            environment_pb2.CreateSessionRequest(
                task_id=common_pb2.TaskId(value=task_id),
                repository_path=repository_path,
                idle_ttl_seconds=idle_ttl_seconds,
                python_environment=python_environment,
            ),
        )
        return OpenedSession(reply.session_id.value, reply.workspace_mode, reply.sandbox_backend)

    async def execute(
        self, session_id: str, calls: list[ToolCall], parallel: bool = True
    ) -> list[ExecutedCall]:
        reply = await self._call(
            self.stub.Execute,
            environment_pb2.ExecuteRequest(
                session_id=common_pb2.SessionId(value=session_id),
                calls=[call_to_proto(c) for c in calls],
                parallel=parallel,
            ),
        )
        return [result_from_proto(r) for r in reply.results]

    async def fork(self, session_id: str) -> str:
        reply = await self._call(
            self.stub.Fork,
            environment_pb2.ForkRequest(session_id=common_pb2.SessionId(value=session_id)),
        )
        return reply.session_id.value

    async def diff(self, session_id: str) -> WorkspaceDiff:
        reply = await self._call(
            self.stub.Diff,
            environment_pb2.DiffRequest(session_id=common_pb2.SessionId(value=session_id)),
        )
        return WorkspaceDiff(reply.unified_diff, list(reply.changed_paths))

    async def close_session(self, session_id: str) -> None:
        await self._call(
            self.stub.CloseSession,
            environment_pb2.CloseSessionRequest(session_id=common_pb2.SessionId(value=session_id)),
        )

    async def list_tools(self) -> ToolCatalog:
        reply = await self._call(self.stub.ListTools, environment_pb2.ListToolsRequest())
        return catalog_from_proto(reply)

    async def close(self) -> None:
        await self.channel.close()
