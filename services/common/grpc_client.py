"""Client channels with deadlines and retries, and health probes.

Retries are configured the gRPC way, through the channel's service config, so they apply
to every stub on the channel: UNAVAILABLE (a restarting or not-yet-ready server) is retried
with exponential backoff; other codes return at once. Every call gets the default deadline
unless the caller passes its own `timeout=`.
"""

from __future__ import annotations

import json

import grpc
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from etude.common.grpc_server import message_size_options
from etude.common.settings import ClientSettings

RETRYABLE_CODES = ("UNAVAILABLE",)


def _seconds(value: float) -> str:
    return f"{value:.3f}s"


def service_config(settings: ClientSettings) -> str:
    """A service config that balances over every address of the target and applies the
    deadline and retry policy to every method."""
    method: dict[str, object] = {
        "name": [{}],  # an empty name matches every service and method
        "timeout": _seconds(settings.timeout_seconds),
    }
    if settings.max_attempts > 1:  # gRPC refuses a retry policy of a single attempt
        method["retryPolicy"] = {
            "maxAttempts": settings.max_attempts,
            "initialBackoff": _seconds(settings.initial_backoff_seconds),
            "maxBackoff": _seconds(settings.max_backoff_seconds),
            "backoffMultiplier": settings.backoff_multiplier,
            "retryableStatusCodes": list(RETRYABLE_CODES),
        }
    # round_robin: a headless Kubernetes Service resolves to every pod, and calls spread
    # over all of them (gRPC's default, pick_first, would send everything to one pod).
    return json.dumps({"loadBalancingConfig": [{"round_robin": {}}], "methodConfig": [method]})


def channel_options(settings: ClientSettings, max_message_bytes: int) -> list[tuple[str, object]]:
    return [
        ("grpc.enable_retries", 1),
        ("grpc.service_config", service_config(settings)),
        *message_size_options(max_message_bytes),
    ]


def insecure_channel(
    target: str, settings: ClientSettings, max_message_bytes: int = 64 * 1024 * 1024
) -> aio.Channel:
    """An asyncio channel to `target` (`host:port`) with the retry policy and size limits."""
    return aio.insecure_channel(target, options=channel_options(settings, max_message_bytes))


def health_status(target: str, service: str = "", timeout: float = 2.0) -> str:
    """`SERVING`, `NOT_SERVING`, `SERVICE_UNKNOWN`, or `UNREACHABLE` (a synchronous probe)."""
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.NOT_FOUND:
                return "SERVICE_UNKNOWN"
            return "UNREACHABLE"
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
