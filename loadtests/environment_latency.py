"""Environment latency over gRPC: session creation, read_file and grep round trips with 1
and 32 concurrent sessions, and the speedup of running a batch's read-only calls together.

The service runs as its own process (`python -m etude.environment`), as in the local
stack, on a generated 10 MB repository; the load comes from this process.

    python loadtests/environment_latency.py --quick --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchlib import median, metric, percentile, print_metrics, write_json

from etude.common.grpc_client import health_status
from etude.common.net import free_port
from etude.common.processes import spawn, terminate
from etude.common.settings import ClientSettings
from etude.common.toolcalls import ToolCall
from etude.environment.client import GrpcEnvironment


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


async def timed(coroutine) -> float:
    start = time.perf_counter()
    await coroutine
    return (time.perf_counter() - start) * 1000


async def measure_creates(env: GrpcEnvironment, repo: Path, count: int) -> list[float]:
    warm = await env.create_session("bench", str(repo))  # prepares the base once
    await env.close_session(warm.session_id)
    latencies = []
    for _ in range(count):
        start = time.perf_counter()
        opened = await env.create_session("bench", str(repo))
        latencies.append((time.perf_counter() - start) * 1000)
        await env.close_session(opened.session_id)
    return latencies


async def round_trips(env, session_id: str, make_call, count: int) -> list[float]:
    latencies = []
    for i in range(count):
        latencies.append(await timed(env.execute(session_id, [make_call(i)])))
    return latencies


def read_call(i: int) -> ToolCall:
    return call("read_file", 0, path=f"pkg_{i % 20:02d}/module_{i % 400:03d}.py", end_line="50")


def grep_call(i: int) -> ToolCall:
    return call("grep", 0, pattern=f"return x \\+ {i % 1000}\\b", max_results="20")


async def concurrent(env, sessions: list[str], make_call, per_session: int) -> list[float]:
    results = await asyncio.gather(*(round_trips(env, s, make_call, per_session) for s in sessions))
    return [latency for session in results for latency in session]


async def batch_speedup(env, session_id: str, k: int, repeats: int) -> tuple[float, float, float]:
    batch = [grep_call(i * 37 + k) for i in range(k)]
    for i, c in enumerate(batch):
        batch[i] = ToolCall(c.name, c.arguments, f"call_{i}")
    serial, together = [], []
    for _ in range(repeats):
        serial.append(await timed(env.execute(session_id, batch, parallel=False)))
        together.append(await timed(env.execute(session_id, batch, parallel=True)))
    return median(serial) / median(together), median(serial), median(together)


async def measure(address: str, repo: Path, plan: Plan) -> dict:
    env = GrpcEnvironment(address, ClientSettings(timeout_seconds=300))
    try:
        creates = await measure_creates(env, repo, plan.creates)
        one = (await env.create_session("bench", str(repo))).session_id
        await round_trips(env, one, read_call, 20)  # warm the page cache
        reads_1 = await round_trips(env, one, read_call, plan.reads_single)
        sessions = [
            (await env.create_session("bench", str(repo))).session_id for _ in range(plan.sessions)
        ]
        reads_32 = await concurrent(env, sessions, read_call, plan.reads_per_session)
        greps_32 = await concurrent(env, sessions, grep_call, plan.reads_per_session)
        speedups = {k: await batch_speedup(env, one, k, plan.batch_repeats) for k in (1, 2, 4, 8)}
    finally:
        await env.close()
    metrics = {
        "create_session_p50_ms": metric(percentile(creates, 50), "ms"),
        "create_session_p99_ms": metric(percentile(creates, 99), "ms", target=50),
        "read_file_p50_ms_1": metric(percentile(reads_1, 50), "ms"),
        "read_file_p99_ms_1": metric(percentile(reads_1, 99), "ms"),
        "read_file_p50_ms_32": metric(percentile(reads_32, 50), "ms"),
        "read_file_p99_ms_32": metric(percentile(reads_32, 99), "ms", target=10),
        "grep_p50_ms_32": metric(percentile(greps_32, 50), "ms"),
        "grep_p99_ms_32": metric(percentile(greps_32, 99), "ms"),
    }
    for k, (ratio, serial_ms, _parallel_ms) in speedups.items():
        if k > 1:
            metrics[f"batch_speedup_k{k}"] = metric(
                ratio, "x", baseline=serial_ms, target=6 if k == 8 else None
            )
    return metrics


def start_service(workdir: Path) -> tuple[object, str]:
    port, metrics_port = free_port(), free_port()
    env = {
        **os.environ,
        "ETUDE_GRPC__PORT": str(port),
        "ETUDE_GRPC__METRICS_PORT": str(metrics_port),
        "ETUDE_ENVIRONMENT__ROOT_DIR": str(workdir / "environment"),
        "ETUDE_ENVIRONMENT__MAX_SESSIONS": "64",
        "ETUDE_LOG__LEVEL": "WARNING",
    }
    argv = [sys.executable, "-m", "etude.environment"]
    process = spawn(argv, log_path=workdir / "environment.log", env=env)
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while health_status(address, timeout=0.5) != "SERVING":
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError((workdir / "environment.log").read_text())
        time.sleep(0.1)
    return process, address


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run, under a minute")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)
        repo = make_repository(workdir / "repo")
        process, address = start_service(workdir)
        try:
            metrics = asyncio.run(measure(address, repo, plan))
        finally:
            terminate(process, timeout=20)
    print_metrics("environment latency (gRPC, 10 MB repository)", metrics)
    write_json(args.json, "environment_latency", metrics, quick=args.quick, cores=os.cpu_count())


if __name__ == "__main__":
    main()
