"""`list_dir`: a directory's tree a few levels deep, as the agent would see it with `tree`.

It hides what .gitignore hides (and .git), so a listing is not drowned by build output or
dependencies, and it is capped so one call stays small; the cap says how much was left out.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from etude.common.tool_text import plural, printable
from etude.environment.tools.arguments import parse_int
from etude.environment.tools.base import ToolContext, ToolOutput, tool
from etude.environment.tools.paths import resolve
from etude.environment.tools.walk import Entry, walk

MAX_ENTRIES = 500
DEFAULT_DEPTH = 2
MAX_DEPTH = 3
_INDENT = "  "


@tool("list_dir", read_only=True, optional=("path", "depth"))
async def list_dir(ctx: ToolContext, path: str = ".", depth: str | None = None) -> ToolOutput:
    """List a directory as an indented tree; directories end with `/`, symlinks show
    `name -> target`. `path` (default "."), `depth` 1-3 levels (default 2). Entries hidden by
    .gitignore and .git are left out; at most 500 entries are shown."""
    levels = parse_int("depth", depth, default=DEFAULT_DEPTH, minimum=1, maximum=MAX_DEPTH)
    assert levels is not None
    limit = ctx.limits.get("list_dir_max_entries", MAX_ENTRIES)
    return await asyncio.to_thread(_list, ctx.root, path or ".", levels, limit)


def _list(root: Path, path: str, levels: int, limit: int) -> ToolOutput:
    target = resolve(root, path)
    if target.kind != "dir":
        return ToolOutput.error("not_a_directory", f"{path} is not a directory; use read_file.")
    lines = [f"{printable(target.relative)}/"]
    total = 0
    for entry in walk(target, max_depth=levels):
        total += 1
        if total <= limit:
            lines.append(_INDENT * entry.depth + _describe(entry))
    if total == 0:
        lines.append(f"{_INDENT}(empty directory)")
    omitted = total - limit
    if omitted > 0:
        lines.append(
            f"… {plural(omitted, 'more entry', 'more entries')} not shown; list a "
            "subdirectory or use a smaller depth."
        )
    return ToolOutput("\n".join(lines), truncated=omitted > 0)


def _describe(entry: Entry) -> str:
    name = printable(entry.name)
    if entry.kind == "dir":
        return f"{name}/"
    if entry.kind == "symlink":
        try:
            return f"{name} -> {printable(entry.link_target())}"
        except OSError:
            return f"{name} -> ?"
    return name
