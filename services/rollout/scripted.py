"""A scripted solver: plays the policy's part from a task's known fix, for SFT demonstrations.

The script makes a careful engineer's moves on a small bug, in four short turns:

1. one parallel batch of reads: `grep` for the function that holds the bug (its definition
   and callers) and `read_file` on a narrow window around each changed span;
2. `edit_file`, one call per hunk of the fix, in order;
3. a smoke check that the changed modules still import (the hidden tests are not there);
4. `submit`.

Each turn is one line of prose followed by the rendered calls. The turns depend on the task
alone, so a task always gives the same demonstration; results are only checked for failures,
since a demonstration with a failed call would teach the failure.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from pathlib import Path

from etude.common.toolcalls import ToolCall, render_tool_calls
from etude.environment.batch import ExecutedCall
from etude.tasks.materialize import BUNDLED_PREFIX, PROJECTS_DIR
from etude.tasks.task import Task

# Lines shown either side of a changed span: enough to see the code around it, few enough
# that the episode fits the policy's context next to the system prompt.
READ_MARGIN = 10
GREP_MAX_RESULTS = 10

_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_SCOPE = re.compile(r"^(\s*)(?:async\s+def|def|class)\s+([A-Za-z_]\w*)")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_MODULE_PATH = re.compile(r"[A-Za-z_]\w*(?:/[A-Za-z_]\w*)*\.py")
# The synthesizer's mutation kinds, as someone reading the code would name the bug.
_DIAGNOSES = {
    "boolean_swap": "`and` and `or` are mixed up",
    "comparison_swap": "the comparison is inverted",
    "dropped_statement": "a statement is missing",
    "negated_condition": "the condition is negated",
    "off_by_one": "a value is off by one",
    "swapped_arguments": "two arguments are swapped",
    "wrong_variable": "the wrong variable is used",
}


class ScriptError(ValueError):
    """The task's fix cannot be played as a script (no gold patch, a created or deleted file,
    a patch that does not match the repository), or a scripted call failed."""


@dataclass(frozen=True, slots=True)
class Hunk:
    path: str
    old_start: int
    new_start: int
    lines: tuple[tuple[str, str], ...]
    """(tag, text with its newline) per line; the tag is ' ', '-' or '+'."""

    def side(self, tags: str) -> list[str]:
        return [text for tag, text in self.lines if tag in tags]

    def changed(self, tags: str) -> list[str]:
        """This side's lines from the first change to the last, context around them left out."""
        marks = [i for i, (tag, _) in enumerate(self.lines) if tag != " "]
        return [t for tag, t in self.lines[marks[0] : marks[-1] + 1] if tag in tags]

    @property
    def first_changed(self) -> int:
        """Line number in the old file of the first change (for an insertion, the line after)."""
        lead = next(i for i, (tag, _) in enumerate(self.lines) if tag != " ")
        return self.old_start + lead


def parse_patch(patch: str) -> list[Hunk]:
    """The hunks of a git-style unified diff, in order. Raises ScriptError for a patch that
    creates or deletes a file, which edit_file cannot script."""
    found: list[tuple[str, int, int, list[tuple[str, str]]]] = []
    path, old_left, new_left = "", 0, 0
    for line in _split_lines(patch):
        if line.startswith("\\") and found and found[-1][3]:
            tag, text = found[-1][3][-1]  # "\ No newline at end of file": the line before
            found[-1][3][-1] = (tag, text.removesuffix("\n"))
        elif old_left > 0 or new_left > 0:  # inside a hunk, whose header counts its lines
            tag, text = (line[0], line[1:]) if line != "\n" else (" ", "\n")
            found[-1][3].append((tag, text))
            old_left -= tag in " -"
            new_left -= tag in " +"
        elif line.startswith(("--- /dev/null", "+++ /dev/null")):
            raise ScriptError("the fix creates or deletes a file")
        elif line.startswith("+++ "):
            path = line[4:].rstrip("\n").removeprefix("b/")
        elif header := _HUNK_HEADER.match(line):
            old_left = int(header[2] or 1)
            new_left = int(header[4] or 1)
            found.append((path, int(header[1]), int(header[3]), []))
    hunks = [Hunk(p, old, new, tuple(lines)) for p, old, new, lines in found]
    return [h for h in hunks if any(tag != " " for tag, _ in h.lines)]


