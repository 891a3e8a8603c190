"""Prometheus instruments shared by every service, and the /metrics endpoint.

Names follow `etude_<area>_<what>_<unit>`; histograms carry explicit buckets; labels stay
few and never hold a per-request id. A service's own instruments live in its `metrics.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from threading import Thread
from wsgiref.simple_server import WSGIServer, make_server

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import start_http_server as _start_http_server
from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler, make_wsgi_app

# Latency buckets from 1 ms to 5 min: one set fits tool calls, generation and scoring.
LATENCY_BUCKETS_SECONDS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip

GRPC_HANDLED = Counter(
    "etude_grpc_server_handled_total",
    "gRPC calls completed by the server, by final status code.",
    ["service", "method", "code"],
)
GRPC_HANDLING_SECONDS = Histogram(
    "etude_grpc_server_handling_seconds",
    "Time from receiving a gRPC call to its completion on the server.",
    ["service", "method"],
    buckets=LATENCY_BUCKETS_SECONDS,
)
GRPC_IN_FLIGHT = Gauge(
    "etude_grpc_server_in_flight",
    "gRPC calls being handled now.",
    ["service"],
)


@dataclass
class MetricsEndpoint:
    server: WSGIServer
    thread: Thread

    @property
    def port(self) -> int:
        return self.server.server_port

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_metrics_endpoint(
    host: str,
    port: int,
    registry: CollectorRegistry = REGISTRY,
    authorize: Callable[[str | None], bool] | None = None,
) -> MetricsEndpoint:
    """Serve `/metrics` from a daemon thread; port 0 picks a free port. With `authorize`,
    a request whose `Authorization` header it refuses gets 401."""
    if authorize is None:
        server, thread = _start_http_server(port, addr=host, registry=registry)
        return MetricsEndpoint(server, thread)
    metrics_app = make_wsgi_app(registry)

    def app(request: dict, start_response):  # a WSGI environ: the request, not the process's
        if not authorize(request.get("HTTP_AUTHORIZATION")):
            start_response("401 Unauthorized", [("WWW-Authenticate", "Bearer")])
            return [b"a credential is required\n"]
        return metrics_app(request, start_response)

    server = make_server(host, port, app, ThreadingWSGIServer, handler_class=_SilentHandler)
    thread = Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return MetricsEndpoint(server, thread)
