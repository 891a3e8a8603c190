"""What the environment core reports as it works; metrics.py turns it into Prometheus.

Keeping the core free of Prometheus lets tests and Ray actors run it without a registry.
"""

from __future__ import annotations


class EnvironmentObserver:
    """Does nothing; the service subclasses it to export metrics."""

    def session_created(self, seconds: float, live: int) -> None:
        pass

    def session_closed(self, reason: str, live: int) -> None:
        pass

    def tool_called(self, tool: str, seconds: float, error_reason: str | None) -> None:
        pass

    def sandbox_killed(self, reason: str) -> None:
        pass

    def leftovers_reclaimed(self, sessions: int, cgroups: int, processes: int) -> None:
        """At start: what killed services had left (etude.sandbox.reclaim)."""
