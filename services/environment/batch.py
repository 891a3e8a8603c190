"""Running one turn's batch of tool calls.

Read-only calls run concurrently. A mutating call is a barrier: it starts after every
call issued before it has finished and runs alone, and calls issued after it see its
effect. Results come back in call order; each call times itself (sessions.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from etude.common.toolcalls import ToolCall
from etude.environment.types import ExecutedCall

RunCall = Callable[[ToolCall], Awaitable[ExecutedCall]]


async def run_batch(
    calls: list[ToolCall],
    run: RunCall,
    read_only: Callable[[str], bool],
    parallel: bool = True,
) -> list[ExecutedCall]:
    results: list[ExecutedCall] = []
    reads: list[ToolCall] = []  # read-only calls since the last barrier, to run together
    for call in calls:
        if parallel and read_only(call.name):
            reads.append(call)
            continue
        results += await _together(reads, run)
        reads = []
        results.append(await run(call))
    return results + await _together(reads, run)


async def _together(calls: list[ToolCall], run: RunCall) -> list[ExecutedCall]:
    if len(calls) == 1:
        return [await run(calls[0])]  # no task to create for a lone call, the common case
    return list(await asyncio.gather(*map(run, calls)))
