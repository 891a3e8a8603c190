"""One client interface to the reward (`Scorer`), and its form over gRPC: rollout workers
grade a finished session through `GrpcReward`. In process, the grading core
(etude.reward.scoring) and the `sim` reward (etude.reward.sim) meet the same interface, and
the service serves either of them."""

from __future__ import annotations

from typing import Protocol

import grpc
from grpc import aio

from etude.api.v1 import common_pb2, reward_pb2, reward_pb2_grpc
from etude.common.grpc_client import open_channel
from etude.common.settings import ClientSettings
from etude.reward.types import Score


class Scorer(Protocol):
    async def score(
        self, task_id: str, *, session_id: str = "", patch: str = "", run_id: str = ""
    ) -> Score:
        """The score of the task's patch: `patch`, or else the session's diff. The task is
        one of those registered with `run_id` (empty: the bundled task sets)."""
        ...


class RewardRequestError(ValueError):
    """The reward service refused the request (unknown task or session, nothing to grade)."""


class TaskUngradableError(RuntimeError):
    """The reward service cannot grade the task at all: its repository or Python environment
    cannot be built there, or the service lacks what grading needs. No retry can succeed."""


class GrpcReward:
    """`run_id`: the run whose registered tasks this client's calls grade (a rollout worker
    and a trainer each speak for one run), unless a call names another."""

    def __init__(
        self, target: str, settings: ClientSettings | None = None, *, run_id: str = ""
    ) -> None:
        self.settings = settings or ClientSettings()
        self.run_id = run_id
        # Grading runs a test suite: more than an ordinary call's deadline.
        self.channel: aio.Channel = open_channel(
            target, self.settings, long_methods=("etude.api.v1.RewardService/Score",)
        )
        self.stub = reward_pb2_grpc.RewardServiceStub(self.channel)

    async def score(
        self, task_id: str, *, session_id: str = "", patch: str = "", run_id: str = "",
        timeout: float | None = None,
    ) -> Score:  # fmt: skip
        request = reward_pb2.ScoreRequest(
            task_id=common_pb2.TaskId(value=task_id), patch=patch, run_id=run_id or self.run_id
        )
        if session_id:
            request.session_id.value = session_id
        try:
            reply = await self.stub.Score(request, timeout=timeout)
        except aio.AioRpcError as error:
            if error.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                raise RewardRequestError(error.details()) from error
            if error.code() == grpc.StatusCode.FAILED_PRECONDITION:
                raise TaskUngradableError(error.details()) from error
            raise
        return Score(
            reward=reply.reward,
            components=dict(reply.components),
            fail_to_pass={o.test_id: o.passed for o in reply.fail_to_pass},
            pass_to_pass={o.test_id: o.passed for o in reply.pass_to_pass},
            seconds=reply.seconds,
            error=reply.error,
        )

    async def close(self) -> None:
        await self.channel.close()
