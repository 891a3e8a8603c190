"""A small real gRPC service for runtime tests: the reward service's contract
(`RewardService/Score`, a real served method the ACCESS table names) with a servicer that
answers after a delay named in the request, or fails with a chosen code a chosen number of
times, instead of grading.

`task_id.value` selects the behaviour: `sleep=<seconds>`, `fail=<CODE>x<times>`,
`not-found`, or anything else for an immediate answer. The reply's `reward` is how many
calls with that behaviour the servicer has seen (so a test can count retries). Run alone as
`python -m tests.support.probe_service`.
"""

from __future__ import annotations

import asyncio
from collections import Counter

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
    return [registration()]


if __name__ == "__main__":
    run_service("probe", _build)
