"""`python -m etude.reward`: the reward service on its own."""

from __future__ import annotations

import contextlib

from etude.common.grpc_server import Registration, run_service
from etude.environment.client import GrpcEnvironment
from etude.environment.sandbox.bwrap import find_bwrap
from etude.reward.config import RewardSettings
from etude.reward.grader import Grader
from etude.reward.server import RewardServicer, registration
from etude.reward.store import TaskStore


async def build(
    settings: RewardSettings, resources: contextlib.AsyncExitStack
) -> list[Registration]:
    config = settings.resolved()
    environment = None
    if config.environment_address:
        environment = GrpcEnvironment(config.environment_address, settings.client)
        resources.push_async_callback(environment.close)
    sandbox = settings.environment  # the sessions' limits, binds and backend
    bwrap = None if sandbox.backend == "process" else find_bwrap(sandbox.bwrap_path)
    grader = Grader(config, bwrap, sandbox)
    return [registration(RewardServicer(grader, TaskStore(config.tasks_files), environment))]


if __name__ == "__main__":
    run_service("reward", build, RewardSettings())
