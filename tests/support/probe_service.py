"""A small real gRPC service for runtime tests: the reward service's contract
(`RewardService/Score`, a real served method the ACCESS table names) with a servicer that
answers after a delay named in the request, or fails with a chosen code a chosen number of
times, instead of grading.

`task_id.value` selects the behaviour: `sleep=<seconds>`, `fail=<CODE>x<times>`,
`not-found`, or anything else for an immediate answer. The reply's `reward` is how many
calls with that behaviour the servicer has seen (so a test can count retries). Run alone as
`python -m tests.support.probe_service`.

Two variables make it start like an inference service with an engine process:
`PROBE_STUBBORN_CHILD=<file>` starts a child that ignores SIGTERM and has no parent-death
signal (as vLLM's engine core), its pid appended to the file; `PROBE_NEVER_READY=1` then never
serves (a stuck start), and `PROBE_BUSY_SECONDS=<s>` computes that long first (a slow start
that shows progress). `PROBE_DIES_AFTER=<s>` makes it report that it can no longer serve
that long after it started (health turns NOT_SERVING, as when an engine dies).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import grpc

from etude.api.v1 import common_pb2, reward_pb2, reward_pb2_grpc
from etude.common.grpc_server import Registration, run_service
from etude.common.settings import EtudeSettings

SERVICE_NAME = reward_pb2.DESCRIPTOR.services_by_name["RewardService"].full_name
METHOD = "Score"


def probe_request(behaviour: str) -> reward_pb2.ScoreRequest:
    return reward_pb2.ScoreRequest(task_id=common_pb2.TaskId(value=behaviour))


class ProbeServicer(reward_pb2_grpc.RewardServiceServicer):
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    async def Score(self, request, context):
        behaviour = request.task_id.value
        self.calls[behaviour] += 1
        if behaviour.startswith("sleep="):
            await asyncio.sleep(float(behaviour.removeprefix("sleep=")))
        elif behaviour.startswith("fail="):
            code, _, times = behaviour.removeprefix("fail=").partition("x")
            if self.calls[behaviour] <= int(times):
                await context.abort(grpc.StatusCode[code], f"planned failure {code}")
        elif behaviour == "not-found":
            await context.abort(grpc.StatusCode.NOT_FOUND, "no such task")
        return reward_pb2.ScoreResponse(reward=self.calls[behaviour])


def registration(servicer: ProbeServicer | None = None) -> Registration:
    return Registration(
        servicer or ProbeServicer(),
        reward_pb2_grpc.add_RewardServiceServicer_to_server,
        SERVICE_NAME,
    )


async def _build(settings: EtudeSettings, resources: object) -> list[Registration]:
    if "PROBE_DIES_AFTER" not in os.environ:
        return [registration()]
    dies_at = time.monotonic() + float(os.environ["PROBE_DIES_AFTER"])
    alive = registration()
    return [Registration(alive.servicer, alive.add_to_server, alive.service_name,
                         alive=lambda: time.monotonic() < dies_at)]  # fmt: skip


STUBBORN_CHILD = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"
)


def _start_stubborn_child(pid_file: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", STUBBORN_CHILD], stdin=subprocess.DEVNULL)
    with pid_file.open("a") as pids:  # one line per start: a retried start starts another
        pids.write(f"{child.pid}\n")


if __name__ == "__main__":
    if os.environ.get("PROBE_STUBBORN_CHILD"):
        _start_stubborn_child(Path(os.environ["PROBE_STUBBORN_CHILD"]))
    if os.environ.get("PROBE_NEVER_READY"):
        time.sleep(3600)
    busy_until = time.monotonic() + float(os.environ.get("PROBE_BUSY_SECONDS", "0"))
    while time.monotonic() < busy_until:
        sum(range(10_000))
    run_service("probe", _build)
