"""Client channels with deadlines and retries, and health probes.

Retries are configured the gRPC way, through the channel's service config, so they apply
to every stub on the channel: UNAVAILABLE (a restarting or not-yet-ready server) is retried
with exponential backoff; other codes return at once. Every call gets the default deadline
unless the caller passes its own `timeout=`.

Every channel presents this process's credential (etude.common.auth): the token of a role
it holds that the called method allows, from `ETUDE_AUTH__TOKENS_DIR`; over mTLS when
certificates are configured. Health probes present no token (health is open).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import grpc
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from etude.common.auth import channel_credentials, client_interceptors, read_tokens
from etude.common.grpc_server import message_size_options
from etude.common.settings import AuthSettings, ClientSettings, get_settings

RETRYABLE_CODES = ("UNAVAILABLE",)


def _seconds(value: float) -> str:
    return f"{value:.3f}s"


def service_config(settings: ClientSettings, long_methods: Sequence[str] = ()) -> str:
    """A service config that balances over every address of the target and applies the
    deadline and retry policy to every method; `long_methods` (`package.Service/Method`)
    get `long_call_timeout_seconds` instead. A per-call `timeout=` can only shorten the
    deadline the service config sets, never lengthen it."""
    retry: dict[str, object] = {}
    if settings.max_attempts > 1:  # gRPC refuses a retry policy of a single attempt
        retry["retryPolicy"] = {
            "maxAttempts": settings.max_attempts,
            "initialBackoff": _seconds(settings.initial_backoff_seconds),
            "maxBackoff": _seconds(settings.max_backoff_seconds),
            "backoffMultiplier": settings.backoff_multiplier,
            "retryableStatusCodes": list(RETRYABLE_CODES),
        }
    methods: list[dict[str, object]] = [
        # an empty name matches every service and method
        {"name": [{}], "timeout": _seconds(settings.timeout_seconds), **retry}
    ]
    if long_methods:  # a named method's entry wins over the catch-all
        names = [dict(zip(("service", "method"), m.split("/"), strict=True)) for m in long_methods]
        methods.append(
            {"name": names, "timeout": _seconds(settings.long_call_timeout_seconds), **retry}
        )
    # round_robin: a headless Kubernetes Service resolves to every pod, and calls spread
    # over all of them (gRPC's default, pick_first, would send everything to one pod).
    return json.dumps({"loadBalancingConfig": [{"round_robin": {}}], "methodConfig": methods})


def channel_options(
    settings: ClientSettings, max_message_bytes: int, long_methods: Sequence[str] = ()
) -> list[tuple[str, object]]:
    return [
        ("grpc.enable_retries", 1),
        ("grpc.service_config", service_config(settings, long_methods)),
        *message_size_options(max_message_bytes),
    ]


def open_channel(
    target: str,
    settings: ClientSettings,
    max_message_bytes: int = 64 * 1024 * 1024,
    auth: AuthSettings | None = None,
    tokens: Mapping[str, str] | None = None,
    long_methods: Sequence[str] = (),
) -> aio.Channel:
    """An asyncio channel to `target` (`host:port`) with the retry policy and size limits,
    presenting `tokens` (role → token; unset: those `auth` names, by default the process's
    ETUDE_AUTH__* settings) and using mTLS when `auth` configures it. `long_methods`: see
    `service_config`."""
    auth = auth or get_settings().auth
    if tokens is None:
        tokens = read_tokens(auth.tokens_dir, auth.roles)
    options = channel_options(settings, max_message_bytes, long_methods)
    interceptors = client_interceptors(tokens)
    tls = channel_credentials(auth)
    if tls is None:
        return aio.insecure_channel(target, options=options, interceptors=interceptors)
    return aio.secure_channel(target, tls, options=options, interceptors=interceptors)


insecure_channel = open_channel
"""The former name, kept for callers written before channels carried credentials."""


def health_status(
    target: str, service: str = "", timeout: float = 2.0, auth: AuthSettings | None = None
) -> str:
    """`SERVING`, `NOT_SERVING`, `SERVICE_UNKNOWN`, or `UNREACHABLE` (a synchronous probe;
    no token, but over mTLS when configured, as the server accepts nothing else)."""
    tls = channel_credentials(auth or get_settings().auth)
    channel = grpc.insecure_channel(target) if tls is None else grpc.secure_channel(target, tls)
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.NOT_FOUND:
                return "SERVICE_UNKNOWN"
            return "UNREACHABLE"
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
