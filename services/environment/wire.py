"""Conversions between the environment's core types and its protobuf messages."""

from __future__ import annotations

from etude.api.v1 import common_pb2
from etude.common.toolcalls import ToolCall
from etude.environment.batch import ExecutedCall


def call_to_proto(call: ToolCall) -> common_pb2.ToolCall:
    return common_pb2.ToolCall(id=call.id, name=call.name, arguments=call.arguments)


def call_from_proto(message: common_pb2.ToolCall) -> ToolCall:
    return ToolCall(name=message.name, arguments=dict(message.arguments), id=message.id)


def result_to_proto(result: ExecutedCall) -> common_pb2.ToolResult:
    return common_pb2.ToolResult(
        call_id=result.call_id,
        name=result.name,
        output=result.output,
        exit_code=result.exit_code,
        truncated=result.truncated,
        truncated_chars=result.truncated_chars,
        duration_seconds=result.duration_seconds,
        error_reason=result.error_reason or "",
        ends_episode=result.ends_episode,
    )


def result_from_proto(message: common_pb2.ToolResult) -> ExecutedCall:
    return ExecutedCall(
        call_id=message.call_id,
        name=message.name,
        output=message.output,
        exit_code=message.exit_code,
        truncated=message.truncated,
        truncated_chars=message.truncated_chars,
        duration_seconds=message.duration_seconds,
        error_reason=message.error_reason or None,
        ends_episode=message.ends_episode,
    )
