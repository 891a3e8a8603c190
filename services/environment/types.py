"""The environment's plain types, what its clients may import: a tool's result as the tool
returns it (`ToolOutput`) and as the caller receives it (`ExecutedCall`).

One result travels from the tool to the agent: the environment wraps the tool's
`ToolOutput` once, with the call it answers and how long the tool ran, and wire.py carries
that to a remote client unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ToolOutput:
    output: str
    exit_code: int = 0
    truncated: bool = False
    truncated_chars: int = 0
    error_reason: str | None = None
    """A short stable label for metrics when the call failed (e.g. `not_found`,
    `outside_workspace`, `not_unique`, `timeout`); None on success."""
    ends_episode: bool = False
    """Set by `submit`: the rollout stops after this batch."""

    @classmethod
    def error(cls, reason: str, message: str, exit_code: int = 1) -> ToolOutput:
        return cls(output=message, exit_code=exit_code, error_reason=reason)


@dataclass(frozen=True, slots=True)
class ExecutedCall:
    """One tool call of a batch, answered."""

    call_id: str
    name: str
    result: ToolOutput
    seconds: float
    """How long the tool ran, measured once where it ran: the environment's and the
    rollout's tool-latency histograms both record this figure."""
