"""An HTTP API (FastAPI/ASGI) served beside a service's gRPC server, in the same process
and event loop: the inference service's OpenAI-compatible API, the gateway. Requests are
refused before they cost anything by etude.common.http_gate; `cancel_on_disconnect` stops
work whose client has gone."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, Literal, TypeVar

import uvicorn
from starlette.responses import Response
from starlette.types import Receive

CLIENT_CLOSED_REQUEST = 499
"""nginx's status for a request whose client left before the answer (never sent)."""

T = TypeVar("T")


async def serve_http(
    app,
    host: str,
    port: int,
    resources: contextlib.AsyncExitStack,
    lifespan: Literal["on", "off"] = "off",
) -> int:
    """Start serving `app`; returns the bound port (port 0 picks a free one). The server
    stops when `resources` closes; a server that cannot start raises here."""
    http = uvicorn.Server(
        uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan=lifespan)
    )
    http_task = asyncio.create_task(http.serve())

    async def stop_http() -> None:
        http.should_exit = True
        await http_task

    resources.push_async_callback(stop_http)
    while not http.started and not http_task.done():
        await asyncio.sleep(0.01)
    if http_task.done():
        http_task.result()  # raises why the HTTP server could not start
    return http.servers[0].sockets[0].getsockname()[1]


async def cancel_on_disconnect(receive: Receive, work: Coroutine[Any, Any, T]) -> T | Response:
    """`work`'s result, or, when the client disconnects first, `work` cancelled (its cleanup
    done: a generation's `finally` frees its engine slots before this returns) and a 499 the
    server will not send, since no one is there to read it.

    For handlers that answer once they are done (a whole completion, or the first tokens of
    every prompt before a stream starts): while they run, nothing else reads the connection,
    so nothing would notice the client leaving. `receive` must be the request's, its body
    already read: what this awaits next is the `http.disconnect` (a streamed response
    listens for it on its own once it starts)."""
    task = asyncio.create_task(work)

    async def disconnected() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    listener = asyncio.create_task(disconnected())
    try:
        await asyncio.wait({task, listener}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        listener.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
    if task.cancelled():
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    return task.result()
