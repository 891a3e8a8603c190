"""Environment latency over gRPC: session creation, read_file and grep round trips with 1
and 32 concurrent sessions, and the speedup of running a batch's read-only calls together.

The service runs as its own process (`python -m etude.environment`), as in the local
stack, on a generated 10 MB repository; the load comes from this process.

- Sessions at 32: each session issues a call, then pauses `--think-ms` (100 ms: the pace of
  an agent whose next call waits on generation) before the next. `*_saturated` figures
  drop the pause: 32 calls always in flight, which measures throughput on this machine
  more than latency.
- Batch speedup: time of k read-only calls run one after another (`parallel=false`) over
  the same k calls in one batch. `batch_speedup_k*` uses `codebase_search` against a
  stand-in search server on loopback that answers every SearchService call after
  `--search-ms` (40 ms, an embedding lookup's order): waiting-bound calls, which is what
  the overlap is for. `grep_batch_speedup_k8`
  uses ripgrep over the whole repository: CPU-bound, so it cannot pass the core count.
  `batch_speedup_k8_real_search`: the same k = 8 against the real search service (MiniLM on
  this machine's CPU) over a bundled project: what the cores allow when the calls compete
  for them.
- Every timed call must succeed (no error, some output); one that fails stops the benchmark
  with its error, since its time would measure an error path.

    python loadtests/environment_latency.py --quick --json out.json
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchlib import (
    argument_parser,
    ensure_credentials,
    median,
    metric,
    percentile,
    print_metrics,
    start_service,
    write_json,
)

from etude.api.v1 import search_pb2, search_pb2_grpc
from etude.common.grpc_server import Registration, ServiceRuntime
from etude.common.processes import terminate
from etude.common.settings import ClientSettings, GrpcSettings
from etude.common.toolcalls import ToolCall
from etude.environment.client import GrpcEnvironment
from etude.environment.types import ExecutedCall
from etude.tasks.materialize import PROJECTS_DIR

REAL_SEARCH_PROJECT = "calcparse"


@dataclass(frozen=True)
class Plan:
    creates: int
    reads_single: int
    reads_per_session: int
    sessions: int
    batch_repeats: int


FULL = Plan(creates=200, reads_single=1000, reads_per_session=60, sessions=32, batch_repeats=7)
QUICK = Plan(creates=40, reads_single=200, reads_per_session=10, sessions=32, batch_repeats=3)


def make_repository(root: Path, megabytes: int = 10, files: int = 400) -> Path:
    """A deterministic Python-looking tree of `megabytes` MB in `files` files."""
    rng = random.Random(7)
    words = ["value", "index", "buffer", "parse", "token", "window", "cache", "node", "limit"]
    per_file = megabytes * 1024 * 1024 // files
    for i in range(files):
        path = root / f"pkg_{i % 20:02d}" / f"module_{i:03d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines, size = [], 0
        while size < per_file:
            a, b = rng.choice(words), rng.choice(words)
            line = f"def {a}_{b}_{size}(x):\n    return x + {rng.randint(0, 999)}  # {a} {b}\n"
            lines.append(line)
            size += len(line)
        path.write_text("".join(lines))
    return root


def call(name: str, index: int, **arguments: str) -> ToolCall:
    return ToolCall(name, arguments, f"call_{index}")


class FailedCall(RuntimeError):
    """A timed tool call that did not do its work: its time would measure an error path."""


def succeeded(executed: list[ExecutedCall]) -> list[ExecutedCall]:
    """`executed`, once every call in it returned a result (no error, some output)."""
    for call in executed:
        if call.result.error_reason is not None or not call.result.output.strip():
            reason = call.result.error_reason or "empty output"
            raise FailedCall(f"{call.name} failed ({reason}): {call.result.output[:300]!r}")
    return executed


async def timed(calls) -> float:
    """Milliseconds the batch `calls` (an `execute` awaitable) took; raises FailedCall if any
    call in it failed."""
    start = time.perf_counter()
    executed = await calls
    elapsed_ms = (time.perf_counter() - start) * 1000
    succeeded(executed)
    return elapsed_ms


async def measure_creates(env: GrpcEnvironment, repo: Path, count: int):
    """CreateSession latency, and CreateSession + a first read_file (which waits for the
    sandbox if it is still starting)."""
    warm = await env.create_session("bench", str(repo))  # prepares the base once
    await env.close_session(warm.session_id)
    creates, first_results = [], []
    for i in range(count):
        start = time.perf_counter()
        opened = await env.create_session("bench", str(repo))
        creates.append((time.perf_counter() - start) * 1000)
        succeeded(await env.execute(opened.session_id, [read_call(i)]))
        first_results.append((time.perf_counter() - start) * 1000)
        await env.close_session(opened.session_id)
    return creates, first_results


async def round_trips(env, session_id: str, make_call, count: int) -> list[float]:
    latencies = []
    for i in range(count):
        latencies.append(await timed(env.execute(session_id, [make_call(i)])))
    return latencies


def read_call(i: int) -> ToolCall:
    return call("read_file", 0, path=f"pkg_{i % 20:02d}/module_{i % 400:03d}.py", end_line="50")


def grep_call(i: int) -> ToolCall:
    return call("grep", 0, pattern=f"return x \\+ {i % 1000}\\b", max_results="20")


def search_call(i: int) -> ToolCall:
    return call("codebase_search", 0, query=f"where is value {i} parsed")


async def paced(env, session_id: str, make_call, count: int, think_s: float) -> list[float]:
    # Rollouts are not in lockstep: start each session at a random point of the pause.
    await asyncio.sleep(random.uniform(0, think_s))
    latencies = []
    for i in range(count):
        latencies.append(await timed(env.execute(session_id, [make_call(i)])))
        await asyncio.sleep(think_s * random.uniform(0.5, 1.5))
    return latencies


async def concurrent(env, sessions, make_call, per_session: int, think_s: float) -> list[float]:
    runs = [paced(env, s, make_call, per_session, think_s) for s in sessions]
    return [latency for session in await asyncio.gather(*runs) for latency in session]


async def batch_speedup(env, session_id: str, make_call, k: int, repeats: int):
    batch = [
        ToolCall(c.name, c.arguments, f"call_{i}")
        for i, c in enumerate(make_call(i * 37 + k) for i in range(k))
    ]
    serial, together = [], []
    for _ in range(repeats):
        serial.append(await timed(env.execute(session_id, batch, parallel=False)))
        together.append(await timed(env.execute(session_id, batch, parallel=True)))
    return median(serial) / median(together), median(serial), median(together)


async def measure(address: str, repo: Path, plan: Plan, think_s: float) -> dict:
    env = GrpcEnvironment(address, ClientSettings(timeout_seconds=300))
    try:
        creates, first_results = await measure_creates(env, repo, plan.creates)
        one = (await env.create_session("bench", str(repo))).session_id
        await round_trips(env, one, read_call, 20)  # warm the page cache
        reads_1 = await round_trips(env, one, read_call, plan.reads_single)
        sessions = [
            (await env.create_session("bench", str(repo))).session_id for _ in range(plan.sessions)
        ]
        # Each session's sandbox starts in the background; wait for all of them first, so
        # the figures below are round trips (create_to_first_result covers the start).
        for started in await asyncio.gather(*(env.execute(s, [read_call(0)]) for s in sessions)):
            succeeded(started)
        per = plan.reads_per_session
        reads_32 = await concurrent(env, sessions, read_call, per, think_s)
        greps_32 = await concurrent(env, sessions, grep_call, per, think_s)
        reads_32_saturated = await concurrent(env, sessions, read_call, per, 0.0)
        speedups = {
            k: await batch_speedup(env, one, search_call, k, plan.batch_repeats) for k in (2, 4, 8)
        }
        grep_speedup = await batch_speedup(env, one, grep_call, 8, plan.batch_repeats)
    finally:
        await env.close()
    metrics = {
        "create_session_p50_ms": metric(percentile(creates, 50), "ms"),
        "create_session_p99_ms": metric(percentile(creates, 99), "ms", target=50),
        "create_to_first_result_p50_ms": metric(percentile(first_results, 50), "ms"),
        "create_to_first_result_p99_ms": metric(percentile(first_results, 99), "ms"),
        "read_file_p50_ms_1": metric(percentile(reads_1, 50), "ms"),
        "read_file_p99_ms_1": metric(percentile(reads_1, 99), "ms"),
        "read_file_p50_ms_32": metric(percentile(reads_32, 50), "ms"),
        "read_file_p99_ms_32": metric(percentile(reads_32, 99), "ms", target=10),
        "grep_p50_ms_32": metric(percentile(greps_32, 50), "ms"),
        "grep_p99_ms_32": metric(percentile(greps_32, 99), "ms"),
        "read_file_p99_ms_32_saturated": metric(percentile(reads_32_saturated, 99), "ms"),
    }
    for k, (ratio, serial_ms, _parallel_ms) in speedups.items():
        target = 6 if k == 8 else None
        metrics[f"batch_speedup_k{k}"] = metric(ratio, "x", baseline=serial_ms, target=target)
    metrics["grep_batch_speedup_k8"] = metric(grep_speedup[0], "x", baseline=grep_speedup[1])
    return metrics


class DelayedSearch(search_pb2_grpc.SearchServiceServicer):
    """A search server that answers every call of the SearchService API after a fixed
    delay, with hits from the repository's file names: enough for `codebase_search` calls
    that spend their time waiting. The environment indexes a session's workspace before
    its first query, so a stand-in without IndexWorkspace would time only failures."""

    def __init__(self, delay_s: float, paths: list[str]) -> None:
        self.delay_s, self.paths = delay_s, paths

    async def IndexWorkspace(self, request, context):
        await asyncio.sleep(self.delay_s)
        return search_pb2.IndexWorkspaceResponse(chunks=len(self.paths))

    async def UpdateFiles(self, request, context):
        await asyncio.sleep(self.delay_s)
        return search_pb2.UpdateFilesResponse(chunks_embedded=len(request.changed))

    async def DropWorkspace(self, request, context):
        await asyncio.sleep(self.delay_s)
        return search_pb2.DropWorkspaceResponse()

    async def Query(self, request, context):
        await asyncio.sleep(self.delay_s)
        hits = [
            search_pb2.SearchHit(path=p, start_line=1, end_line=2, score=0.5, snippet="def f():")
            for p in self.paths[: max(1, request.k)]
        ]
        return search_pb2.QueryResponse(hits=hits)


async def start_environment(workdir: Path, root: Path, search_address: str, repo: Path):
    """The environment service as its own process, keeping its state under `root`, calling
    the search server at `search_address`, allowed to open sessions on `repo`."""
    return await asyncio.to_thread(
        start_service, "etude.environment", workdir,
        ETUDE_ENVIRONMENT__ROOT_DIR=str(root),
        ETUDE_ENVIRONMENT__MAX_SESSIONS="64",
        ETUDE_ENVIRONMENT__SEARCH_ADDRESS=search_address,
        ETUDE_ENVIRONMENT__REPOSITORY_ROOTS=json.dumps([str(repo.parent)]),
    )  # fmt: skip


async def run(repo: Path, workdir: Path, plan: Plan, think_s: float, search_s: float) -> dict:
    paths = sorted(str(p.relative_to(repo)) for p in repo.rglob("*.py"))
    ensure_credentials(workdir)  # the stand-in search server requires them, as services do
    search = ServiceRuntime(
        "search",
        GrpcSettings(drain_seconds=0),
        [
            Registration(
                DelayedSearch(search_s, paths),
                search_pb2_grpc.add_SearchServiceServicer_to_server,
                search_pb2.DESCRIPTOR.services_by_name["SearchService"].full_name,
            )
        ],
    )
    await search.start()
    process, address = await start_environment(
        workdir, workdir / "environment", search.address, repo
    )
    try:
        return await measure(address, repo, plan, think_s)
    finally:
        terminate(process, timeout=20)
        await search.shutdown()


async def real_search_speedup(workdir: Path, plan: Plan) -> dict:
    """`batch_speedup_k8` with `codebase_search` answered by the real search service
    (MiniLM embedding each query on this machine's CPU) over a bundled project, indexed
    before the timing starts. The calls compete for the same cores, so this shows what the
    machine allows, not what batching can overlap."""
    repo = workdir / "search-repo" / REAL_SEARCH_PROJECT
    shutil.copytree(PROJECTS_DIR / REAL_SEARCH_PROJECT, repo)
    root = workdir / "environment-real-search"
    search, search_address = await asyncio.to_thread(
        start_service, "etude.search", workdir,
        ETUDE_SEARCH__CACHE_DIR=str(workdir / "search-cache"),
        ETUDE_SEARCH__INDEX_ROOTS=json.dumps([str(root)]),
    )  # fmt: skip
    environment, address = await start_environment(workdir, root, search_address, repo)
    env = GrpcEnvironment(address, ClientSettings(timeout_seconds=300))
    try:
        session = (await env.create_session("bench", str(repo))).session_id
        await timed(env.execute(session, [search_call(0)]))  # indexes the workspace
        ratio, serial_ms, _ = await batch_speedup(env, session, search_call, 8, plan.batch_repeats)
    finally:
        await env.close()
        terminate(environment, timeout=20)
        terminate(search, timeout=20)
    return {"batch_speedup_k8_real_search": metric(ratio, "x", baseline=serial_ms)}


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument(
        "--think-ms", type=float, default=100, help="pause between a session's calls"
    )
    parser.add_argument("--search-ms", type=float, default=40, help="search server's answer time")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)
        repo = make_repository(workdir / "repo")
        metrics = asyncio.run(run(repo, workdir, plan, args.think_ms / 1000, args.search_ms / 1000))
        metrics |= asyncio.run(real_search_speedup(workdir, plan))
    print_metrics("environment latency (gRPC, 10 MB repository)", metrics)
    write_json(
        args.json, "environment_latency", metrics,
        quick=args.quick, cores=os.cpu_count(), think_ms=args.think_ms, search_ms=args.search_ms,
    )  # fmt: skip


if __name__ == "__main__":
    main()
