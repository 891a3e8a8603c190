"""Prometheus instruments of the environment service, fed by the core's observer hooks."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from etude.common.metrics import LATENCY_BUCKETS_SECONDS
from etude.environment.observer import EnvironmentObserver

LIVE_SESSIONS = Gauge("etude_environment_live_sessions", "Sessions open now.")
SESSION_CREATE_SECONDS = Histogram(
    "etude_environment_session_create_seconds",
    "Time to create (or fork) a session: workspace layer plus a started sandbox.",
    buckets=LATENCY_BUCKETS_SECONDS,
)
SESSIONS_CLOSED = Counter(
    "etude_environment_sessions_closed_total",
    "Sessions ended, by why (closed, expired, shutdown).",
    ["reason"],
)
TOOL_CALL_SECONDS = Histogram(
    "etude_environment_tool_call_seconds",
    "Duration of one tool call inside a batch.",
    ["tool"],
    buckets=LATENCY_BUCKETS_SECONDS,
)
TOOL_ERRORS = Counter(
    "etude_environment_tool_errors_total",
    "Tool calls that returned an error result, by tool and reason.",
    ["tool", "reason"],
)
SANDBOX_KILLS = Counter(
    "etude_environment_sandbox_kills_total",
    "Times the sandbox killed processes, by reason (timeout, processes, memory).",
    ["reason"],
)

LEFTOVERS_RECLAIMED = Counter(
    "etude_environment_leftovers_reclaimed_total",
    "What killed environment services had left, reclaimed at start, by kind "
    "(sessions, cgroups, processes).",
    ["kind"],
)


class PrometheusObserver(EnvironmentObserver):
    def session_created(self, seconds: float, live: int) -> None:
        SESSION_CREATE_SECONDS.observe(seconds)
        LIVE_SESSIONS.set(live)

    def session_closed(self, reason: str, live: int) -> None:
        SESSIONS_CLOSED.labels(reason).inc()
        LIVE_SESSIONS.set(live)

    def tool_called(self, tool: str, seconds: float, error_reason: str | None) -> None:
        TOOL_CALL_SECONDS.labels(tool).observe(seconds)
        if error_reason:
            TOOL_ERRORS.labels(tool, error_reason).inc()

    def sandbox_killed(self, reason: str) -> None:
        SANDBOX_KILLS.labels(reason).inc()

    def leftovers_reclaimed(self, sessions: int, cgroups: int, processes: int) -> None:
        counts = {"sessions": sessions, "cgroups": cgroups, "processes": processes}
        for kind, count in counts.items():
            LEFTOVERS_RECLAIMED.labels(kind).inc(count)
