"""Work-queue throughput: full put → get → ack cycles through `WorkQueue`, against a plain
redis-py client sending the same commands with the same pipelining, on the same server in
the same run.

Why the comparison: an absolute entries/s figure says little without the machine. The
ratio to the same commands sent raw (`queue_vs_raw_same_commands_ratio`, target ≥ 0.8) is
what the queue itself costs: payload encoding and decoding, schema checks, bookkeeping.
redis-benchmark's XADD rate (50 clients, pipeline 16) stays as a second reference; one
Python client doing the whole cycle cannot approach it, so that ratio is far below 1 by
construction.

    python loadtests/queue_throughput.py              # full run, median of 3 repeats
    python loadtests/queue_throughput.py --quick      # under a minute
    python loadtests/queue_throughput.py --json out.json --redis-url redis://host:6379/0

Without `--redis-url` it starts its own redis-server (AOF on, appendfsync everysec, as the
local stack runs it) in a temporary directory.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlparse

import redis
import redis.asyncio as aioredis
from benchlib import argument_parser
from rich.console import Console
from rich.table import Table

from etude.common.payloads import Payload, encode, schema_of
from etude.common.queue import WorkQueue
from etude.common.redis_server import RedisServer, find_redis_server
from etude.common.settings import QueueSettings


class Blob(Payload, tag="loadtest.blob.v1"):
    data: bytes


@dataclass(frozen=True)
class Plan:
    repeats: int
    entries_1k: int
    entries_16k: int
    batch: int
    benchmark_requests: int


FULL = Plan(
    repeats=3, entries_1k=100_000, entries_16k=20_000, batch=256, benchmark_requests=200_000
)
QUICK = Plan(repeats=1, entries_1k=20_000, entries_16k=4_000, batch=256, benchmark_requests=50_000)


@dataclass(frozen=True)
class QueueRun:
    payload_bytes: int
    entries: int
    seconds: float

    @property
    def entries_per_s(self) -> float:
        return self.entries / self.seconds


def blob_of_encoded_size(size: int) -> Blob:
    """A payload whose msgpack encoding is `size` bytes, so '1 KB' means 1 KB on the wire."""
    first_guess = Blob(data=b"x" * (size - len(encode(Blob(data=b"")))))
    # msgpack's length prefix grows with the data, so correct the guess once.
    return Blob(data=b"x" * (len(first_guess.data) + size - len(encode(first_guess))))


async def cycle(queue: WorkQueue, blob: Blob, count: int) -> None:
    await queue.put_many([blob] * count)
    done = 0
    while done < count:
        deliveries = await queue.get(count=count - done, block_ms=1000)
        await queue.ack(*(delivery.entry_id for delivery in deliveries))
        done += len(deliveries)


async def measure_queue(url: str, size: int, entries: int, batch: int) -> QueueRun:
    client = aioredis.Redis.from_url(url, socket_timeout=30)
    stream = f"etude:bench:{uuid.uuid4().hex[:8]}"
    queue = WorkQueue(client, stream, "bench", "bench-1", (Blob,), QueueSettings())
    try:
        await queue.ensure_group()
        blob = blob_of_encoded_size(size)
        await cycle(queue, blob, batch)  # warm-up: connections, scripts
        started = time.perf_counter()
        for first in range(0, entries, batch):
            await cycle(queue, blob, min(batch, entries - first))
        seconds = time.perf_counter() - started
        stats = await queue.stats()
        if (stats.depth, stats.pending, stats.dead) != (0, 0, 0):
            raise RuntimeError(f"queue not drained after the run: {stats}")
        return QueueRun(payload_bytes=size, entries=entries, seconds=seconds)
    finally:
        await client.delete(stream, queue.dead_stream)
        await client.aclose()


async def raw_cycle(
    client: aioredis.Redis, stream: str, fields: dict, count: int, claim_idle_ms: int
) -> None:
    """What one `cycle` sends, issued straight through redis-py with the same pipelining:
    XADD × count in one pipeline; XAUTOCLAIM, then XREADGROUP; XACK + XDEL + HDEL in one
    MULTI. No payload is encoded or decoded: that, and the bookkeeping around the
    commands, is the queue's own cost."""
    async with client.pipeline(transaction=False) as pipe:
        for _ in range(count):
            pipe.xadd(stream, fields)
        await pipe.execute()
    done = 0
    while done < count:
        await client.xautoclaim(stream, "bench", "bench-1", claim_idle_ms, "0-0", count=count)
        reply = await client.xreadgroup(
            "bench", "bench-1", {stream: ">"}, count=count - done, block=1000
        )
        ids = [entry_id for _stream, entries in reply or [] for entry_id, _fields in entries]
        async with client.pipeline(transaction=True) as pipe:
            pipe.xack(stream, "bench", *ids)
            pipe.xdel(stream, *ids)
            pipe.hdel(f"{stream}:reasons", *ids)
            acked, _deleted, _reasons = await pipe.execute()
        if acked != len(ids):
            raise RuntimeError(f"raw cycle acknowledged {acked} of {len(ids)} entries")
        done += len(ids)


