"""What the scripted solver knows of a task's fix: the gold patch as exact-string edits, the
buggy repository's files, and the function each edit lands in.

This is knowledge the agent does not have. The solver uses it only to choose among moves the
agent could justify from what it has seen (etude.rollout.scripted_sight); none of it is ever
written into a tool argument unless the agent has been shown it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from etude.common import python_ast
from etude.tasks.materialize import BUNDLED_PREFIX, PROJECTS_DIR
from etude.tasks.synth.synthesize import load_project
from etude.tasks.task import Task

_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
# The bytes a search through the workspace may show: text files only, .git never.
_BINARY_SNIFF_BYTES = 8 * 1024


class ScriptError(ValueError):
    """The task cannot be played as an honest script: no usable gold patch, a patch that does
    not match the repository, no way to find the fix's location from what the agent sees, or
    a scripted call that failed."""


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
    for line in split_lines(patch):
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


def split_lines(text: str) -> list[str]:
    """Lines with their newlines, split at '\n' only: `str.splitlines` also splits at form
    feeds and other separators that can stand inside a line of code."""
    pieces = text.split("\n")
    return [piece + "\n" for piece in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])


@dataclass(frozen=True, slots=True)
class Scope:
    """The innermost function (or class, outside any function) around a line; the module
    when there is none."""

    name: str
    """`name` or `Class.name`, as a hint names a method."""
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class Edit:
    path: str
    old: str
    new: str
    first: int
    """Line number in the buggy file of the first line `old` covers."""
    last: int
    changed: int
    """Line number in the buggy file of the first changed line."""
    scope: Scope


class Repository:
    """The buggy repository's text files as the workspace holds them (path → lines), in the
    order the workspace tools walk them: depth first, names in byte order."""

    def __init__(self, files: dict[str, list[str]]) -> None:
        self.files = dict(sorted(files.items(), key=lambda item: _walk_key(item[0])))

    @classmethod
    def from_directory(cls, root: Path) -> Repository:
        files = {}
        for file in root.rglob("*"):
            relative = file.relative_to(root)
            if ".git" in relative.parts or not file.is_file() or file.is_symlink():
                continue
            data = file.read_bytes()
            if b"\0" not in data[:_BINARY_SNIFF_BYTES]:
                files[relative.as_posix()] = split_lines(data.decode("utf-8", "surrogateescape"))
        return cls(files)

    @classmethod
    def for_task(cls, task: Task, hunks: list[Hunk], root: Path | None) -> Repository:
        """From the materialized repository `root`; without one, a bundled task's project
        (which holds the fixed code) without its tests, the gold patch taken back."""
        if root is not None:
            repository = cls.from_directory(root)
        elif task.repo.startswith(BUNDLED_PREFIX):
            name = task.repo.removeprefix(BUNDLED_PREFIX)
            project = load_project(PROJECTS_DIR / name, name)
            tests = set(project.test_files)
            files = {}
            for path in project.files:
                data = (project.root / path).read_bytes()
                if path not in tests and b"\0" not in data[:_BINARY_SNIFF_BYTES]:
                    files[path] = split_lines(data.decode("utf-8", "surrogateescape"))
            for path in {h.path for h in hunks}:
                files[path] = _taken_back(task, path, files, [h for h in hunks if h.path == path])
            repository = cls(files)
        else:
            raise ScriptError(f"{task.id}: scripting it needs its repository")
        for hunk in hunks:
            lines = repository.files.get(hunk.path)
            buggy = hunk.side(" -")
            start = hunk.old_start - 1
            if lines is None or lines[start : start + len(buggy)] != buggy:
                raise ScriptError(f"{task.id}: the gold patch does not match {hunk.path}")
        return repository

    def python_files(self, under: str = ".") -> list[str]:
        prefix = "" if under in ("", ".") else under.rstrip("/") + "/"
        return [p for p in self.files if p.startswith(prefix) and p.endswith(".py")]


def _walk_key(path: str) -> list[bytes]:
    return [part.encode("utf-8", "surrogateescape") for part in path.split("/")]


def _taken_back(task: Task, path: str, files: dict[str, list[str]], hunks: list[Hunk]):
    if path not in files:
        raise ScriptError(f"{task.id}: the bundled project has no {path}")
    lines = list(files[path])
    for hunk in reversed(hunks):  # from the end, so earlier line numbers stay valid
        start, fixed = hunk.new_start - 1, hunk.side(" +")
        if lines[start : start + len(fixed)] != fixed:
            raise ScriptError(f"{task.id}: the gold patch does not match the bundled {path}")
        lines[start : start + len(fixed)] = hunk.side(" -")
    return lines


def plan_edits(task: Task, repository: Repository, hunks: list[Hunk]) -> list[Edit]:
    """One exact-string edit per hunk, widened line by line around the change until its
    old_string occurs once in the file as the edits before it leave it."""
    if not hunks:
        raise ScriptError(f"{task.id}: the gold patch changes nothing")
    if any(not h.side(" -") for h in hunks):  # edit_file needs some old text to replace
        raise ScriptError(f"{task.id}: the gold patch writes into an empty file")
    edits: list[Edit] = []
    for path in dict.fromkeys(h.path for h in hunks):
        buggy = repository.files[path]
        scopes = _scopes(buggy) if path.endswith(".py") else []
        current, shift = list(buggy), 0
        edited: list[tuple[int, int]] = []  # buggy lines changed so far, with the one above
        for hunk in (h for h in hunks if h.path == path):
            removed, added = hunk.changed(" -"), hunk.changed(" +")
            a = hunk.first_changed - 1 + shift
            b = a + len(removed)
            text = "".join(current)
            before = after = 0
            while True:
                old = "".join(current[a - before : b + after])
                new = "".join(current[a - before : a] + added + current[b : b + after])
                if old.endswith("\n") and new.endswith("\n"):  # as read_file shows the lines
                    old, new = old[:-1], new[:-1]
                if old.strip() and text.count(old) == 1:
                    break
                can_before, can_after = a - before > 0, b + after < len(current)
                if not (can_before or can_after):
                    raise ScriptError(f"{path}: no unique text around line {hunk.first_changed}")
                # Alternate sides, starting above, as a person quotes the lines around a change.
                if can_before and (before <= after or not can_after):
                    before += 1
                else:
                    after += 1
            first = a - before - shift + 1
            last = max(b + after - shift, first)
            if any(first <= high and low <= last for low, high in edited):
                # The quote would hold text an earlier edit wrote, which no read made before
                # the edits shows.
                raise ScriptError(f"{path}: edits too close together around line {first}")
            changed = hunk.first_changed
            edited.append((changed - 1, changed + max(len(removed), 1) - 1))
            scope = _scope_at(scopes, changed, path)
            edits.append(Edit(path, old, new, first, last, changed, scope))
            current[a:b] = added
            shift += len(added) - len(removed)
    return edits


def _scopes(lines: list[str]) -> list[Scope]:
    try:
        tree = python_ast.parse("".join(lines))
    except SyntaxError:
        return []
    found: list[Scope] = []

    def visit(node: ast.AST, owner: str, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{owner}.{child.name}" if owner else child.name
                found.append(Scope(name, _first_line(child), child.end_lineno or child.lineno))
                visit(child, "", True)
            elif isinstance(child, ast.ClassDef):
                if not in_function:
                    last = child.end_lineno or child.lineno
                    found.append(Scope(child.name, _first_line(child), last))
                visit(child, child.name if not in_function else "", in_function)
            else:
                visit(child, owner, in_function)

    visit(tree, "", False)
    return found


def _first_line(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> int:
    """The `def`/`class` line itself: decorators stand above it."""
    return node.lineno


def _scope_at(scopes: list[Scope], line: int, path: str) -> Scope:
    """The innermost scope holding `line`; a changed line just above a `def` (a decorator)
    belongs to that def."""
    holding = [s for s in scopes if s.first <= line <= s.last]
    if holding:
        return min(holding, key=lambda s: s.last - s.first)
    return Scope(Path(path).stem, line, line)
