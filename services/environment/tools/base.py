"""What every tool is given and returns, and the registry tools join by decorator.

A tool is an async function `(ctx, **arguments) -> ToolOutput`. Arguments arrive as the
raw strings the policy wrote; `ToolArgumentError` raised while reading them becomes an
error result. A tool never raises for a problem the agent caused: it returns a
`ToolOutput` with a non-zero exit code and text that says what to do instead. The `@tool`
decorator wraps each tool in a guard that enforces this for `ToolArgumentError`, `ToolError`
and `OSError`, so helpers deep inside a tool may simply raise; any other exception is a bug
in the tool, and the agent reads it as an `internal` error instead of losing the rollout.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from etude.common.toolcalls import ToolSpec
from etude.environment.types import ToolOutput
from etude.sandbox.output import cap_output
from etude.sandbox.types import CommandOutcome

log = logging.getLogger(__name__)


class CommandRunner(Protocol):
    """Runs shell commands in the session's sandbox, in its one persistent shell."""

    async def run(self, command: str, timeout_s: float) -> CommandOutcome: ...


@dataclass(frozen=True, slots=True)
class SearchHit:
    path: str
    start_line: int
    end_line: int
    score: float
    snippet: str


class SearchBackend(Protocol):
    async def query(
        self, workspace_id: str, query: str, k: int, target_directories: list[str]
    ) -> list[SearchHit]: ...


@dataclass(frozen=True, slots=True)
class SandboxNamespaces:
    """Where host-side helpers can run inside the session's sandbox (its namespaces), so `/`
    is the sandbox's root and nothing of the host is reachable by a name or a link."""

    pid: int
    """Host pid of a process that lives in the sandbox's namespaces (its init)."""
    workspace: str
    """The workspace's path inside the sandbox."""


FilesChanged = Callable[[list[str], list[str]], Awaitable[None]]
"""Called after a tool changed files: (changed paths, deleted paths), workspace-relative."""


@dataclass(slots=True)
class ToolContext:
    session_id: str
    root: Path
    """Host path of the session's workspace as the sandbox sees it (/workspace inside)."""
    shell: CommandRunner
    search: SearchBackend | None = None
    on_files_changed: FilesChanged | None = None
    limits: dict[str, int] = field(default_factory=dict)
    namespaces: SandboxNamespaces | None = None
    """None where the sandbox has no namespaces (the `process` backend)."""


class ToolArgumentError(ValueError):
    """An argument is missing, malformed or out of range; the message is shown to the agent."""


class ToolError(Exception):
    """A failure the agent can act on, raised deep inside a tool (e.g. by path resolution).

    The registry turns it into `ToolOutput.error(reason, message)`, so helpers can stop a tool
    from any depth without every caller checking return values.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


ToolFunction = Callable[..., Awaitable[ToolOutput]]


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    function: ToolFunction
    read_only: bool
    """Read-only tools of one batch may run concurrently; the others run in order."""
    spec: ToolSpec
    description: str
    parameters: tuple[str, ...] = ()
    """Parameter names in the order they are documented: required first, then optional."""


TOOLS: dict[str, Tool] = {}

MAX_OUTPUT_CHARS = 40_000
"""Safety net on every tool's text (override with `ctx.limits["max_output_chars"]`); tools
have tighter limits of their own, this only catches what they missed."""

# errno → error_reason for OS errors that reach the registry unhandled.
_OS_ERROR_REASONS = {
    errno.ENOENT: "not_found",
    errno.EISDIR: "is_directory",
    errno.ENOTDIR: "not_a_directory",
    errno.EACCES: "permission_denied",
    errno.EPERM: "permission_denied",
    errno.ELOOP: "symlink",
    errno.ENOSPC: "no_space",
    errno.EROFS: "read_only",
}


def tool(
    name: str, *, read_only: bool, required: tuple[str, ...] = (), optional: tuple[str, ...] = ()
) -> Callable[[ToolFunction], ToolFunction]:
    """Register a tool under `name`; its docstring is the description the agent sees.

    The registered (and returned) function is a guard around the tool: it rejects unknown and
    missing arguments (the only argument check there is), turns every exception into an
    error result, and caps the output text, so the executor and direct callers get a
    `ToolOutput` either way.
    """
    spec = ToolSpec(name, required=frozenset(required), optional=frozenset(optional))

    def register(function: ToolFunction) -> ToolFunction:
        if name in TOOLS:
            raise ValueError(f"tool {name!r} is registered twice")
        guarded = _guard(function, spec)
        TOOLS[name] = Tool(
            name=name,
            function=guarded,
            read_only=read_only,
            spec=spec,
            description=" ".join((function.__doc__ or "").split()),
            parameters=(*required, *optional),
        )
        return guarded

    return register


def _guard(function: ToolFunction, spec: ToolSpec) -> ToolFunction:
    # `ctx` is positional-only, so an argument the policy names `ctx` is an unknown
    # parameter like any other, not a clash in the call.
    @functools.wraps(function)
    async def guarded(ctx: ToolContext, /, **arguments: str) -> ToolOutput:
        problem = _argument_problem(spec, arguments)
        if problem:
            return ToolOutput.error("bad_argument", problem)
        try:
            result = await function(ctx, **arguments)
        except ToolArgumentError as error:
            return ToolOutput.error("bad_argument", f"{spec.name}: {error}")
        except ToolError as error:
            return ToolOutput.error(error.reason, error.message)
        except OSError as error:
            return _os_error_output(spec.name, error)
        except Exception as error:  # a bug in the tool, its own TypeError included
            log.exception("tool %s failed", spec.name)
            return ToolOutput.error("internal", f"{spec.name} failed: {error}")
        return _cap(result, ctx.limits.get("max_output_chars", MAX_OUTPUT_CHARS))

    return guarded


def _argument_problem(spec: ToolSpec, arguments: dict[str, str]) -> str | None:
    unknown = sorted(set(arguments) - spec.parameters)
    missing = sorted(spec.required - set(arguments))
    if not unknown and not missing:
        return None
    accepted = ", ".join(sorted(spec.parameters)) or "(none)"
    parts = [f"unknown parameter(s): {', '.join(unknown)}"] if unknown else []
    parts += [f"missing required parameter(s): {', '.join(missing)}"] if missing else []
    return f"{spec.name}: {'; '.join(parts)}. Accepted parameters: {accepted}."


def _os_error_output(tool_name: str, error: OSError) -> ToolOutput:
    reason = _OS_ERROR_REASONS.get(error.errno or 0, "os_error")
    detail = error.strerror or str(error)
    # Workspace files are opened by name relative to a directory fd, so a relative filename is
    # the agent's own; an absolute one would be a host path and is left out.
    name = error.filename
    where = f" ({name})" if isinstance(name, str) and not name.startswith("/") else ""
    return ToolOutput.error(reason, f"{tool_name} failed: {detail}{where}")


def _cap(result: ToolOutput, limit: int) -> ToolOutput:
    if len(result.output) <= limit:
        return result
    text, cut = cap_output(result.output, head=limit // 2, tail=limit - limit // 2)
    return dataclasses.replace(
        result, output=text, truncated=True, truncated_chars=result.truncated_chars + cut
    )
