"""`python -m etude.reward`: the reward service on its own — the grader, or the `sim` reward
(`ETUDE_REWARD__BACKEND=sim`, `ETUDE_SIM__*`)."""

from __future__ import annotations

import contextlib
import logging

from etude.common.grpc_server import Registration, run_service
from etude.common.logging import log_fields
from etude.common.queue import queue_client
from etude.environment.client import GrpcEnvironment
from etude.reward.config import RewardSettings
from etude.reward.grader import Grader, reclaim_leftovers
from etude.reward.server import RewardServicer, ScoreServicer, registration
from etude.reward.sim import SimScorer
from etude.sandbox.bwrap import configured_bwrap
from etude.tasks.store import TaskStore
from etude.tasks.taskset import RunTasks

log = logging.getLogger(__name__)


async def build(
    settings: RewardSettings, resources: contextlib.AsyncExitStack
) -> list[Registration]:
    config = settings.resolved()
    if config.backend == "sim":
        scenario, clock = settings.sim.load()
        return [registration(ScoreServicer(SimScorer(scenario, clock)))]
    environment = None
    if config.environment_address:
        environment = GrpcEnvironment(config.environment_address, settings.client)
        resources.push_async_callback(environment.close)
    sandbox = settings.sandbox.for_grading()
    grader = Grader(config, configured_bwrap(sandbox), sandbox)
    if found := reclaim_leftovers(config):
        log.info(
            "reclaimed what killed graders left",
            extra=log_fields(scratch=found.directories, cgroups=found.cgroups,
                             processes=found.processes),
        )  # fmt: skip
    # Tasks come from the task set registered with the run a request names, in Redis.
    redis = queue_client(settings.redis.url)
    resources.push_async_callback(redis.aclose)
    tasks = TaskStore(config.tasks_files)
    return [registration(RewardServicer(grader, tasks, environment, RunTasks(redis)))]


if __name__ == "__main__":
    run_service("reward", build, RewardSettings())
