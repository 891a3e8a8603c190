"""Prometheus instruments of the gateway. `route` is the route's template
(`/runs/{run_id}`), never the requested path, so an id never becomes a label value."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

# Control-plane calls are one or two Redis round trips: finer below 100 ms than the
# shared buckets, and nothing legitimate takes minutes.
REQUEST_BUCKETS_SECONDS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

REQUESTS = Counter(
    "etude_gateway_requests_total",
    "HTTP requests answered by the gateway, by method, route and status code.",
    ["method", "route", "status"],
)
REQUEST_SECONDS = Histogram(
    "etude_gateway_request_seconds",
    "Time from receiving an HTTP request to its response, by route.",
    ["route"],
    buckets=REQUEST_BUCKETS_SECONDS,
)
