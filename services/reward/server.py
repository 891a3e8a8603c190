"""gRPC servicer of the reward service: check the request, ask the scorer, count the outcome,
encode the score; errors → status codes.

The scorer is anything with the reward's client interface (`Scorer`): the grader on the
tasks' hidden tests (`RewardServicer`, etude.reward.scoring), or the `sim` reward
(etude.reward.sim)."""

from __future__ import annotations

import grpc

from etude.api.v1 import reward_pb2, reward_pb2_grpc
from etude.common.grpc_server import Registration
from etude.common.request_checks import InvalidFieldError, check_text
from etude.environment.client import EnvironmentClient
from etude.environment.types import SessionNotFoundError
from etude.reward.client import Scorer
from etude.reward.grader import Grader
from etude.reward.metrics import OUTCOMES, SCORE_SECONDS
from etude.reward.scoring import (
    NoEnvironmentError,
    NoRunTasksError,
    NothingToGradeError,
    TaskGrading,
)
from etude.reward.types import Score
from etude.tasks.materialize import MaterializeError
from etude.tasks.pyenv import EnvironmentBuildError
from etude.tasks.pyenv_marker import NotAnEnvironmentError
from etude.tasks.store import TaskNotFoundError, TaskStore
from etude.tasks.taskset import RunTasks

MAX_PATCH_BYTES = 16 << 20
"""A larger patch is refused before grading: applying and diffing it would hold the
grader's sandbox and memory for a change no episode makes."""

SERVICE_NAME = reward_pb2.DESCRIPTOR.services_by_name["RewardService"].full_name

_STATUS = {
    InvalidFieldError: grpc.StatusCode.INVALID_ARGUMENT,
    NothingToGradeError: grpc.StatusCode.INVALID_ARGUMENT,
    TaskNotFoundError: grpc.StatusCode.NOT_FOUND,
    SessionNotFoundError: grpc.StatusCode.NOT_FOUND,
    NoEnvironmentError: grpc.StatusCode.FAILED_PRECONDITION,
    NoRunTasksError: grpc.StatusCode.FAILED_PRECONDITION,
    # The task's repository or Python environment cannot be built here (no source of the
    # run's holds it on this machine, a package is nowhere to be found), or its environment
    # is of a Python the tests cannot run on here.
    MaterializeError: grpc.StatusCode.FAILED_PRECONDITION,
    EnvironmentBuildError: grpc.StatusCode.FAILED_PRECONDITION,
    NotAnEnvironmentError: grpc.StatusCode.FAILED_PRECONDITION,
}


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


def _check(request: reward_pb2.ScoreRequest) -> None:
    check_text(request.task_id.value, "task_id", required=True)
    check_text(request.session_id.value, "session_id")
    check_text(request.run_id, "run_id")
    if len(request.patch) > MAX_PATCH_BYTES:  # characters: at least as many bytes
        raise InvalidFieldError(f"patch is longer than {MAX_PATCH_BYTES} characters")


class ScoreServicer(reward_pb2_grpc.RewardServiceServicer):
    """RewardService over any scorer (the `sim` reward: `ScoreServicer(SimScorer(…))`)."""

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer

    async def Score(self, request, context):
        try:
            _check(request)
            score = await self.scorer.score(
                request.task_id.value, session_id=request.session_id.value, patch=request.patch,
                run_id=request.run_id,
            )  # fmt: skip
        except tuple(_STATUS) as error:
            await context.abort(_STATUS[type(error)], str(error))
        SCORE_SECONDS.observe(score.seconds)
        OUTCOMES.labels(score.result).inc()
        return score_to_proto(score)


class RewardServicer(ScoreServicer):
    """The service on the grader: a task by id from the task set registered with the
    request's run (`runs`; `tasks` when it names none), graded on the patch a call gives or
    on the session's diff from `environment`."""

    def __init__(
        self,
        grader: Grader,
        tasks: TaskStore,
        environment: EnvironmentClient | None,
        runs: RunTasks | None = None,
    ) -> None:
        super().__init__(TaskGrading(grader, tasks, environment, runs))
        self.tasks = tasks


def registration(servicer: ScoreServicer) -> Registration:
    return Registration(servicer, reward_pb2_grpc.add_RewardServiceServicer_to_server, SERVICE_NAME)
