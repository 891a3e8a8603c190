"""The scripted solver of etude-locate tasks (etude.tasks.locate), for SFT demonstrations.

It answers from the instruction alone, as the agent must: the name asked about, and the
line of the module listing that names it. One turn: edit `ANSWER`, submit.
"""

from __future__ import annotations

import re

from etude.common.toolcalls import ToolCall, render_tool_calls
from etude.environment.batch import ExecutedCall
from etude.rollout.scripted_patch import ScriptError
from etude.tasks.locate import ANSWER_FILE, PLACEHOLDER
from etude.tasks.task import Task

_QUESTION = re.compile(r"defines `([^`]+)`\?")
_LISTED = re.compile(r"^- `([^`]+)`: (.*)$", re.M)


class LocateSolver:
    label = "locate: edit, submit"
    """The one way it works (the bug-fix solver's styles have nothing to vary here)."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.done = False
        question = _QUESTION.search(task.instruction)
        if question is None:
            raise ScriptError(f"{task.id}: the instruction asks about no name")
        self.name = question[1]
        owners = [path for path, names in _LISTED.findall(task.instruction)
                  if self.name in names.split(", ")]  # fmt: skip
        if len(owners) != 1:
            raise ScriptError(f"{task.id}: {len(owners)} listed modules define {self.name}")
        self.path = owners[0]

    def next_turn(self, results: list[ExecutedCall] | None) -> str:
        if self.done:
            raise ScriptError(f"{self.task.id}: the answer was submitted already")
        self.done = True
        found = f"`{self.name}` is defined in `{self.path}`."
        calls = [
            ToolCall(id="call_0", name="edit_file", arguments={
                "path": ANSWER_FILE, "old_string": PLACEHOLDER, "new_string": self.path,
            }),
            ToolCall(id="call_1", name="submit", arguments={"message": "Answered."}),
        ]  # fmt: skip
        return f"{found}\n{render_tool_calls(calls)}"
