"""Prometheus instruments of the rollout workers (the tail-latency dashboard reads these)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram

from etude.common.metrics import LATENCY_BUCKETS_SECONDS
from etude.environment.batch import ExecutedCall

ROLLOUT_SECONDS = Histogram(
    "etude_rollout_seconds",
    "One rollout from start to its trajectory written: turns, tool calls and scoring.",
    buckets=LATENCY_BUCKETS_SECONDS,
)
QUEUE_WAIT_SECONDS = Histogram(
    "etude_rollout_queue_wait_seconds",
    "Time a rollout entry waited in the queue before a worker started it.",
    buckets=LATENCY_BUCKETS_SECONDS,
)
GENERATE_SECONDS = Histogram(
    "etude_rollout_generate_seconds",
    "Time to sample one assistant turn.",
    buckets=LATENCY_BUCKETS_SECONDS,
)
TOOL_CALL_SECONDS = Histogram(
    "etude_rollout_tool_call_seconds",
    "Time of one tool call as the environment measured it, by tool.",
    ["tool"],
    buckets=LATENCY_BUCKETS_SECONDS,
)
EPISODES = Counter(
    "etude_rollout_episodes_total",
    "Finished episodes by finish reason (submitted, no_tool_call, max_turns, max_tokens, timeout).",
    ["reason"],
)
REWARD = Histogram(
    "etude_rollout_reward",
    "Reward of finished episodes.",
    buckets=(0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0),
)
TURNS = Histogram(
    "etude_rollout_turns",
    "Assistant turns per episode.",
    buckets=(1, 2, 3, 4, 6, 8, 12, 16, 32),
)
FAILURES = Counter(
    "etude_rollout_failures_total",
    "Rollouts given back to the queue by the reason's kind (retried, or dead-lettered).",
    ["kind"],
)
IN_FLIGHT = Gauge("etude_rollout_in_flight", "Rollouts this worker is running now.")


def record_episode(reason: str, reward: float, turns: int) -> None:
    EPISODES.labels(reason).inc()
    REWARD.observe(reward)
    TURNS.observe(turns)


def record_tool_calls(results: Iterable[ExecutedCall]) -> None:
    for result in results:
        TOOL_CALL_SECONDS.labels(result.name).observe(result.duration_seconds)
