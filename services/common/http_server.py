"""An HTTP API (FastAPI/ASGI) served beside a service's gRPC server, in the same process
and event loop: the inference service's OpenAI-compatible API, the gateway."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Literal

import uvicorn


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
