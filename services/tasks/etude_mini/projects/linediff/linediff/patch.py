"""Reading unified diffs and applying them to text."""

from __future__ import annotations

import re

from .unified import NO_NEWLINE, Hunk, Patch, split_lines

_HUNK_HEADER = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(ValueError):
    """Base class for patch problems."""


class PatchParseError(PatchError):
    """The patch text is not a well-formed unified diff."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


class PatchConflictError(PatchError):
    """A hunk's old lines were not found in the text being patched."""

    def __init__(self, message: str, hunk: int) -> None:
        super().__init__(message)
        self.hunk = hunk


def parse_patch(text: str) -> Patch:
    """Parse a single-file unified diff. Lines before the ``---`` header are ignored."""
    lines = split_lines(text)
    index = 0
    while index < len(lines) and not lines[index].startswith("--- "):
        index += 1
    if index + 1 >= len(lines) or not lines[index + 1].startswith("+++ "):
        raise PatchParseError("expected '---' and '+++' file headers", index + 1)
    old_name, new_name = _file_name(lines[index]), _file_name(lines[index + 1])
    index += 2
    hunks: list[Hunk] = []
    while index < len(lines):
        header_line = index + 1
        hunk, index = _parse_hunk(lines, index)
        if hunks and hunk.old_index < hunks[-1].old_index + hunks[-1].old_count:
            raise PatchParseError(f"hunk {len(hunks) + 1} overlaps the previous hunk", header_line)
        hunks.append(hunk)
    if not hunks:
        raise PatchParseError("patch has no hunks", index + 1)
    return Patch(old_name, new_name, tuple(hunks))


def _file_name(header: str) -> str:
    # Drop "--- " and an optional tab-separated timestamp.
    return header[4:].rstrip("\n").split("\t", 1)[0]


def _parse_hunk(lines: list[str], index: int) -> tuple[Hunk, int]:
    header_line = index + 1
    match = _HUNK_HEADER.match(lines[index])
    if match is None:
        raise PatchParseError(f"expected a hunk header, got {lines[index].rstrip()!r}", header_line)
    old_start, old_count = int(match[1]), 1 if match[2] is None else int(match[2])
    new_start, new_count = int(match[3]), 1 if match[4] is None else int(match[4])
    old_left, new_left = old_count, new_count
    body: list[tuple[str, str]] = []
    index += 1
    while old_left > 0 or new_left > 0:
        if index >= len(lines):
            raise PatchParseError(
                f"hunk is missing {old_left} old and {new_left} new lines", header_line
            )
        line = lines[index]
        # Some editors strip the lone space from blank context lines; accept those too.
        marker, content = (" ", line) if line in ("\n", "\r\n") else (line[0], line[1:])
        if marker == "\\" and body:
            body[-1] = (body[-1][0], body[-1][1].removesuffix("\n"))
            index += 1
            continue
        if marker not in " -+":
            raise PatchParseError(f"unexpected line in hunk: {line.rstrip()!r}", index + 1)
        old_left -= marker != "+"
        new_left -= marker != "-"
        if old_left < 0 or new_left < 0:
            raise PatchParseError("hunk has more lines than its header declares", index + 1)
        body.append((marker, content if content.endswith("\n") else content + "\n"))
        index += 1
    if index < len(lines) and lines[index].startswith(NO_NEWLINE):
        body[-1] = (body[-1][0], body[-1][1].removesuffix("\n"))
        index += 1
    # An empty side is named by the line before it, so its 0-based index is the start itself.
    old_index = old_start - 1 if old_count else old_start
    new_index = new_start - 1 if new_count else new_start
    return Hunk(old_index, old_count, new_index, new_count, tuple(body)), index


def apply_patch(
    original: str, patch: Patch | str, *, reverse: bool = False, max_offset: int = 50
) -> str:
    """Apply ``patch`` to ``original`` and return the patched text.

    Each hunk is tried where its header says, shifted by the drift seen in earlier hunks,
    then at growing distances up to ``max_offset`` lines, nearest first and the earlier
    position on ties. ``reverse=True`` undoes a patch instead.
    """
    if isinstance(patch, str):
        patch = parse_patch(patch)
    lines = split_lines(original)
    result: list[str] = []
    cursor = 0  # lines before this index have been copied or replaced already
    drift = 0
    for number, hunk in enumerate(patch.hunks, start=1):
        source, target = hunk.old_lines, hunk.new_lines
        declared = hunk.old_index
        if reverse:
            source, target, declared = target, source, hunk.new_index
        position = _locate(lines, source, declared + drift, cursor, max_offset)
        if position is None:
            if _locate(lines, target, declared + drift, cursor, max_offset) is not None:
                message = f"hunk {number} appears to be applied already"
            else:
                message = f"hunk {number} does not apply near line {declared + drift + 1}"
            raise PatchConflictError(message, number)
        result.extend(lines[cursor:position])
        result.extend(target)
        cursor = position + len(source)
        drift = position - declared
    result.extend(lines[cursor:])
    return "".join(result)


def _locate(
    lines: list[str], wanted: list[str], expected: int, lowest: int, max_offset: int
) -> int | None:
    """Index nearest ``expected`` (and not before ``lowest``) where ``wanted`` occurs."""
    highest = len(lines) - len(wanted)
    for distance in range(max_offset + 1):
        for candidate in (expected - distance, expected + distance):
            if (
                lowest <= candidate <= highest
                and lines[candidate : candidate + len(wanted)] == wanted
            ):
                return candidate
            if distance == 0:
                break
    return None
