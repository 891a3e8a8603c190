"""The rollout worker: takes rollout entries from the queue, runs each as an episode, writes
its trajectory to the trajectories stream, and only then acknowledges the entry.

Many episodes run at once (asyncio, at most `concurrency`). While one runs, its entry is
touched every `heartbeat_seconds` so no other worker reclaims it from a live worker; a
worker killed mid-episode stops touching, and another worker reclaims the entry after the
queue's `claim_idle_seconds` and runs it again. The trajectory is written with the entry's
key as idempotency key, so a worker that died between writing and acknowledging leaves one
trajectory, not two. A failure (a dead service, a session that broke) gives the entry back
for a retry, and the queue dead-letters it after `max_deliveries`. On stop, no new entry is
taken and the episodes in flight finish.

A task is looked up in the task set registered with the run the entry names
(etude.tasks.taskset.RunTasks), and built from the sources registered with it. An entry
whose task the run does not have, whose repository or Python environment cannot be built,
or that the reward service cannot grade at all, can never succeed: retrying it would only
dead-letter it while the run waits for its group forever. The worker fails the run at once,
with the reason (`etude runs show` says it; the trainer stops), then acknowledges the entry:
its outcome is recorded there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from etude.common.payloads import RolloutRequest
from etude.common.queue import Delivery, QueueUnavailableError, WorkQueue, raise_if_cancelled
from etude.common.queue_metrics import export_queue_stats_forever
from etude.reward.client import TaskUngradableError
from etude.rollout import metrics
from etude.rollout.agent import EpisodeRunner, TurnSampler
from etude.rollout.groups import oldest_version
from etude.rollout.streams import rollout_key
from etude.tasks.store import TaskNotFoundError
from etude.tasks.task import Task

log = logging.getLogger(__name__)


class StaleRolloutError(RuntimeError):
    """A rollout sampled a token older than its entry's `min_policy_version` allows."""


class TaskUnusableError(RuntimeError):
    """A task's repository or Python environment cannot be built: no attempt of the task
    can run."""


TaskLookup = Callable[[str, str], Awaitable[Task]]
"""(run id, task id) → the task, from the run's registered task set; TaskNotFoundError."""
RunFailer = Callable[[str, str], Awaitable[None]]
"""(run id, reason): record the run as failed."""


