"""What the policy reads: the system prompt (tools, the XML call format, the rules) and the
ChatML turns around the task and the tool results.

The short system prompt is for hint tier 3 (etude.tasks.hints), where the instruction
already shows the function to fix with its line numbers: the episode is one edit and a
submit, so the prompt documents only those two tools (and any a run adds,
`rollout.short_prompt_tools`) and leaves the budget to the task.

The tools' documentation is rendered from what the environment reports (its ListTools, a
`ToolCatalog`), not from a local import of its tools: a worker's prompt documents exactly
the tools of the environment that runs its calls. The text is byte for byte what the tools
themselves would give (a test holds the two equal): SFT caches and trained policies
depend on it.
"""

from __future__ import annotations

from etude.common.run_config import RolloutConfig
from etude.common.tool_prompt import describe_tool
from etude.common.toolcalls import ToolCall, render_tool_calls
from etude.environment.types import ToolCatalog, ToolDescription
from etude.model.chat_template import IM_END, IM_START

_EXAMPLE = render_tool_calls([
    ToolCall(id="call_0", name="read_file", arguments={"path": "pkg/module.py"}),
    ToolCall(id="call_1", name="grep", arguments={"pattern": "def parse"}),
])  # fmt: skip

RULES = """\
- Work only through the tools. Write each call as a <tool_call> block, exactly as in the
  example; a malformed call comes back as a <tool_error> block that says what to fix.
- Several calls in one turn form a batch: reads run in parallel, edits and commands run in
  order. Batch independent reads.
- Results come back in the next message, one <tool_result> block per call, in call order.
- Run the tests before you finish. Call submit when the fix is done: that ends the episode and
  hidden tests grade the repository as you leave it. A turn with no tool call also ends it."""


SHORT_TOOLS: tuple[str, ...] = RolloutConfig.model_fields["short_prompt_tools"].default
"""What the short prompt documents unless a run names others: the default of
`rollout.short_prompt_tools`, written once, in the run config."""

_SHORT_EXAMPLE = render_tool_calls([
    ToolCall(id="call_0", name="edit_file", arguments={
        "path": "pkg/module.py",
        "old_string": "    if count < limit:\n        return None",
        "new_string": "    if count <= limit:\n        return None",
    }),
    ToolCall(id="call_1", name="submit", arguments={"message": "Fixed the bound check."}),
])  # fmt: skip

SHORT_RULES = """\
- Write each call as a <tool_call> block, exactly as in the example.
- old_string is the code to change copied from the task without the line numbers and the tab
  before each line, indentation kept; new_string is the fixed code.
- Calls of one turn run in order; submit ends the episode and hidden tests grade the
  repository as you leave it."""


def system_prompt(
    catalog: ToolCatalog, short: bool = False, tools: tuple[str, ...] = SHORT_TOOLS
) -> str:
    """The full prompt documents every tool of `catalog`; the short one (hint tier 3) only
    `tools`."""
    if short:
        by_name = {tool.name: tool for tool in catalog.tools}
        unknown = [name for name in tools if name not in by_name]
        if unknown:
            raise ValueError(f"no such tools for the short prompt: {', '.join(unknown)}")
        documented = _document(catalog.path_rules, [by_name[name] for name in tools])
        return (
            "You are a software engineer fixing a bug in the repository in /workspace. The task "
            "shows the code to fix: change it with edit_file, then call submit.\n\n"
            f"# Tools\n\n{documented}\n\n# Calling tools\n\n{_SHORT_EXAMPLE}\n\n"
            f"# Rules\n\n{SHORT_RULES}"
        )
    documented = _document(catalog.path_rules, catalog.tools)
    return (
        "You are a software engineer fixing a bug in the repository in /workspace.\n\n"
        f"# Tools\n\n{documented}\n\n# Calling tools\n\n{_EXAMPLE}\n\n# Rules\n\n{RULES}"
    )


def _document(path_rules: str, tools) -> str:
    """The path rules, then each tool: its name, parameters (the optional ones marked) and
    description."""
    return "\n\n".join([path_rules, *(_describe(tool) for tool in tools)])


def _describe(tool: ToolDescription) -> str:
    return describe_tool(tool.name, tool.required, tool.optional, tool.description)


def episode_start(instruction: str, system: str) -> str:
    """The episode's first tokens: system prompt, the task, and the assistant's turn opening."""
    return (
        f"{IM_START}system\n{system}{IM_END}\n"
        f"{IM_START}user\n{instruction}{IM_END}\n{IM_START}assistant\n"
    )


def observation(results: str, turn_closed: bool = False) -> str:
    """Closes the assistant's turn (unless the policy already ended it with IM_END), hands
    back the tool results, opens the next turn."""
    close = "" if turn_closed else IM_END
    return f"{close}\n{IM_START}user\n{results}{IM_END}\n{IM_START}assistant\n"
