"""`grep`: regex search over the workspace's files, ripgrep-fast where ripgrep is installed.

The engines live in grep_engines.py; this module reads the arguments, picks an engine (ripgrep
inside the sandbox where it can run there, else the fd-based Python engine) and renders the
capped result.
"""

from __future__ import annotations

import asyncio
import logging

from etude.common.gitignore import Pattern, compile_glob
from etude.common.tool_text import (
    GREP_DEFAULT_MAX_RESULTS,
    GREP_MAX_RESULTS,
    grep_more,
    grep_no_matches,
    printable,
)
from etude.environment.tools import grep_engines
from etude.environment.tools.arguments import parse_bool, parse_int
from etude.environment.tools.base import ToolArgumentError, ToolContext, ToolOutput, tool
from etude.environment.tools.grep_engines import (
    GrepRequest,
    Matches,
    RipgrepUnavailable,
    search_python,
    search_ripgrep,
)
from etude.environment.tools.paths import resolve

log = logging.getLogger(__name__)
_WARNED: set[str] = set()

DEFAULT_TIMEOUT_S = 30


@tool(
    "grep",
    read_only=True,
    required=("pattern",),
    optional=("path", "glob", "case_insensitive", "max_results"),
)
async def grep(
    ctx: ToolContext,
    pattern: str,
    path: str = ".",
    glob: str | None = None,
    case_insensitive: str | None = None,
    max_results: str | None = None,
) -> ToolOutput:
    """Search file contents for a regular expression; prints `path:line:text` per matching
    line. `path` (default ".") is a directory or one file. `glob` keeps only files whose name
    matches (`*.py`) or, with a `/`, whose path below `path` matches (`src/**/*.ts`).
    `case_insensitive` (default false). `max_results` (default 200, at most 1000) caps the
    lines shown. Honours .gitignore, skips binary files and .git, shows lines over 300 bytes
    as a placeholder."""
    limit = parse_int(
        "max_results",
        max_results,
        default=GREP_DEFAULT_MAX_RESULTS,
        minimum=1,
        maximum=GREP_MAX_RESULTS,
    )
    assert limit is not None
    request = GrepRequest(
        pattern=pattern,
        target=await asyncio.to_thread(resolve, ctx.root, path or "."),
        glob=_glob(glob),
        case_insensitive=parse_bool("case_insensitive", case_insensitive, default=False),
        timeout_s=ctx.limits.get("grep_timeout_s", DEFAULT_TIMEOUT_S),
    )
    if request.target.kind not in ("dir", "file"):
        return ToolOutput.error("not_a_file", f"{path} is neither a file nor a directory")
    matches = Matches(limit)
    # Looked up on the module so tests can patch them.
    rg, nsenter = grep_engines.find_ripgrep(), grep_engines.find_nsenter()
    searched = False
    if rg and nsenter and ctx.namespaces is not None:
        try:
            await search_ripgrep(rg, nsenter, ctx.namespaces, request, matches)
            searched = True
        except RipgrepUnavailable as error:
            if str(error) not in _WARNED:  # once per reason: it holds for every later call
                _WARNED.add(str(error))
                log.warning("ripgrep cannot run inside the sandbox, grep uses Python: %s", error)
    if not searched:
        await asyncio.to_thread(search_python, request, matches)
    return _render(matches, request)


def _glob(glob: str | None) -> Pattern | None:
    if glob is None or not glob.strip():
        return None
    try:
        return compile_glob(glob)
    except ValueError as error:
        raise ToolArgumentError(str(error)) from None


def _render(matches: Matches, request: GrepRequest) -> ToolOutput:
    if not matches.total:
        parts = request.target.parts
        where = "/".join(parts) if parts else "the workspace"
        return ToolOutput(grep_no_matches(request.pattern, printable(where)))
    lines = list(matches.lines)
    hidden = matches.total - len(lines)
    if hidden:
        lines.append(grep_more(hidden, matches.total))
    return ToolOutput("\n".join(lines), truncated=hidden > 0)
