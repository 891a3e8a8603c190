"""`python -m etude.gateway`: the HTTP API (uvicorn) and, in the same process, the gRPC
runtime every service runs — health checking (what `etude up` and probes wait on),
reflection and the Prometheus `/metrics` endpoint. The gateway has no gRPC API of its own."""

from __future__ import annotations

import contextlib
import json
import logging

from etude.common.auth import Verifier
from etude.common.grpc_server import Registration, run_service
from etude.common.http_server import serve_http
from etude.common.logging import log_fields
from etude.common.redis_server import redacted
from etude.gateway.app import create_app
from etude.gateway.config import GatewaySettings
from etude.gateway.launcher import Launcher, LocalLauncher, RecordOnlyLauncher

log = logging.getLogger("etude.gateway")


def make_launcher(settings: GatewaySettings) -> Launcher:
    config = settings.gateway
    if config.launcher == "none":
        return RecordOnlyLauncher()
    child_env = {
        "ETUDE_REDIS__URL": settings.redis.url,
        # Inherited from `etude up`, these name the gateway's own ports.
        "ETUDE_GRPC__PORT": "0",
        "ETUDE_GRPC__METRICS_PORT": "0",
        # The gateway presents its own role; the run it starts trains and rolls out.
        "ETUDE_AUTH__ROLES": json.dumps(["trainer", "rollout"]),
    }
    return LocalLauncher((config.run_dir or settings.stack.run_dir).resolve(), env=child_env)


async def build(
    settings: GatewaySettings, resources: contextlib.AsyncExitStack
) -> list[Registration]:
    config = settings.gateway
    app = create_app(
        settings.redis.url,
        make_launcher(settings),
        redis_timeout_seconds=config.redis_timeout_seconds,
        verifier=Verifier.from_settings(settings.auth),
        driver_timeout_seconds=settings.runs.driver_timeout_seconds,
        reap_interval_seconds=config.reap_interval_seconds,
        config=config,
    )
    # lifespan on: the app opens its Redis client there.
    port = await serve_http(app, settings.grpc.host, config.http_port, resources, lifespan="on")
    log.info(
        "gateway listening",
        extra=log_fields(
            http=f"{settings.grpc.host}:{port}",
            launcher=config.launcher,
            redis=redacted(settings.redis.url),
        ),
    )
    return []


if __name__ == "__main__":
    run_service("gateway", build, GatewaySettings())
