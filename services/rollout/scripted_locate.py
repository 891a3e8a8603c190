"""The scripted solver of etude-locate tasks (etude.tasks.locate), for SFT demonstrations.

It answers from what the agent sees, as the agent must, in one of two styles, so SFT leaves
RL a choice to make:

- `answer` (variant 0): read the answer off the instruction's module listing, in one turn
  (edit `ANSWER.txt`, submit). Cheap, but a small policy often picks the wrong line of a
  listing it has not seen before.
- `search` (variant 1, and every odd variant): grep for the top-level definition first, then
  answer with the path of the hit in the next turn. One turn longer, and right whenever the
  policy copies the path from the result.
"""

from __future__ import annotations

import re

from etude.common.toolcalls import ToolCall, render_tool_calls
from etude.environment.types import ExecutedCall
from etude.rollout.scripted_patch import ScriptError
from etude.rollout.scripted_search import grep_hits
from etude.tasks.locate import ANSWER_FILE, PLACEHOLDER
from etude.tasks.task import Task

_QUESTION = re.compile(r"defines `([^`]+)`\?")
_LISTED = re.compile(r"^- `([^`]+)`: (.*)$", re.M)
STYLES = ("answer", "search")


def definition_pattern(name: str) -> str:
    """The grep pattern of a top-level definition of `name`."""
    return rf"^(class|def) {name}\b"


class LocateSolver:
    def __init__(self, task: Task, variant: int = 0) -> None:
        self.task = task
        self.style = STYLES[variant % len(STYLES)]
        self.done = False
        question = _QUESTION.search(task.instruction)
        if question is None:
            raise ScriptError(f"{task.id}: the instruction asks about no name")
        self.name = question[1]
        self.listed_path = ""
        if self.style == "answer":  # only a listing with names answers without a search
            owners = [path for path, names in _LISTED.findall(task.instruction)
                      if self.name in names.split(", ")]  # fmt: skip
            if len(owners) != 1:
                raise ScriptError(f"{task.id}: {len(owners)} listed modules define {self.name}")
            self.listed_path = owners[0]

    @property
    def label(self) -> str:
        return f"locate-{self.style}"

    def next_turn(self, results: list[ExecutedCall] | None) -> str:
        if self.done:
            raise ScriptError(f"{self.task.id}: the answer was submitted already")
        if self.style == "search" and results is None:  # the first turn searches
            call = ToolCall(id="call_0", name="grep",
                            arguments={"pattern": definition_pattern(self.name)})  # fmt: skip
            return f"Searching for the definition of `{self.name}`.\n{render_tool_calls([call])}"
        path = self.listed_path if self.style == "answer" else self._hit(results)
        self.done = True
        calls = [
            ToolCall(id="call_0", name="edit_file", arguments={
                "path": ANSWER_FILE, "old_string": PLACEHOLDER, "new_string": path,
            }),
            ToolCall(id="call_1", name="submit", arguments={"message": "Answered."}),
        ]  # fmt: skip
        return f"`{self.name}` is defined in `{path}`.\n{render_tool_calls(calls)}"

    def _hit(self, results: list[ExecutedCall] | None) -> str:
        """The path of the grep's only hit (what the agent was shown)."""
        files = {path for path, _ in grep_hits(results[0].result.output)} if results else set()
        if len(files) != 1:
            raise ScriptError(f"{self.task.id}: the definition grep found {len(files)} files")
        return files.pop()
