"""Server interceptor that records every call's status code and duration, and turns a
request that does not decode into INVALID_ARGUMENT for every method."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc
from grpc import aio

from etude.common.metrics import GRPC_HANDLED, GRPC_HANDLING_SECONDS, GRPC_IN_FLIGHT


def split_method(full_method: str) -> tuple[str, str]:
    """`/etude.api.v1.RewardService/Score` → (`etude.api.v1.RewardService`, `Score`)."""
    service, _, method = full_method.lstrip("/").rpartition("/")
    return service or "unknown", method or "unknown"


def _final_code(context: aio.ServicerContext, error: BaseException | None) -> grpc.StatusCode:
    if isinstance(error, asyncio.CancelledError):
        # The runtime cancels the handler when the client's deadline passes or the client
        # goes away; only the remaining time tells the two apart.
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            return grpc.StatusCode.DEADLINE_EXCEEDED
        return grpc.StatusCode.CANCELLED
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code
    if error is not None and not isinstance(error, aio.AbortError):
        return grpc.StatusCode.UNKNOWN  # what gRPC sends for an unhandled exception
    return grpc.StatusCode.OK


class _Undecodable:
    """Stands in for a request whose bytes are not the method's message (truncated,
    random, a string field that is not UTF-8), so the handler wrapper can refuse it."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def safe_deserializer(deserializer: Callable[[bytes], Any] | None):
    """`deserializer`, returning `_Undecodable` instead of raising: gRPC would answer a
    raising deserializer with UNKNOWN, which tells the caller nothing."""
    if deserializer is None:
        return None

    def decode(data: bytes):
        try:
            return deserializer(data)
        except Exception as error:  # protobuf's DecodeError, bad UTF-8 in a string field
            return _Undecodable(str(error) or type(error).__name__)

    return decode


async def _decoded(request: Any, context: aio.ServicerContext) -> Any:
    if isinstance(request, _Undecodable):
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT, f"the request does not decode: {request.reason}"
        )
    return request


async def _decoded_stream(requests: AsyncIterator[Any], context: aio.ServicerContext):
    async for request in requests:
        yield await _decoded(request, context)


@contextmanager
def _observed(service: str, method: str, context: aio.ServicerContext) -> Iterator[None]:
    """Counts and times one call, whichever way it ends."""
    GRPC_IN_FLIGHT.labels(service).inc()
    start, error = time.perf_counter(), None
    try:
        yield
    except BaseException as exc:
        error = exc
        raise
    finally:
        GRPC_IN_FLIGHT.labels(service).dec()
        GRPC_HANDLING_SECONDS.labels(service, method).observe(time.perf_counter() - start)
        GRPC_HANDLED.labels(service, method, _final_code(context, error).name).inc()


def handler_factory(handler: grpc.RpcMethodHandler):
    """The `grpc.*_rpc_method_handler` that builds a handler of `handler`'s shape."""
    return {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(handler.request_streaming, handler.response_streaming)]


class MetricsInterceptor(aio.ServerInterceptor):
    """Counts calls by (service, method, code) and times them, streaming calls included."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None  # unknown method: gRPC answers UNIMPLEMENTED itself
        service, method = split_method(handler_call_details.method)
        behavior = (
            handler.unary_unary
            or handler.unary_stream
            or handler.stream_unary
            or handler.stream_stream
        )

        # A streaming handler either yields (async generator) or awaits `context.write`;
        # the wrapper must keep the same shape, as gRPC forbids mixing the two.
        async def decoded(request_or_iterator, context):
            if handler.request_streaming:
                return _decoded_stream(request_or_iterator, context)
            return await _decoded(request_or_iterator, context)

        if inspect.isasyncgenfunction(behavior):

            async def wrapped(request_or_iterator, context):
                with _observed(service, method, context):
                    request_or_iterator = await decoded(request_or_iterator, context)
                    async for response in behavior(request_or_iterator, context):
                        yield response

        else:

            async def wrapped(request_or_iterator, context):
                with _observed(service, method, context):
                    request_or_iterator = await decoded(request_or_iterator, context)
                    return await behavior(request_or_iterator, context)

        return handler_factory(handler)(
            wrapped,
            request_deserializer=safe_deserializer(handler.request_deserializer),
            response_serializer=handler.response_serializer,
        )
