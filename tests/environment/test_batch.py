"""The ordering rule of a batch: reads overlap, a mutation is a barrier."""

from __future__ import annotations

import asyncio

from etude.common.toolcalls import ToolCall
from etude.environment.batch import run_batch
from etude.environment.types import ExecutedCall, ToolOutput

READ_ONLY = {"read_file", "grep"}


def calls(*names: str) -> list[ToolCall]:
    return [ToolCall(name, {}, f"call_{i}") for i, name in enumerate(names)]


async def run_recording(batch: list[ToolCall], parallel: bool = True, seconds: float = 0.05):
    events: list[tuple[str, str]] = []
    running: set[str] = set()
    overlaps: list[set[str]] = []

    async def run(call: ToolCall) -> ExecutedCall:
        events.append(("start", call.id))
        running.add(call.id)
        overlaps.append(set(running))
        await asyncio.sleep(seconds)
        running.discard(call.id)
        events.append(("end", call.id))
        return ExecutedCall(call.id, call.name, ToolOutput(call.id), seconds)

    results = await run_batch(batch, run, READ_ONLY.__contains__, parallel)
    return results, events, overlaps


async def test_reads_overlap_and_results_keep_call_order():
    batch = calls(*["read_file"] * 8)
    loop = asyncio.get_running_loop()
    start = loop.time()
    results, _, overlaps = await run_recording(batch, seconds=0.2)
    elapsed = loop.time() - start
    assert [r.call_id for r in results] == [c.id for c in batch]
    assert max(len(o) for o in overlaps) == 8
    assert elapsed < 0.2 * 3  # far under 8 × 0.2 s


async def test_a_mutation_waits_for_earlier_reads_and_later_calls_wait_for_it():
    batch = calls("read_file", "grep", "edit_file", "read_file", "run_terminal_command", "grep")
    _, events, _ = await run_recording(batch)
    order = [e for e in events]
    edit_start = order.index(("start", "call_2"))
    assert order.index(("end", "call_0")) < edit_start
    assert order.index(("end", "call_1")) < edit_start
    assert order.index(("end", "call_2")) < order.index(("start", "call_3"))
    run_start = order.index(("start", "call_4"))
    assert order.index(("end", "call_3")) < run_start
    assert order.index(("end", "call_4")) < order.index(("start", "call_5"))


async def test_mutations_run_in_issue_order_one_at_a_time():
    batch = calls("write_file", "edit_file", "delete_file")
    _, events, overlaps = await run_recording(batch)
    assert events == [
        ("start", "call_0"), ("end", "call_0"),
        ("start", "call_1"), ("end", "call_1"),
        ("start", "call_2"), ("end", "call_2"),
    ]  # fmt: skip
    assert max(len(o) for o in overlaps) == 1


async def test_parallel_false_runs_everything_in_order():
    _, _, overlaps = await run_recording(calls("read_file", "grep", "read_file"), parallel=False)
    assert max(len(o) for o in overlaps) == 1
