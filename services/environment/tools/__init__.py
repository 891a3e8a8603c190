"""The agent's tools. Importing this package registers every tool in `TOOLS`.

from etude.environment.tools import TOOLS, describe_tools, tool_specs

parse_tool_calls(turn, tools=tools_by_name(tool_specs()))
result = await TOOLS[call.name].function(ctx, **call.arguments)  # always a ToolOutput
"""

from __future__ import annotations

from etude.common.toolcalls import ToolSpec

# Each import registers its tools with `@tool`; the order is the order the agent sees them in.
# isort: off
from etude.environment.tools import (  # noqa: F401
    read_file,
    list_dir,
    grep,
    file_search,
    codebase_search,
    edit,
    run_terminal_command,
    submit,
)

# isort: on
from etude.environment.tools.base import TOOLS, Tool

__all__ = ["TOOLS", "Tool", "describe_tools", "tool_specs"]


def tool_specs() -> list[ToolSpec]:
    """The specs the XML tool-call parser checks calls against."""
    return [registered.spec for registered in TOOLS.values()]


PATH_RULES = (
    "Paths are relative to the workspace root (the terminal starts there, at /workspace). "
    "Absolute paths, '..' above the root and symlinks that lead outside are refused."
)


def describe_tools() -> str:
    """The tools as text for the system prompt: name, parameters and description of each."""
    return "\n\n".join([PATH_RULES, *(_describe(registered) for registered in TOOLS.values())])


def _describe(registered: Tool) -> str:
    parameters = ", ".join(
        name if name in registered.spec.required else f"{name} (optional)"
        for name in registered.parameters
    )
    return f"{registered.name}({parameters})\n{registered.description}"
