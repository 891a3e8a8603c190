"""Prometheus instruments shared by every service, and the /metrics endpoint.

Names follow `etude_<area>_<what>_<unit>`; histograms carry explicit buckets; labels stay
few and never hold a per-request id. A service's own instruments live in its `metrics.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from threading import Thread
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import start_http_server as _start_http_server

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

QUEUE_DEPTH = Gauge(
    "etude_queue_depth", "Entries in a work stream not yet acknowledged.", ["stream"]
)
QUEUE_LAG = Gauge("etude_queue_lag", "Entries never delivered to any consumer.", ["stream"])
QUEUE_PENDING = Gauge(
    "etude_queue_pending", "Entries delivered to a consumer and not yet acknowledged.", ["stream"]
)
QUEUE_DEAD = Gauge("etude_queue_dead_letters", "Entries in the dead-letter stream.", ["stream"])
QUEUE_OLDEST_PENDING_SECONDS = Gauge(
    "etude_queue_oldest_pending_idle_seconds",
    "Idle time of the longest-waiting delivered entry.",
    ["stream"],
)


def export_queue_stats(stream: str, stats: object) -> None:
    """Copy a `QueueStats` snapshot into the queue gauges."""
    QUEUE_DEPTH.labels(stream).set(stats.depth)
    QUEUE_LAG.labels(stream).set(stats.lag)
    QUEUE_PENDING.labels(stream).set(stats.pending)
    QUEUE_DEAD.labels(stream).set(stats.dead)
    QUEUE_OLDEST_PENDING_SECONDS.labels(stream).set(stats.oldest_pending_idle_seconds)


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
    host: str, port: int, registry: CollectorRegistry = REGISTRY
) -> MetricsEndpoint:
    """Serve `/metrics` from a daemon thread; port 0 picks a free port."""
    server, thread = _start_http_server(port, addr=host, registry=registry)
    return MetricsEndpoint(server, thread)