class RolloutWorker:
    def __init__(
        self,
        *,
        rollouts: WorkQueue,
        trajectories: WorkQueue,
        runner: EpisodeRunner,
        tasks: TaskLookup,
        fail_run: RunFailer,
        sampler_for: Callable[[RolloutRequest], TurnSampler],
        policy_version: Callable[[], Awaitable[int]],
        concurrency: int = 8,
        heartbeat_seconds: float = 5.0,
        poll_ms: int = 500,
        policy_poll_seconds: float = 0.2,
    ) -> None:
        self.rollouts = rollouts
        self.trajectories = trajectories
        self.runner = runner
        self.tasks = tasks
        self.fail_run = fail_run
        self.sampler_for = sampler_for
        self.policy_version = policy_version
        self.concurrency = concurrency
        self.heartbeat_seconds = heartbeat_seconds
        self.poll_ms = poll_ms
        self.policy_poll_seconds = policy_poll_seconds
        self.completed = 0
        self.failed = 0
        """Rollouts given back (to be retried or dead-lettered)."""

    async def run(self, stop: asyncio.Event) -> None:
        await self.rollouts.ensure_group()
        await self.trajectories.ensure_group()
        # Queue depth, lag and pending on this worker's /metrics: what KEDA and the queue
        # dashboard read to size rollout capacity.
        gauges = asyncio.create_task(export_queue_stats_forever(self.rollouts))
        try:
            await self._consume(stop)
        finally:
            gauges.cancel()

    async def _consume(self, stop: asyncio.Event) -> None:
        running: set[asyncio.Task[None]] = set()
        try:
            await self._take(stop, running)
        except asyncio.CancelledError:  # cancelled: its episodes too (their entries stay
            for task in running:  # pending, and a live worker reclaims them)
                task.cancel()
            raise
        if running:  # stop: finish what was started, take nothing new
            await asyncio.gather(*running, return_exceptions=True)

    async def _take(self, stop: asyncio.Event, running: set[asyncio.Task[None]]) -> None:
        while not stop.is_set():
            raise_if_cancelled()
            if len(running) >= self.concurrency:
                await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                continue
            try:
                deliveries = await self.rollouts.get(
                    count=self.concurrency - len(running), block_ms=self.poll_ms
                )
            except QueueUnavailableError as error:
                log.warning("rollout queue unavailable, retrying: %s", error)
                await asyncio.sleep(1.0)
                continue
            for delivery in deliveries:
                task = asyncio.create_task(self._handle(delivery))
                running.add(task)
                task.add_done_callback(running.discard)

    async def _handle(self, delivery: Delivery) -> None:
        request = delivery.payload
        assert isinstance(request, RolloutRequest)
        metrics.IN_FLIGHT.inc()
        heartbeat = asyncio.create_task(self._heartbeat(delivery.entry_id))
        started = time.perf_counter()
        try:
            task = await self.tasks(request.run_id, request.task_id)
            await self._wait_for_policy(request.min_policy_version)
            metrics.QUEUE_WAIT_SECONDS.observe(max(0.0, time.time() - delivery.enqueued_ms / 1000))
            trajectory = await self.runner.run(request, task, self.sampler_for(request))
            oldest = oldest_version(trajectory)  # -1: the policy sampled nothing
            if 0 <= oldest < request.min_policy_version:
                # An engine behind the trainer sampled part of it: never train on that.
                raise StaleRolloutError(
                    f"tokens of version {oldest}, the entry allows"
                    f" {request.min_policy_version} or newer"
                )
            await self.trajectories.put(trajectory, key=rollout_key(request))
            await self.rollouts.ack(delivery.entry_id)
            self.completed += 1
            metrics.ROLLOUT_SECONDS.observe(time.perf_counter() - started)
        except (TaskNotFoundError, TaskUnusableError, TaskUngradableError) as error:
            await self._end_run(delivery, request, type(error).__name__, str(error))
        except Exception as error:
            kind = type(error).__name__
            self.failed += 1
            metrics.FAILURES.labels(kind).inc()
            log.warning("rollout %s failed (%s: %s)", rollout_key(request), kind, error)
            # If Redis is down the entry stays pending and is reclaimed once it is back.
            with contextlib.suppress(QueueUnavailableError):
                await self.rollouts.fail(delivery.entry_id, f"{kind}: {error}")
        finally:
            heartbeat.cancel()
            metrics.IN_FLIGHT.dec()

    async def _end_run(
        self, delivery: Delivery, request: RolloutRequest, kind: str, error: str
    ) -> None:
        """Fail the run for good, then take the entry off the queue (its outcome is the run's
        recorded failure). If the failure cannot be recorded, the entry goes back instead."""
        self.failed += 1
        metrics.FAILURES.labels(kind).inc()
        reason = f"{kind}: {error}"
        log.error("run %s cannot go on: rollout %s: %s", request.run_id,
                  rollout_key(request), reason)  # fmt: skip
        try:
            await self.fail_run(request.run_id, f"rollout {rollout_key(request)}: {reason}")
            await self.rollouts.ack(delivery.entry_id)
        except Exception as error:  # Redis away: a retry finds the task missing again
            log.warning("could not fail run %s (%s); the entry goes back", request.run_id, error)
            with contextlib.suppress(QueueUnavailableError):
                await self.rollouts.fail(delivery.entry_id, reason)

    async def _heartbeat(self, entry_id: str) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_seconds)
            try:
                await self.rollouts.touch(entry_id)
            except QueueUnavailableError:
                continue

    async def _wait_for_policy(self, min_version: int) -> None:
        """Bounded staleness at start: never begin on a policy older than the entry allows
        (inference may not have received the trainer's newest weights yet)."""
        while await self.policy_version() < min_version:
            await asyncio.sleep(self.policy_poll_seconds)
