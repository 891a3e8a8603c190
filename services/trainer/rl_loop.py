"""The RL steps, whatever trains and wherever the weights go: a `TrainingRun` runs it with
the policy trainer and the inference endpoints, the simulated fleet
(`loadtests/rollout_sim.py`) with a trainer and engines that only take simulated time.

    wait for complete groups → (overlapping schedules: queue the next step's rollouts)
    → train → publish version v+1 → (sync: queue the next step's rollouts, now on v+1)

With the `sync` schedule nothing generates while the trainer trains: the next step's
rollouts are queued once the new version is published. With `async` and `async_partial`
they are queued as soon as a batch is taken, to run on the current version while the
trainer trains (at most `max_staleness` versions behind the trainer when they are used), and
while it trains the orchestrator keeps taking trajectories in and queueing groups in the
places of finished ones.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from etude.common.payloads import Trajectory
from etude.rollout.client import Orchestrator
from etude.rollout.types import WaitedBatch
from etude.trainer.trainer import StepStats


@dataclass(frozen=True, slots=True)
class StepDone:
    step: int
    version: int
    """The version the step published."""
    waited: WaitedBatch
    stats: StepStats
    sync_seconds: float
    elapsed: float
    """Seconds since the loop started."""


class RLLoop:
    def __init__(
        self,
        orchestrator: Orchestrator,
        train: Callable[[list[list[Trajectory]]], StepStats],
        publish: Callable[[], Awaitable[tuple[int, float]]],
    ) -> None:
        """`train` runs in a thread (it blocks); `publish` returns the version it published
        and its seconds."""
        self.orchestrator = orchestrator
        self.train = train
        self.publish = publish
        self.stop_check_seconds = 1.0

    async def run(
        self,
        *,
        step: int,
        version: int,
        steps: int,
        stop_requested: Callable[[], Awaitable[bool]],
        on_trained: Callable[[int, list[list[Trajectory]], StepStats], None] = lambda *_: None,
        on_step: Callable[[StepDone], Awaitable[None]],
    ) -> int:
        """Steps from `step` (the trainer at `version`) until `steps` or a stop request;
        returns the last step. `on_trained` sees each batch before its weights go out.
        `stop_requested` is asked before each step and about once a second while the loop
        waits for rollouts, so a stop does not wait for workers that may be gone (an
        exception it raises, a run failed elsewhere, ends the loop)."""
        orchestrator = self.orchestrator
        started = time.perf_counter()
        await orchestrator.schedule(version)
        asked = time.monotonic()

        async def give_up() -> bool:
            nonlocal asked
            if time.monotonic() - asked < self.stop_check_seconds:
                return False
            asked = time.monotonic()
            return await stop_requested()

        while step < steps and not await stop_requested():
            waited = await orchestrator.next_batch(version, give_up)
            if waited is None:
                break
            more = step + 1 < steps  # the last step leaves no rollouts behind
            groups = [g.trajectories for g in waited.batch.groups]
            trained = asyncio.Event()  # meanwhile (unless sync) the next step's rollouts run
            collecting = asyncio.create_task(
                orchestrator.collect_until(trained, version + 1, top_up=more)
            )
            try:
                stats = await asyncio.to_thread(self.train, groups)
                step += 1
                on_trained(step, groups, stats)
                version, sync_seconds = await self.publish()
            finally:
                trained.set()
                await collecting
            if more and not orchestrator.overlaps_training:
                await orchestrator.schedule(version)
            elapsed = time.perf_counter() - started
            await on_step(StepDone(step, version, waited, stats, sync_seconds, elapsed))
        return step
