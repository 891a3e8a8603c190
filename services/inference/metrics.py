"""Prometheus instruments of the inference service."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from etude.common.metrics import LATENCY_BUCKETS_SECONDS

# Per-token gaps are far below the generic buckets' 1 ms floor on a GPU.
TOKEN_GAP_BUCKETS_SECONDS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.5,
)

TIME_TO_FIRST_TOKEN = Histogram(
    "etude_inference_time_to_first_token_seconds",
    "From receiving a request to its first generated token.",
    buckets=LATENCY_BUCKETS_SECONDS,
)
INTER_TOKEN_LATENCY = Histogram(
    "etude_inference_inter_token_latency_seconds",
    "Time between two consecutive tokens of one completion.",
    buckets=TOKEN_GAP_BUCKETS_SECONDS,
)
REQUEST_SECONDS = Histogram(
    "etude_inference_request_seconds",
    "End-to-end time of a request, all n completions.",
    ["finish_reason"],
    buckets=LATENCY_BUCKETS_SECONDS,
)
TOKENS_GENERATED = Counter(
    "etude_inference_generated_tokens_total",
    "Tokens sampled, all completions.",
)
PROMPT_TOKENS = Counter(
    "etude_inference_prompt_tokens_total",
    "Prompt tokens of accepted requests.",
)
RUNNING_REQUESTS = Gauge(
    "etude_inference_running_requests",
    "Requests being decoded now.",
)
WAITING_REQUESTS = Gauge(
    "etude_inference_waiting_requests",
    "Requests waiting for cache space.",
)
KV_CACHE_USAGE = Gauge(
    "etude_inference_kv_cache_usage_ratio",
    "Fraction of the KV cache in use (0..1).",
)
WEIGHT_UPDATE_SECONDS = Histogram(
    "etude_inference_weight_update_seconds",
    "Time to load a new policy version, from the first chunk received to serving it.",
    buckets=LATENCY_BUCKETS_SECONDS,
)
POLICY_VERSION = Gauge(
    "etude_inference_policy_version",
    "Version of the policy weights being served.",
)


def watch_backend(backend) -> None:
    """Gauges read from the backend when Prometheus scrapes."""
    RUNNING_REQUESTS.set_function(lambda: backend.stats().running)
    WAITING_REQUESTS.set_function(lambda: backend.stats().waiting)
    KV_CACHE_USAGE.set_function(lambda: backend.stats().kv_cache_usage)
    POLICY_VERSION.set_function(lambda: backend.policy_version)
