"""The environment's plain types, what its clients may import: a tool's result as the tool
returns it (`ToolOutput`) and as the caller receives it (`ExecutedCall`), the tools as the
policy is told about them (`ToolCatalog`, the answer of ListTools), an opened session, a
workspace's diff, and the errors a call can meet (server.py maps each to a gRPC status code,
the gRPC client maps them back).

One result travels from the tool to the agent: the environment wraps the tool's
`ToolOutput` once, with the call it answers and how long the tool ran, and wire.py carries
that to a remote client unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from etude.common.toolcalls import ToolSpec


class SessionNotFoundError(LookupError):
    """No live session has that id (never created, closed, or expired)."""


class SessionLimitError(RuntimeError):
    """The bound on live sessions is reached."""


class RepositoryError(ValueError):
    """The repository to prepare does not exist or is not a directory, or the Python
    environment to run with is not one."""


class WalkLimitError(RuntimeError):
    """A host-side walk of a workspace (Diff) ran past its deadline or its caps on entries or
    bytes: the tree is too big, or something in it keeps the walk busy."""


@dataclass(frozen=True, slots=True)
class OpenedSession:
    session_id: str
    workspace_mode: str
    sandbox_backend: str


@dataclass(frozen=True, slots=True)
class WorkspaceDiff:
    unified_diff: str
    changed_paths: list[str]
    skipped: list[str] = field(default_factory=list)
    """Entries left out: FIFOs, sockets, devices, `.git`, directories nested too deep."""


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


@dataclass(frozen=True, slots=True)
class ToolDescription:
    """One tool as the policy is told about it."""

    name: str
    description: str
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    """Parameter names in the order they are documented, after the required ones."""

    @property
    def spec(self) -> ToolSpec:
        """What the tool-call parser checks a call against."""
        return ToolSpec(self.name, self.required, self.optional)


@dataclass(frozen=True, slots=True)
class ToolCatalog:
    """The agent's tools in the order it sees them, and how their path arguments are read."""

    tools: tuple[ToolDescription, ...]
    path_rules: str
