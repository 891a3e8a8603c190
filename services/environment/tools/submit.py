"""`submit`: the agent says it is done; the rollout ends after the current batch."""

from __future__ import annotations

from etude.environment.tools.base import ToolContext, ToolOutput, tool


@tool("submit", read_only=False, required=("message",))
async def submit(ctx: ToolContext, message: str) -> ToolOutput:
    """Finish the task: call this once the change is complete (and tested). `message`
    summarises what was done. No further tool calls run after it."""
    return ToolOutput(f"Submitted: {message.strip()}", ends_episode=True)
