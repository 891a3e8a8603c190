"""gRPC servicer of the environment: decode, call the core, encode; errors → status codes.

The core is anything with the environment's client interface (`EnvironmentClient`): real
sessions (`InProcessEnvironment` over a `SessionManager`) or the `sim` environment
(etude.environment.sim). Requests are checked against the same bounds whichever serves them."""

from __future__ import annotations

import asyncio
import contextlib

import grpc

from etude.api.v1 import common_pb2, environment_pb2, environment_pb2_grpc
from etude.common.grpc_server import Registration
from etude.common.request_checks import InvalidFieldError
from etude.environment.client import EnvironmentClient
from etude.environment.config import EnvironmentConfig
from etude.environment.local import InProcessEnvironment
from etude.environment.repositories import (
    RepositoryNotAllowedError,
    allowed_python_environment,
    allowed_repository,
)
from etude.environment.sessions import SessionManager
from etude.environment.types import (
    RepositoryError,
    SessionLimitError,
    SessionNotFoundError,
    WalkLimitError,
)
from etude.environment.wire import (
    calls_from_proto,
    catalog_to_proto,
    create_from_proto,
    result_to_proto,
    session_id_from_proto,
)
from etude.sandbox.sandbox import SandboxStartError

SERVICE_NAME = environment_pb2.DESCRIPTOR.services_by_name["EnvironmentService"].full_name

_STATUS = {
    SandboxStartError: grpc.StatusCode.INTERNAL,
    SessionNotFoundError: grpc.StatusCode.NOT_FOUND,
    SessionLimitError: grpc.StatusCode.RESOURCE_EXHAUSTED,
    RepositoryError: grpc.StatusCode.INVALID_ARGUMENT,
    WalkLimitError: grpc.StatusCode.RESOURCE_EXHAUSTED,
    InvalidFieldError: grpc.StatusCode.INVALID_ARGUMENT,
    RepositoryNotAllowedError: grpc.StatusCode.PERMISSION_DENIED,
}


@contextlib.asynccontextmanager
async def _mapped_errors(context: grpc.aio.ServicerContext):
    try:
        yield
    except tuple(_STATUS) as error:
        await context.abort(_STATUS[type(error)], str(error))


class EnvironmentServicer(environment_pb2_grpc.EnvironmentServiceServicer):
    def __init__(self, environment: EnvironmentClient, config: EnvironmentConfig) -> None:
        """`config`: the bounds a request is checked against (idle TTL, repository roots)."""
        self.environment = environment
        self.config = config

    async def CreateSession(self, request, context):
        async with _mapped_errors(context):
            asked = create_from_proto(request, self.config.max_idle_ttl_seconds)
            repository = allowed_repository(asked.repository_path, self.config)
            environment = ""
            if asked.python_environment:
                environment = str(allowed_python_environment(asked.python_environment, self.config))
            opened = await self.environment.create_session(
                asked.task_id, str(repository), asked.idle_ttl, python_environment=environment
            )
        return environment_pb2.CreateSessionResponse(
            session_id=common_pb2.SessionId(value=opened.session_id),
            workspace_mode=opened.workspace_mode,
            sandbox_backend=opened.sandbox_backend,
        )

    async def Execute(self, request, context):
        async with _mapped_errors(context):
            results = await self.environment.execute(
                session_id_from_proto(request.session_id),
                calls_from_proto(request.calls),
                request.parallel,
            )
        return environment_pb2.ExecuteResponse(results=[result_to_proto(r) for r in results])

    async def Fork(self, request, context):
        async with _mapped_errors(context):
            forked = await self.environment.fork(session_id_from_proto(request.session_id))
        return environment_pb2.ForkResponse(session_id=common_pb2.SessionId(value=forked))

    async def Diff(self, request, context):
        async with _mapped_errors(context):
            diff = await self.environment.diff(session_id_from_proto(request.session_id))
        return environment_pb2.DiffResponse(
            unified_diff=diff.unified_diff, changed_paths=diff.changed_paths
        )

    async def CloseSession(self, request, context):
        async with _mapped_errors(context):
            await self.environment.close_session(session_id_from_proto(request.session_id))
        return environment_pb2.CloseSessionResponse()

    async def ListTools(self, request, context):
        return catalog_to_proto(await self.environment.list_tools())


def registration(manager: SessionManager) -> Registration:
    """The service on real sessions (`start_expiry` closes the idle ones)."""
    return registration_of(InProcessEnvironment(manager), manager.config)


def registration_of(environment: EnvironmentClient, config: EnvironmentConfig) -> Registration:
    """The service on any core with the client interface (the `sim` environment, too)."""
    return Registration(
        EnvironmentServicer(environment, config),
        environment_pb2_grpc.add_EnvironmentServiceServicer_to_server,
        SERVICE_NAME,
    )


def start_expiry(manager: SessionManager) -> asyncio.Task[None]:
    interval = min(30.0, manager.config.idle_ttl_seconds / 4)
    return asyncio.get_running_loop().create_task(manager.expire_forever(interval))
