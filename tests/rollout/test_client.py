"""The rollout's public surface: the trainer's orchestrator is sized from the run's config,
and importing the surface for the schedule leaves the agent loop unloaded."""

from __future__ import annotations

import subprocess
import sys

import redis.asyncio as aioredis

from etude.common.run_config import RolloutConfig
from etude.common.settings import QueueSettings
from etude.rollout.client import Orchestrator, TaskCycle
from etude.rollout.streams import rollout_stream, trajectory_stream
from etude.tasks.materialize import TASKS_FILE
from etude.tasks.task import read_jsonl


def test_the_orchestrator_of_a_run_uses_its_streams_and_its_group_sizes():
    config = RolloutConfig(group_size=3, groups_per_step=2, over_provision=1, max_staleness=2)
    tasks = TaskCycle(list(read_jsonl(TASKS_FILE))[:2], seed=0)
    client = aioredis.Redis()  # connects on first use; nothing here uses it
    orchestrator = Orchestrator.for_run(client, "r1", tasks, config, QueueSettings(), hint_tier=2)
    assert (orchestrator.rollouts.stream, orchestrator.trajectories.stream) == (
        rollout_stream("r1"), trajectory_stream("r1"),
    )  # fmt: skip
    assert (orchestrator.group_size, orchestrator.in_flight_target) == (3, 3)
    assert (orchestrator.max_staleness, orchestrator.hint_tier, orchestrator.tasks) == (2, 2, tasks)


def test_importing_the_surface_does_not_load_the_agent_loop():
    code = (
        "import sys, etude.rollout.client, etude.rollout.types\n"
        "loaded = [m for m in ('etude.rollout.agent', 'etude.rollout.scripted', 'grpc', 'torch')"
        " if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