async def measure_raw(url: str, size: int, entries: int, batch: int) -> QueueRun:
    """The same commands per entry as `measure_queue`, from a plain redis-py client."""
    client = aioredis.Redis.from_url(url, socket_timeout=30)
    stream = f"etude:bench:raw:{uuid.uuid4().hex[:8]}"
    fields = {  # the fields a queue entry carries
        "schema": schema_of(Blob), "payload": encode(blob_of_encoded_size(size)), "key": "",
        "enqueued_ms": int(time.time() * 1000),
    }  # fmt: skip
    claim_idle_ms = int(QueueSettings().claim_idle_seconds * 1000)
    try:
        await client.xgroup_create(stream, "bench", id="0", mkstream=True)
        await raw_cycle(client, stream, fields, batch, claim_idle_ms)  # warm-up
        started = time.perf_counter()
        for first in range(0, entries, batch):
            await raw_cycle(client, stream, fields, min(batch, entries - first), claim_idle_ms)
        seconds = time.perf_counter() - started
        if await client.xlen(stream):
            raise RuntimeError("raw stream not drained after the run")
        return QueueRun(payload_bytes=size, entries=entries, seconds=seconds)
    finally:
        await client.delete(stream)
        await client.aclose()


def find_redis_benchmark() -> Path | None:
    on_path = shutil.which("redis-benchmark")
    if on_path:
        return Path(on_path)
    beside_server = find_redis_server().with_name("redis-benchmark")
    return beside_server if beside_server.is_file() else None


def run_redis_benchmark(binary: Path, url: str, requests: int) -> float:
    """Requests/s of `XADD <stream> * payload <1 KB>`, pipelined 16 deep."""
    where = urlparse(url)
    stream = f"etude:bench:raw:{uuid.uuid4().hex[:8]}"
    argv = [str(binary), "-h", where.hostname or "127.0.0.1", "-p", str(where.port or 6379)]
    if where.password:
        argv += ["-a", where.password]
    argv += ["-n", str(requests), "-P", "16", "-q", "--csv", "XADD", stream, "*", "payload"]
    argv.append("x" * 1024)
    output = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=600)
    _delete_sync(url, stream)
    return parse_benchmark_csv(output.stdout)


def parse_benchmark_csv(text: str) -> float:
    """The rps column of redis-benchmark's CSV (7.x has a header row, 6.x does not)."""
    rows = [row for row in csv.reader(io.StringIO(text)) if len(row) >= 2]
    values = [row[1] for row in rows if row[0] != "test"]
    if not values:
        raise RuntimeError(f"no requests/s in redis-benchmark output:\n{text}")
    return float(values[-1])


def _delete_sync(url: str, key: str) -> None:
    with redis.Redis.from_url(url) as client:
        client.delete(key)


def _redis_version(url: str) -> str:
    with redis.Redis.from_url(url) as client:
        return str(client.info("server")["redis_version"])