def _split_lines(text: str) -> list[str]:
    """Lines with their newlines, split at '\n' only: `str.splitlines` also splits at form
    feeds and other separators that can stand inside a line of code."""
    pieces = text.split("\n")
    return [piece + "\n" for piece in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])


class ScriptedSolver:
    """Plays the policy's part for one task, from its known fix.

    The buggy files are read from `repository`, the task's materialized repository. Without
    one, a bundled etude-mini task's files come from its project (which holds the fixed
    code) with the gold patch taken back.
    """

    def __init__(self, task: Task, repository: Path | None = None) -> None:
        if not task.gold_patch.strip():
            raise ScriptError(f"{task.id}: no gold patch")
        hunks = parse_patch(task.gold_patch)
        if not hunks:
            raise ScriptError(f"{task.id}: the gold patch changes nothing")
        if any(not h.side(" -") for h in hunks):  # edit_file needs some old text to replace
            raise ScriptError(f"{task.id}: the gold patch writes into an empty file")
        by_path = {h.path: [g for g in hunks if g.path == h.path] for h in hunks}
        sources = {p: _buggy_lines(task, p, hs, repository) for p, hs in by_path.items()}
        edits = [e for p, hs in by_path.items() for e in _edits(hs, sources[p])]
        scope = _scope(hunks[0], sources[hunks[0].path])
        self._turns = _script(task, scope, edits, sources)
        self._next = 0

    @property
    def done(self) -> bool:
        """True once the turn that submits has been played."""
        return self._next == len(self._turns)

    def next_turn(self, results: list[ExecutedCall] | None) -> str:
        """The next assistant turn; `results` are those of the previous turn's calls (None
        before the first turn). Raises ScriptError when one of them failed."""
        if (results is None) != (self._next == 0):
            raise ValueError("every turn but the first needs the previous turn's results")
        if self.done:
            raise ScriptError("the script has already submitted")
        for result in results or ():
            if result.exit_code != 0:
                raise ScriptError(f"{result.call_id} {result.name} failed: {result.output[:300]}")
        prose, calls = self._turns[self._next]
        self._next += 1
        numbered = [ToolCall(c.name, c.arguments, f"call_{i}") for i, c in enumerate(calls)]
        return f"{prose}\n{render_tool_calls(numbered)}"


def _buggy_lines(task: Task, path: str, hunks: list[Hunk], repository: Path | None) -> list[str]:
    if repository is not None:
        lines = _read_lines(repository / path)
    elif task.repo.startswith(BUNDLED_PREFIX):
        lines = _read_lines(PROJECTS_DIR / task.repo.removeprefix(BUNDLED_PREFIX) / path)
        for hunk in reversed(hunks):  # from the end, so earlier line numbers stay valid
            start, fixed = hunk.new_start - 1, hunk.side(" +")
            if lines[start : start + len(fixed)] != fixed:
                raise ScriptError(f"{task.id}: the gold patch does not match the bundled {path}")
            lines[start : start + len(fixed)] = hunk.side(" -")
    else:
        raise ScriptError(f"{task.id}: scripting it needs its repository")
    for hunk in hunks:
        buggy = hunk.side(" -")
        if lines[hunk.old_start - 1 : hunk.old_start - 1 + len(buggy)] != buggy:
            raise ScriptError(f"{task.id}: the gold patch does not match {path}")
    return lines


def _read_lines(file: Path) -> list[str]:
    if not file.is_file():
        raise ScriptError(f"{file} is not a file")
    # Bytes, not text mode: newlines stay as they are, as edit_file will see them.
    return _split_lines(file.read_bytes().decode("utf-8", "surrogateescape"))


@dataclass(frozen=True, slots=True)
class _Edit:
    path: str
    old: str
    new: str
    first: int
    """Line number in the buggy file of the first changed line."""
    last: int


def _edits(hunks: list[Hunk], buggy: list[str]) -> list[_Edit]:
    """One exact-string edit per hunk, widened line by line around the change until its
    old_string occurs once in the file as the edits before it leave it."""
    current, shift, edits = list(buggy), 0, []
    for hunk in hunks:
        removed, added = hunk.changed(" -"), hunk.changed(" +")
        a = hunk.first_changed - 1 + shift
        b = a + len(removed)
        text = "".join(current)
        before = after = 0
        while True:
            old = "".join(current[a - before : b + after])
            new = "".join(current[a - before : a] + added + current[b : b + after])
            if old.endswith("\n") and new.endswith("\n"):  # quote lines as read_file shows them
                old, new = old[:-1], new[:-1]
            if old.strip() and text.count(old) == 1:
                break
            can_before, can_after = a - before > 0, b + after < len(current)
            if not (can_before or can_after):
                raise ScriptError(f"{hunk.path}: no unique text around line {hunk.first_changed}")
            # Alternate sides, starting above, as a person quotes the lines around a change.
            if can_before and (before <= after or not can_after):
                before += 1
            else:
                after += 1
        first = hunk.first_changed
        edits.append(_Edit(hunk.path, old, new, first, first + max(len(removed), 1) - 1))
        current[a:b] = added
        shift += len(added) - len(removed)
    return edits


