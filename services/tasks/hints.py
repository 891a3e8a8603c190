"""Hint tiers: how much of the fix a task's instruction gives away.

A small policy cannot find a bug from a problem statement alone, so a run can start with
the instruction saying more and take the hints away as the policy improves (the curriculum,
etude.rollout.client.Curriculum):

- tier 0: the problem statement;
- tier 1: also the first failing test's traceback (a few frames, the error lines);
- tier 2: also the file and the function to fix;
- tier 3: also that function's source, numbered exactly as `read_file` prints it, so an
  `edit_file` call can quote it (the runner pairs this tier with a short system prompt).

A task family whose tiers mean something else writes its instruction at every tier into
`metadata["instructions"]` (etude-locate: tier 3 lists the modules with their names, tiers 1
and 2 the modules alone, tier 0 only asks).

The hints are computed once per task by `etude tasks hints` (the traceback comes from
running the hidden tests on the buggy repository, see etude.tasks.tracebacks) and stored in
`metadata["hints"]`; rendering a tier never runs anything.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etude.common import python_ast
from etude.common.tool_text import numbered_line
from etude.tasks.task import Task

HINT_TIERS = (0, 1, 2, 3)

_FILE = re.compile(r"^diff --git a/(\S+) b/(\S+)$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")


class HintError(ValueError):
    """A task whose hints cannot be computed or rendered; the message names the task."""


@dataclass(frozen=True, slots=True)
class Hints:
    traceback: str
    """Tier 1: the first failing test's traceback excerpt ("" when unknown)."""
    path: str
    """Tier 2: repository path of the file to fix, e.g. `calcparse/evaluator.py`."""
    function: str
    """Tier 2: the function (or `Class.method`) to fix."""
    source: str
    """Tier 3: that function's source in the buggy repository, numbered as read_file prints it."""
    source_start: int
    """Its first line number."""
    source_end: int
    """Its last line number."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Hints:
        names = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(data, dict) or set(data) != names:
            raise ValueError(f"hints need exactly the keys {sorted(names)}")
        for name in ("source_start", "source_end"):
            if not isinstance(data[name], int) or data[name] < 1:
                raise ValueError(f"hints: {name} must be a positive line number")
        if any(not isinstance(data[n], str) for n in ("traceback", "path", "function", "source")):
            raise ValueError("hints: traceback, path, function and source must be text")
        return cls(**data)


def task_hints(task: Task) -> Hints:
    """The task's stored hints (`metadata["hints"]`, written by `etude tasks hints`)."""
    stored = task.metadata.get("hints")
    if stored is None:
        raise HintError(f"task {task.id} has no hints in its metadata; run `etude tasks hints`")
    try:
        return Hints.from_dict(stored)
    except ValueError as error:
        raise HintError(f"task {task.id}: {error}") from None


def instruction_at_tier(task: Task, tier: int) -> str:
    """The task's instruction with the hints of `tier` appended, or, for a task family that
    writes its own (etude-locate), its instruction at that tier (`metadata["instructions"]`,
    tier → text)."""
    if tier not in HINT_TIERS:
        raise HintError(f"hint tier {tier} is not one of {HINT_TIERS}")
    if (written := task.metadata.get("instructions")) is not None:
        if str(tier) not in written:
            raise HintError(f"task {task.id} has no instruction at hint tier {tier}")
        return written[str(tier)]
    if current := task.metadata.get("hint_tier", 0):  # its instruction holds hints already
        if current == tier:  # written at this tier
            return task.instruction
        raise HintError(f"task {task.id} is at hint tier {current} already, not {tier}")
    if tier == 0:
        return task.instruction
    hints = task_hints(task)
    if not hints.traceback:
        raise HintError(f"task {task.id} has no traceback hint, needed from tier 1 on")
    first = task.fail_to_pass[0] if task.fail_to_pass else "the first failing test"
    parts = [task.instruction, f"`{first}` fails like this:\n\n```\n{hints.traceback}\n```"]
    if tier >= 2:
        parts.append(f"The bug is in `{hints.path}`, in `{hints.function}`.")
    if tier >= 3:
        parts.append(
            f"`{hints.path}` lines {hints.source_start}-{hints.source_end}, as read_file shows "
            f"them:\n\n```\n{hints.source}\n```\n\n"
            "Fix the bug with edit_file (old_string is the code without the line numbers), "
            "then call submit."
        )
    return "\n\n".join(parts)