def median_run(runs: list[QueueRun]) -> QueueRun:
    return sorted(runs, key=lambda run: run.entries_per_s)[len(runs) // 2]


async def measure_all(url: str, plan: Plan) -> tuple[dict[int, list[QueueRun]], list[QueueRun]]:
    """The queue's runs by payload size, and the raw same-command runs (1 KB)."""
    sizes = {1024: plan.entries_1k, 16 * 1024: plan.entries_16k}
    runs: dict[int, list[QueueRun]] = {size: [] for size in sizes}
    raw: list[QueueRun] = []
    for _repeat in range(plan.repeats):
        for size, entries in sizes.items():
            runs[size].append(await measure_queue(url, size, entries, plan.batch))
        raw.append(await measure_raw(url, 1024, plan.entries_1k, plan.batch))
    return runs, raw


def report(url: str, plan: Plan, quick: bool) -> dict:
    runs, raw = asyncio.run(measure_all(url, plan))
    one_k, sixteen_k = median_run(runs[1024]), median_run(runs[16 * 1024])
    raw_1k = median_run(raw)
    metrics: dict[str, dict] = {
        "queue_entries_per_s_1k": {"value": round(one_k.entries_per_s), "unit": "entries/s"},
        "queue_entries_per_s_16k": {"value": round(sixteen_k.entries_per_s), "unit": "entries/s"},
        "queue_vs_raw_same_commands_ratio": {
            "value": round(one_k.entries_per_s / raw_1k.entries_per_s, 4),
            "unit": "ratio",
            "baseline": round(raw_1k.entries_per_s),
            "target": 0.8,
        },
    }
    benchmark = find_redis_benchmark()
    baselines = []
    if benchmark is not None:
        for _repeat in range(plan.repeats):
            baselines.append(run_redis_benchmark(benchmark, url, plan.benchmark_requests))
        baseline = statistics.median(baselines)
        metrics["queue_vs_redis_benchmark_ratio"] = {
            "value": round(one_k.entries_per_s / baseline, 4),
            "unit": "ratio",
            "baseline": round(baseline),
        }
    return {
        "benchmark": "queue_throughput",
        "metrics": metrics,
        "notes": [] if benchmark else ["redis-benchmark not found: ratio omitted"],
        "redis_version": _redis_version(url),
        "quick": quick,
        "plan": asdict(plan),
        "redis_benchmark": str(benchmark) if benchmark else None,
        "redis_benchmark_xadd_per_s_runs": [round(value) for value in baselines],
        "queue_runs": {
            str(size): [{"entries": r.entries, "seconds": round(r.seconds, 3)} for r in size_runs]
            for size, size_runs in runs.items()
        },
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def print_table(result: dict) -> None:
    metrics = result["metrics"]
    table = Table(title="work queue throughput (put + get + ack, pipelined)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("unit")
    for name in ("queue_entries_per_s_1k", "queue_entries_per_s_16k"):
        table.add_row(name, f"{metrics[name]['value']:,}", metrics[name]["unit"])
    same = metrics["queue_vs_raw_same_commands_ratio"]
    table.add_row("raw redis-py, same commands, 1 KB", f"{same['baseline']:,}", "entries/s")
    table.add_row("queue_vs_raw_same_commands_ratio", f"{same['value']:.4f}", "ratio (≥ 0.8)")
    ratio = metrics.get("queue_vs_redis_benchmark_ratio")
    if ratio is None:
        table.add_row("redis-benchmark XADD 1 KB", "not run", "redis-benchmark not found")
        table.add_row("queue_vs_redis_benchmark_ratio", "omitted", "no baseline")
    else:
        table.add_row("redis-benchmark XADD 1 KB", f"{ratio['baseline']:,}", "requests/s")
        table.add_row("queue_vs_redis_benchmark_ratio", f"{ratio['value']:.4f}", "ratio")
    Console().print(table)


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--redis-url", help="an existing Redis (default: start one)")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    if args.redis_url:
        result = report(args.redis_url, plan, args.quick)
    else:
        with tempfile.TemporaryDirectory(prefix="etude-bench-") as data_dir:
            server = RedisServer(data_dir=Path(data_dir)).start()
            try:
                result = report(server.url, plan, args.quick)
            finally:
                server.stop()
    print_table(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
