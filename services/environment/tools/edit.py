"""The file-changing tools: `edit_file`, `write_file` and `delete_file`.

Edits are exact string replacements rather than line-number patches: the agent quotes what it
saw, so an edit based on a stale view fails loudly instead of landing in the wrong place. Every
change is reported through `ctx.on_files_changed` so indexes (codebase_search) stay current.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from etude.common.tool_text import EDIT_CONTEXT_LINES, edited, numbered_line, plural, printable
from etude.environment.tools.arguments import parse_bool
from etude.environment.tools.base import ToolArgumentError, ToolContext, ToolOutput, tool
from etude.environment.tools.paths import WorkspacePath, resolve

MAX_LISTED_LINES = 20
BINARY_SNIFF_BYTES = 8 * 1024
# Text is decoded with surrogateescape so bytes that are not UTF-8 survive an edit unchanged.
_ENCODING = ("utf-8", "surrogateescape")


@tool(
    "edit_file",
    read_only=False,
    required=("path", "old_string", "new_string"),
    optional=("replace_all",),
)
async def edit_file(
    ctx: ToolContext, path: str, old_string: str, new_string: str, replace_all: str | None = None
) -> ToolOutput:
    """Replace `old_string` with `new_string` in a file. `old_string` must match the file
    exactly (whitespace and indentation included) and occur exactly once, unless
    `replace_all` is true (default false), which replaces every occurrence. Include a few
    surrounding lines to make it unique. Use write_file to create files."""
    if not old_string:
        raise ToolArgumentError("old_string must not be empty; use write_file to create a file")
    if old_string == new_string:
        raise ToolArgumentError("old_string and new_string are the same; nothing would change")
    every = parse_bool("replace_all", replace_all, default=False)
    result, changed = await asyncio.to_thread(_edit, ctx.root, path, old_string, new_string, every)
    if changed and ctx.on_files_changed:
        await ctx.on_files_changed([changed], [])
    return result


@tool("write_file", read_only=False, required=("path", "content"))
async def write_file(ctx: ToolContext, path: str, content: str) -> ToolOutput:
    """Create a file, or replace a file's whole content, with `content`; missing parent
    directories are created. Prefer edit_file for changing part of an existing file."""
    target = await asyncio.to_thread(resolve, ctx.root, path, allow_missing=True)
    if target.kind == "dir":
        return ToolOutput.error("is_directory", f"{path} is a directory; choose a file path.")
    if target.kind not in ("file", "missing"):
        return ToolOutput.error("not_a_file", f"{path} exists and is not a regular file.")
    data = content.encode(*_ENCODING)
    await asyncio.to_thread(target.write_bytes, data)
    if ctx.on_files_changed:
        await ctx.on_files_changed([target.relative], [])
    state = "new file" if target.kind == "missing" else "replaced the old content"
    written = plural(len(data), "byte")
    return ToolOutput(f"Wrote {written} to {printable(target.relative)} ({state}).")


@tool("delete_file", read_only=False, required=("path",))
async def delete_file(ctx: ToolContext, path: str) -> ToolOutput:
    """Delete one file (a symlink is removed itself, not its target). Directories are refused;
    remove those with run_terminal_command."""
    # The last component is not followed: deleting a link must not delete what it points to.
    target = await asyncio.to_thread(resolve, ctx.root, path, follow_final=False)
    if target.kind == "dir":
        return ToolOutput.error(
            "is_directory",
            f"{path} is a directory; delete_file removes files only (use run_terminal_command).",
        )
    await asyncio.to_thread(target.unlink)
    if ctx.on_files_changed:
        await ctx.on_files_changed([], [target.relative])
    return ToolOutput(f"Deleted {printable(target.relative)}.")


def _edit(
    root: Path, path: str, old: str, new: str, replace_all: bool
) -> tuple[ToolOutput, str | None]:
    target = resolve(root, path)
    if target.kind == "dir":
        return ToolOutput.error("is_directory", f"{path} is a directory, not a file."), None
    text = _read_text(target)
    if text is None:
        message = f"{path} is a binary file; edit_file edits text files only."
        return ToolOutput.error("binary_file", message), None
    old, new = _match_line_endings(text, old, new)
    positions = _occurrences(text, old)
    if not positions:
        return ToolOutput.error("no_match", _no_match_message(path)), None
    if len(positions) > 1 and not replace_all:
        return ToolOutput.error("not_unique", _not_unique_message(path, text, positions)), None
    count = len(positions) if replace_all else 1
    updated = text.replace(old, new, count)
    target.write_bytes(updated.encode(*_ENCODING))
    first_line = _line_of(text, positions[0])
    # A trailing newline ends the replacement's last line rather than starting another.
    last_line = first_line + new.removesuffix("\n").count("\n")
    context = _excerpt(updated, first_line - EDIT_CONTEXT_LINES, last_line + EDIT_CONTEXT_LINES)
    return ToolOutput(edited(count, printable(target.relative), context)), target.relative


def _read_text(target: WorkspacePath) -> str | None:
    with target.open_read() as file:
        data = file.read()
    if b"\0" in data[:BINARY_SNIFF_BYTES]:
        return None
    return data.decode(*_ENCODING)


def _match_line_endings(text: str, old: str, new: str) -> tuple[str, str]:
    """Let `\\n` in the arguments match a file with CRLF endings (read_file shows no `\\r`)."""
    if old in text or "\r\n" not in text or "\n" not in old or "\r" in old:
        return old, new
    return old.replace("\n", "\r\n"), new.replace("\n", "\r\n")


def _occurrences(text: str, old: str) -> list[int]:
    positions = []
    start = text.find(old)
    while start != -1:
        positions.append(start)
        start = text.find(old, start + len(old))
    return positions


def _line_of(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


def _excerpt(text: str, first: int, last: int) -> str:
    lines = text.split("\n")
    first, last = max(first, 1), min(last, len(lines))
    shown = [numbered_line(n, lines[n - 1].removesuffix("\r")) for n in range(first, last + 1)]
    return printable("\n".join(shown))


def _no_match_message(path: str) -> str:
    return (
        f"old_string was not found in {path}. It must match the file exactly, including "
        "whitespace and indentation; read the file with read_file and copy the text from it."
    )


def _not_unique_message(path: str, text: str, positions: list[int]) -> str:
    numbers = [str(_line_of(text, position)) for position in positions[:MAX_LISTED_LINES]]
    more = ", …" if len(positions) > MAX_LISTED_LINES else ""
    return (
        f"old_string occurs {len(positions)} times in {path} (lines {', '.join(numbers)}{more}). "
        "Include more surrounding lines to make it unique, or set replace_all=true to replace "
        "every occurrence."
    )
