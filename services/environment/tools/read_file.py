"""`read_file`: numbered lines of a text file, a page at a time.

Pages are capped by lines and bytes so one call cannot flood the context; when a page is cut the
output says which `start_line` reads on. Lines are numbered like `cat -n` so the agent can quote
them back in edits and line ranges.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import BinaryIO

from etude.common.tool_text import READ_FILE_MAX_BYTES, READ_FILE_MAX_LINES, numbered_line, read_on
from etude.environment.tools.arguments import parse_int
from etude.environment.tools.base import ToolArgumentError, ToolContext, ToolOutput, tool
from etude.environment.tools.paths import WorkspacePath, resolve

BINARY_SNIFF_BYTES = 8 * 1024
# Files up to this size are read on the event loop (about a millisecond at most).
INLINE_MAX_BYTES = 1024 * 1024


@tool("read_file", read_only=True, required=("path",), optional=("start_line", "end_line"))
async def read_file(
    ctx: ToolContext, path: str, start_line: str | None = None, end_line: str | None = None
) -> ToolOutput:
    """Read a text file as numbered lines (number, tab, text, as `cat -n` prints them).
    `start_line` (default 1) and `end_line` (default: the end) choose the range, both
    inclusive. At most 400 lines and 32 KB come back per call; the output then says which
    start_line to continue from. Binary files are refused."""
    start = parse_int("start_line", start_line, default=1, minimum=1)
    end = parse_int("end_line", end_line, minimum=1)
    assert start is not None
    if end is not None and end < start:
        raise ToolArgumentError(f"end_line ({end}) must not be smaller than start_line ({start})")
    page_limits = (
        ctx.limits.get("read_file_max_lines", READ_FILE_MAX_LINES),
        ctx.limits.get("read_file_max_bytes", READ_FILE_MAX_BYTES),
    )
    target = resolve(ctx.root, path)
    if target.kind != "dir" and target.stat().st_size <= INLINE_MAX_BYTES:
        # A thread hop costs more than reading a small file, and under load the hand-offs
        # of the GIL between loop and thread dominate the tail: read it right here.
        return _read(target, path, start, end, *page_limits)
    return await asyncio.to_thread(_read, target, path, start, end, *page_limits)


@dataclass(slots=True)
class _Page:
    start: int
    end: int | None
    max_lines: int
    max_bytes: int
    lines: list[str] = field(default_factory=list)
    size: int = 0
    total: int = 0
    cut_at: int | None = None
    """The first requested line that was not shown because the page was full."""
    unshown_chars: int = 0

    def offer(self, number: int, raw: bytes) -> None:
        self.total = number
        if number < self.start or (self.end is not None and number > self.end):
            return
        if self.cut_at is not None:
            self.unshown_chars += len(raw)
            return
        line = numbered_line(number, _decode(raw))
        size = len(line.encode()) + 1
        if self.lines and (len(self.lines) >= self.max_lines or self.size + size > self.max_bytes):
            self.cut_at = number
            self.unshown_chars += len(raw)
            return
        if size > self.max_bytes:  # one line bigger than a whole page: show its start
            keep = self.max_bytes // 4  # characters; up to 4 bytes each in UTF-8
            cut = len(line) - keep
            line = f"{line[:keep]} [line cut: {cut} more characters; run_terminal_command shows it]"
            self.unshown_chars += cut
        self.lines.append(line)
        self.size += size


def _read(
    target: WorkspacePath, path: str, start: int, end: int | None, max_lines: int, max_bytes: int
) -> ToolOutput:
    if target.kind == "dir":
        return ToolOutput.error("is_directory", f"{path} is a directory; use list_dir on it.")
    page = _Page(start, end, max_lines, max_bytes)
    with target.open_read() as file:
        if b"\0" in file.read(BINARY_SNIFF_BYTES):
            return ToolOutput.error(
                "binary_file", f"{path} is a binary file; read_file shows text files only."
            )
        file.seek(0)
        for number, raw in enumerate(file, 1):
            page.offer(number, raw)
            # Past the page (open-ended range) or past `end`: the rest only needs counting,
            # which is done in bulk rather than line by line.
            if (page.cut_at is not None and end is None) or (end is not None and number >= end):
                lines, size = _count_rest(file)
                page.total += lines
                if end is None:
                    page.unshown_chars += size
                break
    if start > max(page.total, 1):
        return ToolOutput.error(
            "out_of_range",
            f"start_line={start} is past the end of {path}, which has {page.total} lines.",
        )
    return _render(page)


def _count_rest(file: BinaryIO) -> tuple[int, int]:
    """Lines and bytes left in `file`; a last line without a newline counts."""
    lines = size = 0
    last = b"\n"
    while chunk := file.read(1 << 20):
        lines += chunk.count(b"\n")
        size += len(chunk)
        last = chunk[-1:]
    return lines + (last != b"\n"), size


def _render(page: _Page) -> ToolOutput:
    if not page.lines:
        return ToolOutput("(empty file)")
    text = "\n".join(page.lines)
    if page.cut_at is None:  # only a single over-long line was cut, if anything
        cut = page.unshown_chars
        return ToolOutput(text, truncated=cut > 0, truncated_chars=cut)
    note = read_on(page.start, page.cut_at - 1, page.total, page.cut_at)
    return ToolOutput(f"{text}\n{note}", truncated=True, truncated_chars=page.unshown_chars)


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").removesuffix("\n").removesuffix("\r")