def at_tier(task: Task, tier: int) -> Task:
    """The task as an episode at `tier` sees it: instruction replaced, and
    `metadata["hint_tier"]` set; the tier the task is at returns the task itself."""
    if tier == task.metadata.get("hint_tier", 0):
        return task
    return dataclasses.replace(
        task,
        instruction=instruction_at_tier(task, tier),
        metadata={**task.metadata, "hint_tier": tier},
    )


def hint_problem(task: Task, tier: int) -> str:
    """Why the task cannot be shown at `tier` ("" when it can)."""
    try:
        instruction_at_tier(task, tier)
    except HintError as error:
        return str(error)
    return ""


# -- computing the location hints ----------------------------------------------------------


def locate(task: Task, repository: Path, traceback: str) -> Hints:
    """The hints of `task` given its buggy repository (at its base commit) and the
    traceback excerpt: the innermost function around the first line the fix changes."""
    patch, side = (task.gold_patch, "old") if task.gold_patch.strip() else (
        task.metadata.get("bug_patch", ""), "new"
    )  # fmt: skip
    found = first_changed_line(patch, side)
    if found is None:
        raise HintError(f"task {task.id}: neither a gold patch nor a bug patch changes a file")
    path, line = found
    file = repository / path
    if not file.is_file():
        raise HintError(f"task {task.id}: {path} is not a file of the buggy repository")
    data = file.read_bytes()
    try:
        tree = python_ast.parse(data, filename=path)
    except (SyntaxError, ValueError) as error:
        raise HintError(f"task {task.id}: {path} does not parse: {error}") from None
    lines = _file_lines(data)
    if line > len(lines):
        raise HintError(f"task {task.id}: the patch changes {path}:{line}, past its end")
    # A line inserted after a trailing comment follows a line no function's span holds:
    # the code before the comment says where it belongs, and the source shown runs on to
    # the comment, so the place of the insertion is in it.
    code = line
    while code > 1 and (not lines[code - 1].strip() or lines[code - 1].lstrip().startswith("#")):
        code -= 1
    scope = innermost_function(tree, code) or named_assignment(tree, code)
    if scope is None:
        raise HintError(f"task {task.id}: {path}:{code} is in no function or named assignment")
    name, start, end = scope
    end = max(end, line)
    source = "\n".join(numbered_line(n, lines[n - 1]) for n in range(start, end + 1))
    return Hints(traceback, path, name, source, start, end)


def first_changed_line(patch: str, side: str) -> tuple[str, int] | None:
    """(path, line) of the first change of `patch` on its `side` (`old`: the file before,
    `new`: after). A pure insertion counts as changing the line it follows, which is still
    inside the function the inserted line belongs to."""
    path = None
    number = 0
    removed, added = ("-", "+") if side == "old" else ("+", "-")
    for line in patch.splitlines():
        if match := _FILE.match(line):
            path = match.group(2) if side == "new" else match.group(1)
            number = 0
        elif match := _HUNK.match(line):
            number = int(match.group(1 if side == "old" else 2))
        elif number and path:
            if line.startswith(removed):
                return path, number
            if line.startswith(added):
                return path, max(number - 1, 1)
            if line.startswith(" "):
                number += 1
    return None


def innermost_function(tree: ast.Module, line: int) -> tuple[str, int, int] | None:
    """(qualified name, first line, last line) of the innermost function whose span
    (decorators included) holds `line`; a method is named `Class.method`."""
    best = None

    def visit(node: ast.AST, prefix: str) -> None:
        nonlocal best
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                end = child.end_lineno or child.lineno
                if not start <= line <= end:
                    continue
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    best = (name, start, end)
                visit(child, f"{name}.")
            else:  # functions inside `if`, `try`, … blocks
                visit(child, prefix)

    visit(tree, "")
    return best


def named_assignment(tree: ast.Module, line: int) -> tuple[str, int, int] | None:
    """(name, first line, last line) of a module- or class-level assignment that holds
    `line` (a constant such as `LIMIT = 30`), named `NAME` or `Class.NAME`."""

    def search(body: list[ast.stmt], prefix: str) -> tuple[str, int, int] | None:
        for node in body:
            end = node.end_lineno or node.lineno
            if not node.lineno <= line <= end:
                continue
            if isinstance(node, ast.ClassDef):
                return search(node.body, f"{prefix}{node.name}.")
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, ast.AnnAssign | ast.AugAssign) else []
            )  # fmt: skip
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            return (f"{prefix}{names[0]}", node.lineno, end) if names else None
        return None

    return search(tree.body, "")


def _file_lines(data: bytes) -> list[str]:
    """Lines as read_file decodes them (split at `\\n`, one trailing `\\r` dropped)."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [raw.decode("utf-8", "replace").removesuffix("\r") for raw in lines]
