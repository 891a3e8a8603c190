"""`codebase_search`: semantic search over the workspace through the session's search index.

The index lives in another service; when it is absent or fails, the agent is told to fall back
on grep and file_search rather than the rollout failing.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from etude.common.tool_text import printable
from etude.environment.tools.arguments import parse_int, parse_list, require_text
from etude.environment.tools.base import SearchHit, ToolContext, ToolError, ToolOutput, tool
from etude.environment.tools.paths import resolve

DEFAULT_K = 10
MAX_K = 50
UNAVAILABLE = "search_unavailable"

logger = logging.getLogger(__name__)


@tool(
    "codebase_search",
    read_only=True,
    required=("query",),
    optional=("k", "target_directories"),
)
async def codebase_search(
    ctx: ToolContext, query: str, k: str | None = None, target_directories: str | None = None
) -> ToolOutput:
    """Semantic search: find code by meaning ("where are retries configured?") rather than by
    exact text. `k` results (default 10, at most 50), each as `path:start-end (score)` and a
    snippet. `target_directories` limits the search to directories, separated by commas or
    newlines. Use grep for exact text."""
    text = require_text("query", query)
    count = parse_int("k", k, default=DEFAULT_K, minimum=1, maximum=MAX_K)
    assert count is not None
    directories = await asyncio.to_thread(_directories, ctx.root, parse_list(target_directories))
    if ctx.search is None:
        return _unavailable("codebase_search is not available in this session.")
    try:
        hits = await ctx.search.query(ctx.session_id, text, count, directories)
    except Exception:  # any backend failure is the same to the agent: use the other tools
        logger.warning("codebase_search failed for session %s", ctx.session_id, exc_info=True)
        return _unavailable("codebase_search failed.")
    return _render(hits)


def _directories(root: Path, names: list[str]) -> list[str]:
    """Resolve each directory inside the workspace (refusing escapes) to its real path."""
    resolved = []
    for name in names:
        target = resolve(root, name)
        if target.kind != "dir":
            raise ToolError("not_a_directory", f"target_directories: {name} is not a directory.")
        resolved.append(target.relative)
    return resolved


def _unavailable(reason: str) -> ToolOutput:
    return ToolOutput.error(UNAVAILABLE, f"{reason} Use grep or file_search instead.")


def _render(hits: list[SearchHit]) -> ToolOutput:
    if not hits:
        return ToolOutput("No results.")
    blocks = [
        f"{printable(hit.path)}:{hit.start_line}-{hit.end_line} ({hit.score:.3f})\n"
        f"{printable(hit.snippet.rstrip())}"
        for hit in hits
    ]
    return ToolOutput("\n\n".join(blocks))
