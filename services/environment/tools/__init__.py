"""The agent's tools. Importing this package registers every tool in `TOOLS`.

from etude.environment.tools import TOOLS, tool_catalog, tool_specs

parse_tool_calls(turn, tools=tools_by_name(tool_specs()))
result = await TOOLS[call.name].function(ctx, **call.arguments)  # always a ToolOutput

`tool_catalog()` is what the environment's ListTools serves: the rollout renders its system
prompt from it (etude.rollout.prompt) instead of importing this package.
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
from etude.environment.types import ToolCatalog, ToolDescription

__all__ = ["TOOLS", "Tool", "tool_catalog", "tool_specs"]


def tool_specs() -> list[ToolSpec]:
    """The specs the XML tool-call parser checks calls against."""
    return [registered.spec for registered in TOOLS.values()]


PATH_RULES = (
    "Paths are relative to the workspace root (the terminal starts there, at /workspace). "
    "Absolute paths, '..' above the root and symlinks that lead outside are refused."
)


def tool_catalog() -> ToolCatalog:
    """Every tool as the policy is told about it, in registration order."""
    return ToolCatalog(tuple(_description(t) for t in TOOLS.values()), PATH_RULES)


def _description(registered: Tool) -> ToolDescription:
    required = tuple(p for p in registered.parameters if p in registered.spec.required)
    optional = tuple(p for p in registered.parameters if p not in registered.spec.required)
    return ToolDescription(registered.name, registered.description, required, optional)
