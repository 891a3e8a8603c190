"""`run_terminal_command`: run a shell command in the session's sandbox.

The sandbox (another module) owns the shell, the kill on timeout and the output cap; this tool
checks the arguments and turns the outcome into text the agent reads: output, then exit code.
"""

from __future__ import annotations

from etude.environment.tools.arguments import parse_number, require_text
from etude.environment.tools.base import CommandOutcome, ToolContext, ToolOutput, tool

DEFAULT_TIMEOUT_S = 60
MAX_TIMEOUT_S = 600
# The exit code reported when the sandbox gives none for a killed command (as `timeout` does).
TIMEOUT_EXIT_CODE = 124


@tool("run_terminal_command", read_only=False, required=("command",), optional=("timeout_s",))
async def run_terminal_command(
    ctx: ToolContext, command: str, timeout_s: str | None = None
) -> ToolOutput:
    """Run a bash command in the workspace (one persistent shell: `cd` and exported variables
    carry over between calls). `timeout_s` (default 60, at most 600) kills the command when it
    runs longer. Returns combined stdout and stderr (long output keeps its start and end) and
    the exit code."""
    text = require_text("command", command)
    # The session manager may set other bounds through ctx.limits.
    default = ctx.limits.get("default_timeout_s", DEFAULT_TIMEOUT_S)
    longest = ctx.limits.get("max_timeout_s", MAX_TIMEOUT_S)
    seconds = parse_number("timeout_s", timeout_s, default=default, minimum=1, maximum=longest)
    outcome = await ctx.shell.run(text, seconds)
    return _render(outcome, seconds)


def _render(outcome: CommandOutcome, seconds: float) -> ToolOutput:
    output = outcome.output.rstrip("\n")
    prefix = f"{output}\n" if output else ""
    truncated = outcome.truncated_chars > 0
    if outcome.timed_out:
        return ToolOutput(
            output=f"{prefix}[command killed after {seconds:g} s: timeout]",
            exit_code=outcome.exit_code or TIMEOUT_EXIT_CODE,
            truncated=truncated,
            truncated_chars=outcome.truncated_chars,
            error_reason="timeout",
        )
    # A failing command is a normal result, not a tool failure: exit code set, no error_reason.
    return ToolOutput(
        output=f"{prefix}[exit code: {outcome.exit_code}]",
        exit_code=outcome.exit_code,
        truncated=truncated,
        truncated_chars=outcome.truncated_chars,
    )
