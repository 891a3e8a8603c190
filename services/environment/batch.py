"""Running one turn's batch of tool calls.

Read-only calls run concurrently. A mutating call is a barrier: it starts after every
call issued before it has finished and runs alone, and calls issued after it see its
effect. Results come back in call order, each with its own duration.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from etude.common.toolcalls import ToolCall


@dataclass(frozen=True, slots=True)
class ExecutedCall:
    call_id: str
    name: str
    output: str
    exit_code: int
    truncated: bool
    truncated_chars: int
    duration_seconds: float
    error_reason: str | None
    ends_episode: bool


RunCall = Callable[[ToolCall], Awaitable[ExecutedCall]]


async def timed(call: ToolCall, run: RunCall) -> ExecutedCall:
    start = time.perf_counter()
    result = await run(call)
    duration = time.perf_counter() - start
    return ExecutedCall(
        result.call_id, result.name, result.output, result.exit_code, result.truncated,
        result.truncated_chars, duration, result.error_reason, result.ends_episode,
    )  # fmt: skip


async def run_batch(
    calls: list[ToolCall],
    run: RunCall,
    read_only: Callable[[str], bool],
    parallel: bool = True,
) -> list[ExecutedCall]:
    results: list[ExecutedCall | None] = [None] * len(calls)

    async def one(index: int) -> None:
        results[index] = await timed(calls[index], run)

    async def together(indices: list[int]) -> None:
        if len(indices) == 1:
            await one(indices[0])  # no task to create for a lone call, the common case
        elif indices:
            await asyncio.gather(*(one(i) for i in indices))

    concurrent: list[int] = []
    for index, call in enumerate(calls):
        if parallel and read_only(call.name):
            concurrent.append(index)
            continue
        await together(concurrent)
        concurrent = []
        await one(index)
    await together(concurrent)
    return [r for r in results if r is not None]
