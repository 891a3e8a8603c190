"""Prometheus instruments of the rollout workers (the tail-latency dashboard reads these)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram

from etude.common.metrics import LATENCY_BUCKETS_SECONDS
from etude.common.payloads import Trajectory
from etude.environment.types import ExecutedCall

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
    "The reward service's reward (correctness) of finished episodes, before any turn cost.",
    buckets=(0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0),
)
TURNS = Histogram(
    "etude_rollout_turns",
    "Assistant turns per episode.",
    buckets=(1, 2, 3, 4, 6, 8, 12, 16, 32),
)
TOOL_CALLS_PER_TURN = Histogram(
    "etude_rollout_tool_calls_per_turn",
    "Parsed tool calls per assistant turn (2 or more: a parallel batch).",
    buckets=(0, 1, 2, 3, 4, 6, 8, 16, 32),
)
GENERATED_TOKENS = Histogram(
    "etude_rollout_generated_tokens",
    "Tokens the policy sampled per episode (the loss mask's ones).",
    buckets=(16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384),
)
CALLS = Counter(
    "etude_rollout_tool_calls_total",
    "Tool calls by outcome: valid, or malformed (rejected by the parser or refused by the "
    "environment as bad arguments).",
    ["kind"],
)
EDITS = Counter(
    "etude_rollout_edits_total",
    "edit_file calls; blind=true: to a file not read with read_file in an earlier turn.",
    ["blind"],
)
FAILURES = Counter(
    "etude_rollout_failures_total",
    "Rollouts given back to the queue by the reason's kind (retried, or dead-lettered).",
    ["kind"],
)
IN_FLIGHT = Gauge("etude_rollout_in_flight", "Rollouts this worker is running now.")
ROUTER_DECISIONS = Counter(
    "etude_router_decisions_total",
    "Generation requests routed, by decision: affinity (to the engine holding the episode's "
    "prefix), spilled (it was overloaded or behind), least_loaded (a first turn), round_robin.",
    ["decision"],
)
ROUTER_ADMISSIONS = Counter(
    "etude_router_admissions_total",
    "Engines admitted to routing once they served the current policy version.",
)
ENGINE_OUTSTANDING = Gauge(
    "etude_router_engine_outstanding",
    "Sequences running or waiting on each inference engine, as it last reported.",
    ["engine"],
)


def record_episode(trajectory: Trajectory) -> None:
    EPISODES.labels(trajectory.finish_reason).inc()
    REWARD.observe(trajectory.correctness)
    TURNS.observe(trajectory.turns)
    for calls in trajectory.calls_per_turn:
        TOOL_CALLS_PER_TURN.observe(calls)
    GENERATED_TOKENS.observe(sum(trajectory.loss_mask))
    CALLS.labels("valid").inc(trajectory.valid_calls)
    CALLS.labels("malformed").inc(trajectory.malformed_calls)
    EDITS.labels("true").inc(trajectory.blind_edits)
    EDITS.labels("false").inc(trajectory.edits - trajectory.blind_edits)


def record_tool_calls(results: Iterable[ExecutedCall]) -> None:
    for result in results:
        TOOL_CALL_SECONDS.labels(result.name).observe(result.seconds)
