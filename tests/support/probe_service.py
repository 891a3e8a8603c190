"""A small real gRPC service for runtime tests: TrainerService whose Status answers after
a delay named in the request, or fails with a chosen code a chosen number of times.

`run_id.value` selects the behaviour: `sleep=<seconds>`, `fail=<CODE>x<times>`, or
anything else for an immediate answer. Run alone as `python -m tests.support.probe_service`.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import grpc

from etude.api.v1 import common_pb2, trainer_pb2, trainer_pb2_grpc
from etude.common.grpc_server import Registration, run_service
from etude.common.settings import EtudeSettings

SERVICE_NAME = trainer_pb2.DESCRIPTOR.services_by_name["TrainerService"].full_name


class ProbeTrainer(trainer_pb2_grpc.TrainerServiceServicer):
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    async def Status(self, request, context):
        behaviour = request.run_id.value
        self.calls[behaviour] += 1
        if behaviour.startswith("sleep="):
            await asyncio.sleep(float(behaviour.removeprefix("sleep=")))
        elif behaviour.startswith("fail="):
            code, _, times = behaviour.removeprefix("fail=").partition("x")
            if self.calls[behaviour] <= int(times):
                await context.abort(grpc.StatusCode[code], f"planned failure {code}")
        elif behaviour == "not-found":
            await context.abort(grpc.StatusCode.NOT_FOUND, "no such run")
        return trainer_pb2.StatusResponse(
            run_id=common_pb2.RunId(value=behaviour), step=self.calls[behaviour]
        )


def registration(servicer: ProbeTrainer | None = None) -> Registration:
    return Registration(
        servicer or ProbeTrainer(),
        trainer_pb2_grpc.add_TrainerServiceServicer_to_server,
        SERVICE_NAME,
    )


async def _build(settings: EtudeSettings, resources: object) -> list[Registration]:
    return [registration()]


if __name__ == "__main__":
    run_service("probe", _build)