def _scope(hunk: Hunk, lines: list[str]) -> str:
    """The function around the hunk's first change (a dunder method's class instead:
    `__init__` says little), else the first name on the changed line, else the module."""
    removed = hunk.changed("-")
    focus = (removed or hunk.changed("+"))[0]
    indent = len(focus) - len(focus.lstrip())
    own = _SCOPE.match(focus) if removed else None  # a changed `def` line is its own scope
    for found in [own, *map(_SCOPE.match, reversed(lines[: hunk.first_changed - 1]))]:
        if found and (found is own or len(found[1]) < indent):
            if not (found[2].startswith("__") and found[2].endswith("__")):
                return found[2]
            indent = len(found[1])
    names = [n for n in _IDENTIFIER.findall(focus) if not keyword.iskeyword(n)]
    return names[0] if names else Path(hunk.path).stem


def _module(path: str) -> str | None:
    """The dotted name of a module inside a package; a top-level file may be a script
    (setup.py), which importing would run."""
    if "/" not in path or not _MODULE_PATH.fullmatch(path):
        return None
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _smoke_command(paths: list[str]) -> str | None:
    """Import the changed modules, byte-compile other changed Python; None if there is none."""
    modules = [m for m in map(_module, paths) if m]
    scripts = [p for p in paths if p.endswith(".py") and not _module(p)]
    commands = [f"python -c \"import {', '.join(modules)}; print('ok')\""] if modules else []
    commands += [f"python -m py_compile {' '.join(scripts)}"] if scripts else []
    return " && ".join(commands) or None


def _reads(edits: list[_Edit], sources: dict[str, list[str]]) -> list[ToolCall]:
    """A window around each changed span; windows that touch are read as one."""
    windows: list[tuple[str, int, int]] = []
    for edit in edits:
        low = max(1, edit.first - READ_MARGIN)
        high = min(len(sources[edit.path]), edit.last + READ_MARGIN)
        if windows and windows[-1][0] == edit.path and low <= windows[-1][2] + 1:
            low = windows.pop()[1]
        windows.append((edit.path, low, high))
    return [
        ToolCall("read_file", {"path": path, "start_line": str(low), "end_line": str(high)})
        for path, low, high in windows
    ]


def _script(
    task: Task, scope: str, edits: list[_Edit], sources: dict[str, list[str]]
) -> list[tuple[str, list[ToolCall]]]:
    first = edits[0]
    # The package folder keeps the search off docs and configuration.
    folder = first.path.split("/")[0] if "/" in first.path else "."
    grep = ToolCall(
        "grep",
        {"pattern": rf"\b{scope}\b", "path": folder, "glob": "*.py",
         "max_results": str(GREP_MAX_RESULTS)},
    )  # fmt: skip
    fixes = [
        ToolCall("edit_file", {"path": e.path, "old_string": e.old, "new_string": e.new})
        for e in edits
    ]
    smoke = _smoke_command(list(sources))
    diagnosis = _DIAGNOSES.get(str(task.metadata.get("mutation", "")))
    found = f"In `{scope}`, {diagnosis}" if diagnosis else f"The bug is in `{scope}`"
    message = f"Fixed `{scope}` in {first.path}" + (f": {diagnosis}." if diagnosis else ".")
    look = (
        f"The failing tests point at `{scope}`; I'll search for it and read "
        f"{first.path} around line {first.first}.",
        [grep, *_reads(edits, sources)],
    )
    check = (
        "The tests are not in the repository, so I check that the code still imports.",
        [ToolCall("run_terminal_command", {"command": smoke})] if smoke else [],
    )
    done = ("The fix is in place.", [ToolCall("submit", {"message": message})])
    return [turn for turn in (look, (f"{found}; fixing it.", fixes), check, done) if turn[1]]
