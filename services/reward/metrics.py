"""Prometheus instruments of the reward service."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from etude.common.metrics import LATENCY_BUCKETS_SECONDS

SCORE_SECONDS = Histogram(
    "etude_reward_score_seconds",
    "Time to grade one patch: fresh repository, patch, hidden tests.",
    buckets=LATENCY_BUCKETS_SECONDS,
)
OUTCOMES = Counter(
    "etude_reward_outcomes_total",
    "Graded patches by result: passed, failed, timeout, error.",
    ["result"],
)
