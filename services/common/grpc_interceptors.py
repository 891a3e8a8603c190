"""Server interceptor that records every call's status code and duration."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

import grpc
from grpc import aio

from etude.common.metrics import GRPC_HANDLED, GRPC_HANDLING_SECONDS, GRPC_IN_FLIGHT


def split_method(full_method: str) -> tuple[str, str]:
    """`/etude.api.v1.TrainerService/Status` → (`etude.api.v1.TrainerService`, `Status`)."""
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

        def observed(context: aio.ServicerContext, error: BaseException | None, start: float):
            GRPC_IN_FLIGHT.labels(service).dec()
            GRPC_HANDLING_SECONDS.labels(service, method).observe(time.perf_counter() - start)
            GRPC_HANDLED.labels(service, method, _final_code(context, error).name).inc()

        behavior = (
            handler.unary_unary
            or handler.unary_stream
            or handler.stream_unary
            or handler.stream_stream
        )
        # A streaming handler either yields (async generator) or awaits `context.write`;
        # the wrapper must keep the same shape, as gRPC forbids mixing the two.
        if inspect.isasyncgenfunction(behavior):
            wrapped = _wrap_generator(behavior, service, observed)
        else:
            wrapped = _wrap_coroutine(behavior, service, observed)

        factory = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }[(handler.request_streaming, handler.response_streaming)]
        return factory(
            wrapped,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _wrap_coroutine(behavior, service, observed):
    async def wrapped(request_or_iterator, context):
        GRPC_IN_FLIGHT.labels(service).inc()
        start, error = time.perf_counter(), None
        try:
            return await behavior(request_or_iterator, context)
        except BaseException as exc:
            error = exc
            raise
        finally:
            observed(context, error, start)

    return wrapped


def _wrap_generator(behavior, service, observed):
    async def wrapped(request_or_iterator, context):
        GRPC_IN_FLIGHT.labels(service).inc()
        start, error = time.perf_counter(), None
        try:
            async for response in behavior(request_or_iterator, context):
                yield response
        except BaseException as exc:
            error = exc
            raise
        finally:
            observed(context, error, start)

    return wrapped
