"""The reward's grading core, what the service serves by default behind the `Scorer`
interface (client.py): the task by id, the patch given or the session's diff from the
environment, graded by the grader (grader.py). The `sim` reward (sim.py) meets the same
interface."""

from __future__ import annotations

from etude.environment.client import EnvironmentClient
from etude.reward.grader import Grader
from etude.reward.types import Score
from etude.tasks.store import TaskStore


class NothingToGradeError(ValueError):
    """The call gives neither a patch nor a session to take one from."""


class NoEnvironmentError(RuntimeError):
    """A session's patch is asked for and no environment is configured."""


class TaskGrading:
    """A `Scorer` on the grader."""

    def __init__(
        self, grader: Grader, tasks: TaskStore, environment: EnvironmentClient | None
    ) -> None:
        self.grader = grader
        self.tasks = tasks
        self.environment = environment

    async def score(self, task_id: str, *, session_id: str = "", patch: str = "") -> Score:
        """Raises TaskNotFoundError, NothingToGradeError, NoEnvironmentError, and the
        environment's SessionNotFoundError."""
        task = self.tasks.get(task_id)
        if not patch:
            patch = await self._session_patch(session_id)
        return await self.grader.score(task, patch)

    async def _session_patch(self, session_id: str) -> str:
        if not session_id:
            raise NothingToGradeError("give a session_id or a patch to grade")
        if self.environment is None:
            raise NoEnvironmentError(
                "no environment configured (ETUDE_REWARD__ENVIRONMENT_ADDRESS)"
            )
        return (await self.environment.diff(session_id)).unified_diff
