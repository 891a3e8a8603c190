"""Reward latency and task synthesis rate.

- Score p50/p99: the reward service runs as its own process (`python -m etude.reward`) and
  grades bundled etude-mini tasks over gRPC with their gold patches (a fresh copy of the
  base repository, the patch, the hidden tests in a sandbox). The first score of each task
  also builds its repository; the figures are taken after one warm-up pass.
- Tasks per minute: `kept_mutants` on bundled projects with as many workers as cores,
  counting tasks kept per minute of wall time (mutants rejected cost time too).

    python loadtests/reward_latency.py --quick --json out.json
"""

from __future__ import annotations

import asyncio
import os
import random
import tempfile
import time
from pathlib import Path

from benchlib import argument_parser, metric, percentile, print_metrics, start_service, write_json

from etude.api.v1 import common_pb2, reward_pb2, reward_pb2_grpc
from etude.common.grpc_client import open_channel
from etude.common.processes import terminate
from etude.common.settings import ClientSettings
from etude.sandbox.bwrap import find_bwrap
from etude.tasks.materialize import PROJECTS_DIR, TASKS_FILE
from etude.tasks.synth.synthesize import SynthOptions, kept_mutants, load_project
from etude.tasks.task import read_jsonl


async def score_latencies(address: str, tasks, repeats: int) -> list[float]:
    async with open_channel(address, ClientSettings()) as channel:
        stub = reward_pb2_grpc.RewardServiceStub(channel)

        async def score(task) -> float:
            start = time.perf_counter()
            reply = await stub.Score(
                reward_pb2.ScoreRequest(
                    task_id=common_pb2.TaskId(value=task.id), patch=task.gold_patch
                ),
                timeout=300,
            )
            if reply.reward != 1.0:
                raise RuntimeError(f"{task.id}: gold patch scored {reply.reward} {reply.error}")
            return (time.perf_counter() - start) * 1000

        for task in tasks:  # warm-up: builds each task's repository once
            await score(task)
        return [await score(task) for _ in range(repeats) for task in tasks]


def synthesis_rate(projects: list[str], per_project: int, workers: int) -> float:
    bwrap = find_bwrap(None)
    options = SynthOptions(seed=11, per_project=per_project, workers=workers)
    start, kept = time.perf_counter(), 0
    for name in projects:
        kept += sum(1 for _ in kept_mutants(load_project(PROJECTS_DIR / name), options, bwrap))
    return kept / ((time.perf_counter() - start) / 60)


def main() -> None:
    parser = argument_parser(__doc__)
    args = parser.parse_args()
    tasks = list(read_jsonl(TASKS_FILE))
    sample = random.Random(5).sample(tasks, 4 if args.quick else 12)
    projects = sorted({t.metadata["project"] for t in sample})[: 1 if args.quick else 3]
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)
        process, address = start_service(
            "etude.reward", workdir, ETUDE_REWARD__CACHE_DIR=str(workdir / "cache")
        )
        try:
            latencies = asyncio.run(score_latencies(address, sample, 1 if args.quick else 3))
        finally:
            terminate(process, timeout=20)
    rate = synthesis_rate(projects, 3 if args.quick else 6, os.cpu_count() or 1)
    metrics = {
        "score_p50_ms": metric(percentile(latencies, 50), "ms"),
        "score_p99_ms": metric(percentile(latencies, 99), "ms"),
        "tasks_per_minute": metric(rate, "tasks/min"),
    }
    print_metrics("reward latency and task synthesis", metrics)
    write_json(args.json, "reward_latency", metrics, quick=args.quick, cores=os.cpu_count())


if __name__ == "__main__":
    main()
