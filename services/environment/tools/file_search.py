"""`file_search`: find files by glob when the agent knows a name but not where it lives."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from etude.common.gitignore import Pattern, compile_glob
from etude.common.tool_text import plural, printable
from etude.environment.tools.arguments import require_text
from etude.environment.tools.base import ToolArgumentError, ToolContext, ToolOutput, tool
from etude.environment.tools.paths import resolve
from etude.environment.tools.walk import walk

MAX_RESULTS = 100


@tool("file_search", read_only=True, required=("glob",))
async def file_search(ctx: ToolContext, glob: str) -> ToolOutput:
    """Find files by glob, as workspace-relative paths (sorted, at most 100). Without a `/`
    the glob matches file names at any depth (`*_test.py`); with one it matches paths from the
    workspace root (`src/**/*.ts`); `**` spans directories. Honours .gitignore."""
    try:
        pattern = compile_glob(require_text("glob", glob))
    except ValueError as error:
        raise ToolArgumentError(str(error)) from None
    return await asyncio.to_thread(_search, ctx.root, glob.strip(), pattern)


def _search(root: Path, glob: str, pattern: Pattern) -> ToolOutput:
    found = [
        entry.path
        for entry in walk(resolve(root, "."))
        if entry.kind == "file" and pattern.matches(entry.path, is_dir=False)
    ]
    if not found:
        return ToolOutput(f"No files match {glob!r}.")
    found.sort(key=os.fsencode)
    lines = [printable(path) for path in found[:MAX_RESULTS]]
    if len(found) > MAX_RESULTS:
        hidden = len(found) - MAX_RESULTS
        lines.append(f"… {plural(hidden, 'more file')} not shown; use a narrower glob.")
    return ToolOutput("\n".join(lines), truncated=len(found) > MAX_RESULTS)
