"""`python -m etude.inference`: the inference service on its own — gRPC, and the
OpenAI-compatible HTTP API in the same process."""

from __future__ import annotations

import contextlib
import logging

import redis.asyncio as aioredis

from etude.common.grpc_server import Registration, run_service
from etude.common.http_server import serve_http
from etude.common.logging import log_fields
from etude.common.runs import RunRegistry
from etude.inference.backend_factory import start_backend
from etude.inference.config import InferenceSettings
from etude.inference.metrics import watch_backend
from etude.inference.openai_api import create_app
from etude.inference.ownership import PolicyOwnership, RunAlive
from etude.inference.server import InferenceServicer, registration
from etude.inference.serving import Serving

log = logging.getLogger("etude.inference")


async def build(
    settings: InferenceSettings, resources: contextlib.AsyncExitStack
) -> list[Registration]:
    config = settings.inference
    backend = await start_backend(config, settings.stack.run_dir, settings.sim)
    resources.push_async_callback(backend.close)
    watch_backend(backend)
    serving = Serving(backend, PolicyOwnership(_run_alive(settings, resources)))

    app = create_app(serving, config=config)
    port = await serve_http(app, settings.grpc.host, config.http_port, resources)
    log.info(
        "policy loaded",
        extra=log_fields(
            model=backend.model_name,
            backend=backend.name,
            parameters=backend.num_parameters,
            http=f"{settings.grpc.host}:{port}",
        ),
    )
    return [registration(InferenceServicer(serving, config.max_update_bytes))]


def _run_alive(settings: InferenceSettings, resources: contextlib.AsyncExitStack) -> RunAlive:
    """Whether the run owning this engine is alive, from the run registry (a client opened
    at the first question: an engine no second run ever updates never connects)."""
    client = aioredis.Redis.from_url(settings.redis.url, socket_timeout=5)
    resources.push_async_callback(client.aclose)
    registry = RunRegistry(client)

    async def alive(run_id: str) -> bool:
        return await registry.is_alive(run_id, settings.runs.driver_timeout_seconds)

    return alive


if __name__ == "__main__":
    run_service("inference", build, InferenceSettings())
