"""gRPC servicer of the reward service."""

from __future__ import annotations

import grpc

from etude.api.v1 import reward_pb2, reward_pb2_grpc
from etude.common.grpc_server import Registration
from etude.common.request_checks import InvalidFieldError, check_text
from etude.environment.client import EnvironmentClient
from etude.environment.types import SessionNotFoundError
from etude.reward.grader import Grader
from etude.reward.metrics import OUTCOMES, SCORE_SECONDS
from etude.reward.types import Score
from etude.tasks.store import TaskNotFoundError, TaskStore

MAX_PATCH_BYTES = 16 << 20
"""A larger patch is refused before grading: applying and diffing it would hold the
grader's sandbox and memory for a change no episode makes."""

SERVICE_NAME = reward_pb2.DESCRIPTOR.services_by_name["RewardService"].full_name


def score_to_proto(score: Score) -> reward_pb2.ScoreResponse:
    def outcomes(group: dict[str, bool]) -> list[reward_pb2.TestOutcome]:
        return [reward_pb2.TestOutcome(test_id=t, passed=p) for t, p in group.items()]

    return reward_pb2.ScoreResponse(
        reward=score.reward,
        components=score.components,
        fail_to_pass=outcomes(score.fail_to_pass),
        pass_to_pass=outcomes(score.pass_to_pass),
        seconds=score.seconds,
        error=score.error,
    )


class RewardServicer(reward_pb2_grpc.RewardServiceServicer):
    def __init__(
        self, grader: Grader, tasks: TaskStore, environment: EnvironmentClient | None
    ) -> None:
        self.grader = grader
        self.tasks = tasks
        self.environment = environment

    async def Score(self, request, context):
        try:
            check_text(request.task_id.value, "task_id", required=True)
            check_text(request.session_id.value, "session_id")
            if len(request.patch) > MAX_PATCH_BYTES:  # characters: at least as many bytes
                raise InvalidFieldError(f"patch is longer than {MAX_PATCH_BYTES} characters")
        except InvalidFieldError as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        try:
            task = self.tasks.get(request.task_id.value)
        except TaskNotFoundError as error:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(error))
        patch = request.patch
        if not patch:
            if not request.session_id.value:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT, "give a session_id or a patch to grade"
                )
            if self.environment is None:
                await context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    "no environment configured (ETUDE_REWARD__ENVIRONMENT_ADDRESS)",
                )
            try:
                patch = (await self.environment.diff(request.session_id.value)).unified_diff
            except SessionNotFoundError as error:
                await context.abort(grpc.StatusCode.NOT_FOUND, str(error))
        score = await self.grader.score(task, patch)
        SCORE_SECONDS.observe(score.seconds)
        OUTCOMES.labels(score.result).inc()
        return score_to_proto(score)


def registration(servicer: RewardServicer) -> Registration:
    return Registration(servicer, reward_pb2_grpc.add_RewardServiceServicer_to_server, SERVICE_NAME)
