"""The gRPC server runtime every service runs in.

It adds what each service would otherwise repeat: health checking and reflection, the
credential check (etude.common.auth: every call but health and reflection needs a role
token the method allows; optional mTLS), the metrics interceptor, a Prometheus `/metrics`
endpoint, message-size limits, and graceful shutdown on SIGTERM — health turns
NOT_SERVING, the server keeps answering for `drain_seconds` so probes and balancers move
traffic away, then stops with `grace_seconds` for calls in flight.

    runtime = ServiceRuntime("environment", settings.grpc, [Registration(...)])
    await runtime.serve()          # until SIGTERM / SIGINT
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from grpc import aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from etude.common.auth import (
    AuthInterceptor,
    Verifier,
    metrics_authorizer,
    server_credentials,
)
from etude.common.grpc_interceptors import MetricsInterceptor
from etude.common.logging import configure_logging, log_fields
from etude.common.metrics import MetricsEndpoint, start_metrics_endpoint
from etude.common.settings import AuthSettings, EtudeSettings, GrpcSettings, get_settings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Registration:
    """A servicer and how to add it: `add_to_server` is the generated
    `add_<Name>Servicer_to_server`, `service_name` the full proto name (for health and
    reflection), e.g. `etude.api.v1.EnvironmentService`."""

    servicer: Any
    add_to_server: Callable[[Any, aio.Server], None]
    service_name: str
    alive: Callable[[], bool] | None = None
    """Whether the servicer can still serve (e.g. its engine has not died); polled, and
    health turns NOT_SERVING once it says no, so probes restart the process."""


def message_size_options(max_message_bytes: int) -> list[tuple[str, int]]:
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
    ]


class ServiceRuntime:
    def __init__(
        self,
        name: str,
        settings: GrpcSettings,
        registrations: Sequence[Registration],
        auth: AuthSettings | None = None,
    ) -> None:
        """`auth` unset: the process's settings (ETUDE_AUTH__*)."""
        self.name = name
        self.settings = settings
        self.registrations = list(registrations)
        self.auth = auth or get_settings().auth
        # Read now, so a service without credentials fails at start, not at its first call.
        self.verifier = Verifier.from_settings(self.auth)
        self.health = health.aio.HealthServicer()
        self.server: aio.Server | None = None
        self.metrics: MetricsEndpoint | None = None
        self.port = 0
        self._stopped = asyncio.Event()
        self._shutdown_task: asyncio.Task[None] | None = None
        self._liveness_task: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        return f"{self.settings.host}:{self.port}"

    @property
    def metrics_url(self) -> str:
        assert self.metrics is not None
        return f"http://{self.settings.host}:{self.metrics.port}/metrics"

    @property
    def service_names(self) -> list[str]:
        return [r.service_name for r in self.registrations]

    async def start(self) -> None:
        server = aio.server(
            # Metrics outermost, so calls the credential check refuses are counted by code.
            interceptors=[MetricsInterceptor(), AuthInterceptor(self.verifier)],
            options=message_size_options(self.settings.max_message_bytes),
        )
        for registration in self.registrations:
            registration.add_to_server(registration.servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        reflection.enable_server_reflection(
            [
                *self.service_names,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ],
            server,
        )
        bind = f"{self.settings.host}:{self.settings.port}"
        tls = server_credentials(self.auth)
        self.port = (
            server.add_insecure_port(bind) if tls is None else server.add_secure_port(bind, tls)
        )
        if self.port == 0:
            raise OSError(f"{self.name}: cannot bind {self.settings.host}:{self.settings.port}")
        await server.start()
        self.server = server
        self.metrics = start_metrics_endpoint(
            self.settings.host, self.settings.metrics_port, authorize=metrics_authorizer(self.auth)
        )
        # "" is the whole server's status, the one probes ask for by default.
        for service in ["", *self.service_names]:
            await self.health.set(service, health_pb2.HealthCheckResponse.SERVING)
        if any(r.alive for r in self.registrations):
            self._liveness_task = asyncio.get_running_loop().create_task(self._watch_liveness())
        # What exists at start-up (modules, stubs, servicers) lives as long as the process:
        # move it out of the collector's sight, so full collections stay short pauses
        # (without this, a 32-session read_file load showed ~100 ms stalls).
        gc.collect()
        gc.freeze()
        # The event loop shares the GIL with worker threads (file tools run in threads);
        # a 1 ms switch interval, not 5 ms, keeps a thread from holding up the replies.
        sys.setswitchinterval(0.001)
        log.info(
            "%s serving",
            self.name,
            extra=log_fields(grpc=self.address, metrics=self.metrics_url),
        )

    async def _watch_liveness(self, interval_seconds: float = 0.5) -> None:
        """Health tells the truth: a servicer that can no longer serve is NOT_SERVING (and
        so is the whole server, the status probes ask for)."""
        dead: set[str] = set()
        while True:
            await asyncio.sleep(interval_seconds)
            for registration in self.registrations:
                name = registration.service_name
                if name in dead or registration.alive is None or registration.alive():
                    continue
                dead.add(name)
                log.error("%s can no longer serve; health is NOT_SERVING", name)
                for service in ("", name):
                    await self.health.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)

    def request_shutdown(self) -> asyncio.Task[None]:
        """Begin graceful shutdown (idempotent); returns the task that completes it."""
        if self._shutdown_task is None:
            self._shutdown_task = asyncio.get_running_loop().create_task(self._shutdown())
        return self._shutdown_task

    async def shutdown(self) -> None:
        await self.request_shutdown()

    async def _shutdown(self) -> None:
        log.info("%s shutting down", self.name, extra=log_fields(drain=self.settings.drain_seconds))
        if self._liveness_task is not None:
            self._liveness_task.cancel()
        await self.health.enter_graceful_shutdown()
        await asyncio.sleep(self.settings.drain_seconds)
        if self.server is not None:
            await self.server.stop(self.settings.grace_seconds)
        if self.metrics is not None:
            await asyncio.to_thread(self.metrics.close)
        self._stopped.set()
        log.info("%s stopped", self.name)

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def serve(self) -> None:
        """Start, then run until SIGTERM or SIGINT has shut the server down gracefully."""
        await self.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_shutdown)
        try:
            await self.wait_stopped()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)


def run_service(
    name: str,
    build: Callable[[Any, contextlib.AsyncExitStack], Awaitable[Sequence[Registration]]],
    settings: EtudeSettings | None = None,
) -> None:
    """The body of a service's `__main__`: settings, logging, servicers, serve until stopped.

    `build(settings, resources)` returns the servicers; what it pushes on `resources`
    (closing sessions, channels, background tasks) is released after the server stopped.
    """
    settings = settings or get_settings()
    configure_logging(settings.log)

    async def main() -> None:
        async with contextlib.AsyncExitStack() as resources:
            registrations = await build(settings, resources)
            runtime = ServiceRuntime(name, settings.grpc, registrations, settings.auth)
            await runtime.serve()

    asyncio.run(main())
