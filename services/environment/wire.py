"""Conversions between the environment's core types and its protobuf messages, with the
bounds a request must respect (`InvalidFieldError` otherwise). Arguments' values are the
policy's own text and stay unchecked: a tool turns a bad one into an observation."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from etude.api.v1 import common_pb2, environment_pb2
from etude.common.request_checks import (
    InvalidFieldError,
    check_count,
    check_finite,
    check_path,
    check_text,
)
from etude.common.toolcalls import ToolCall
from etude.environment.types import ExecutedCall, ToolCatalog, ToolDescription, ToolOutput

MAX_CALLS = 256
"""Tool calls in one Execute."""
MAX_NAME_BYTES = 256
"""A tool's name, and an argument's name."""
MAX_ARGUMENTS = 64


def session_id_from_proto(message: common_pb2.SessionId) -> str:
    return check_text(message.value, "session_id", required=True)


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """A CreateSession as asked: its paths not yet confined (etude.environment.repositories)."""

    task_id: str
    repository_path: str
    idle_ttl: float
    """0: the configured default."""
    python_environment: str
    """Empty: none."""


def create_from_proto(
    request: environment_pb2.CreateSessionRequest, max_idle_ttl: float
) -> SessionRequest:
    task_id = check_text(request.task_id.value, "task_id")
    path = check_path(request.repository_path, "repository_path", required=True)
    ttl = check_finite(request.idle_ttl_seconds, "idle_ttl_seconds", minimum=0)
    if ttl > max_idle_ttl:
        raise InvalidFieldError(f"idle_ttl_seconds must be ≤ {max_idle_ttl}, not {ttl}")
    environment = check_path(request.python_environment, "python_environment")
    return SessionRequest(task_id, path, ttl, environment)


def calls_from_proto(messages) -> list[ToolCall]:
    check_count(messages, "calls", MAX_CALLS)
    return [call_from_proto(message) for message in messages]


def call_to_proto(call: ToolCall) -> common_pb2.ToolCall:
    return common_pb2.ToolCall(id=call.id, name=call.name, arguments=call.arguments)


def call_from_proto(message: common_pb2.ToolCall) -> ToolCall:
    check_text(message.id, "call id")
    check_text(message.name, "call name", max_bytes=MAX_NAME_BYTES)
    check_count(message.arguments, f"arguments of {message.name}", MAX_ARGUMENTS)
    for key in message.arguments:
        check_text(key, f"argument name of {message.name}", max_bytes=MAX_NAME_BYTES)
    return ToolCall(name=message.name, arguments=dict(message.arguments), id=message.id)


# A ToolOutput's fields travel under the same names in common_pb2.ToolResult; one the
# message lacks fails the first conversion.
_OUTPUT_FIELDS = tuple(f.name for f in dataclasses.fields(ToolOutput))


def result_to_proto(executed: ExecutedCall) -> common_pb2.ToolResult:
    output = {name: getattr(executed.result, name) for name in _OUTPUT_FIELDS}
    output["error_reason"] = output["error_reason"] or ""  # a proto3 string has no None
    return common_pb2.ToolResult(
        call_id=executed.call_id, name=executed.name, duration_seconds=executed.seconds, **output
    )


def result_from_proto(message: common_pb2.ToolResult) -> ExecutedCall:
    output = {name: getattr(message, name) for name in _OUTPUT_FIELDS}
    output["error_reason"] = output["error_reason"] or None
    return ExecutedCall(
        message.call_id, message.name, ToolOutput(**output), message.duration_seconds
    )


def catalog_to_proto(catalog: ToolCatalog) -> environment_pb2.ListToolsResponse:
    tools = [
        environment_pb2.ToolDescription(
            name=t.name, description=t.description, required=t.required, optional=t.optional
        )
        for t in catalog.tools
    ]
    return environment_pb2.ListToolsResponse(tools=tools, path_rules=catalog.path_rules)


def catalog_from_proto(message: environment_pb2.ListToolsResponse) -> ToolCatalog:
    tools = tuple(
        ToolDescription(t.name, t.description, tuple(t.required), tuple(t.optional))
        for t in message.tools
    )
    return ToolCatalog(tools, message.path_rules)
