"""A run's two streams and their consumer groups: rollout entries (orchestrator → rollout
workers) and trajectories (rollout workers → trainer)."""

from __future__ import annotations

import redis.asyncio as aioredis

from etude.common.payloads import RolloutRequest, Trajectory
from etude.common.queue import WorkQueue
from etude.common.settings import QueueSettings

ROLLOUT_GROUP = "rollout"
TRAINER_GROUP = "trainer"


def rollout_stream(run_id: str) -> str:
    return f"etude:{run_id}:rollouts"


def trajectory_stream(run_id: str) -> str:
    return f"etude:{run_id}:trajectories"


def rollout_key(request: RolloutRequest) -> str:
    """Identifies one rollout across retries: the idempotency key of its entry and of its
    trajectory."""
    return f"{request.run_id}:{request.group_id}:{request.sample_index}"


def rollout_queue(
    client: aioredis.Redis, run_id: str, consumer: str, settings: QueueSettings
) -> WorkQueue:
    return WorkQueue(
        client, rollout_stream(run_id), ROLLOUT_GROUP, consumer, (RolloutRequest,), settings
    )


def trajectory_queue(
    client: aioredis.Redis, run_id: str, consumer: str, settings: QueueSettings
) -> WorkQueue:
    return WorkQueue(
        client, trajectory_stream(run_id), TRAINER_GROUP, consumer, (Trajectory,), settings
    )
