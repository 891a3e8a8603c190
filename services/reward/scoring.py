"""The reward's grading core, what the service serves by default behind the `Scorer`
interface (client.py): the task by id from the task set registered with the request's run
(etude.tasks.taskset.RunTasks; without a run, the bundled task sets), the patch given or the
session's diff from the environment, graded by the grader (grader.py). The `sim` reward
(sim.py) meets the same interface."""

from __future__ import annotations

from etude.environment.client import EnvironmentClient
from etude.reward.grader import Grader
from etude.reward.types import Score
from etude.tasks.store import TaskStore
from etude.tasks.task import Task
from etude.tasks.taskset import RunTasks


class NothingToGradeError(ValueError):
    """The call gives neither a patch nor a session to take one from."""


class NoEnvironmentError(RuntimeError):
    """A session's patch is asked for and no environment is configured."""


class NoRunTasksError(RuntimeError):
    """A run's task is asked for and the service has no Redis to read run task sets from."""


class TaskGrading:
    """A `Scorer` on the grader."""

    def __init__(
        self,
        grader: Grader,
        tasks: TaskStore,
        environment: EnvironmentClient | None,
        runs: RunTasks | None = None,
    ) -> None:
        self.grader = grader
        self.tasks = tasks
        """What a request naming no run grades (the bundled sets: a smoke check, a gold
        patch graded by hand)."""
        self.runs = runs
        self.environment = environment

    async def task(self, task_id: str, run_id: str) -> Task:
        if not run_id:
            return self.tasks.get(task_id)
        if self.runs is None:
            raise NoRunTasksError(f"asked for a task of run {run_id!r}; no Redis to read it")
        return await self.runs.get(run_id, task_id)

    async def score(
        self, task_id: str, *, session_id: str = "", patch: str = "", run_id: str = ""
    ) -> Score:
        """Raises TaskNotFoundError, NothingToGradeError, NoEnvironmentError, the
        environment's SessionNotFoundError, and MaterializeError or EnvironmentBuildError
        when the task cannot be built here."""
        task = await self.task(task_id, run_id)
        # A run's task is built from where the run says (its registered sources), into an
        # environment of its dependencies where the run wants one.
        provisioning = await self.runs.provisioning(run_id) if run_id and self.runs else None
        if not patch:
            patch = await self._session_patch(session_id)
        return await self.grader.score(task, patch, provisioning)

    async def _session_patch(self, session_id: str) -> str:
        if not session_id:
            raise NothingToGradeError("give a session_id or a patch to grade")
        if self.environment is None:
            raise NoEnvironmentError(
                "no environment configured (ETUDE_REWARD__ENVIRONMENT_ADDRESS)"
            )
        return (await self.environment.diff(session_id)).unified_diff
