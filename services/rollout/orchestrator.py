"""The orchestrator: schedules GRPO groups of rollouts onto the queue and gathers their
trajectories into the trainer's batches.

It keeps `groups_per_step + over_provision` groups in flight; the trainer steps as soon as
`groups_per_step` of them are complete, and stragglers feed the next step (GroupCollector).
Every rollout entry carries `min_policy_version = trainer version − max_staleness`: a worker
never starts it on an older policy. Trajectory entries are acknowledged only after the step
that used them is checkpointed, so a trainer that crashes mid-step finds them again; those of
groups already trained on (recorded in the checkpoint) are acknowledged and dropped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from etude.common.payloads import RolloutRequest, Trajectory
from etude.common.queue import WorkQueue
from etude.rollout.groups import GroupCollector, StepBatch
from etude.rollout.streams import rollout_key
from etude.tasks.draw import round_robin
from etude.tasks.task import Task


@dataclass(slots=True)
class TaskCycle:
    """Training tasks, one project after another in turn (so a step's groups come from
    different projects), in an order reshuffled for each pass; the cursor alone says where
    a resumed run goes on."""

    tasks: list[Task]
    seed: int
    cursor: int = 0
    _order: list[Task] = field(default_factory=list)
    _epoch: int = -1

    def next(self) -> Task:
        epoch, position = divmod(self.cursor, len(self.tasks))
        if epoch != self._epoch:
            self._order = round_robin(self.tasks, f"{self.seed}/pass-{epoch}")
            self._epoch = epoch
        self.cursor += 1
        return self._order[position]


@dataclass(frozen=True, slots=True)
class WaitedBatch:
    batch: StepBatch
    entry_ids: list[str]
    waited_seconds: float
    """How long the trainer sat idle waiting for this batch."""


class Orchestrator:
    def __init__(
        self,
        *,
        run_id: str,
        rollouts: WorkQueue,
        trajectories: WorkQueue,
        tasks: TaskCycle,
        group_size: int,
        groups_per_step: int,
        over_provision: int,
        max_staleness: int,
        hint_tier: int = 0,
        poll_ms: int = 500,
    ) -> None:
        self.run_id = run_id
        self.rollouts = rollouts
        self.trajectories = trajectories
        self.tasks = tasks
        self.group_size = group_size
        self.in_flight_target = groups_per_step + over_provision
        self.max_staleness = max_staleness
        self.poll_ms = poll_ms
        # The hint tier new rollouts are scheduled at (a curriculum lowers it as the run
        # improves); groups already queued keep theirs.
        self.hint_tier = hint_tier
        self.collector = GroupCollector(groups_per_step)
        self.next_group = 0
        self._entries: dict[str, list[str]] = {}  # group id -> its trajectory entry ids
        self._dropped: list[str] = []  # late or duplicate entries, acknowledged after the step

    async def start(self) -> None:
        await self.rollouts.ensure_group()
        await self.trajectories.ensure_group()

    async def schedule(self, trainer_version: int) -> int:
        """Queue new groups until `in_flight_target` are open; returns how many were added."""
        added = []
        while self.collector.open_groups + len(added) < self.in_flight_target:
            task = self.tasks.next()
            group_id = f"g{self.next_group:06d}-{task.id}"
            self.next_group += 1
            added.append((group_id, task))
        items = []
        for group_id, task in added:
            self.collector.expect(group_id, self.group_size)
            for index in range(self.group_size):
                request = RolloutRequest(
                    run_id=self.run_id, task_id=task.id, group_id=group_id, sample_index=index,
                    min_policy_version=max(0, trainer_version - self.max_staleness),
                    hint_tier=self.hint_tier,
                )  # fmt: skip
                items.append((request, rollout_key(request)))
        if items:
            await self.rollouts.put_many(items)
        return len(added)

    async def next_batch(self, trainer_version: int) -> WaitedBatch:
        """Wait until enough groups are complete; the oldest of them, with their entry ids."""
        started = time.perf_counter()
        while (batch := self.collector.take(trainer_version)) is None:
            for delivery in await self.trajectories.get(count=64, block_ms=self.poll_ms):
                trajectory = delivery.payload
                assert isinstance(trajectory, Trajectory)
                if trajectory.run_id != self.run_id or not self._accept(trajectory):
                    self._dropped.append(delivery.entry_id)
                else:
                    self._entries.setdefault(trajectory.group_id, []).append(delivery.entry_id)
        entry_ids = [e for g in batch.groups for e in self._entries.pop(g.group_id, [])]
        return WaitedBatch(batch, entry_ids, time.perf_counter() - started)

    def _accept(self, trajectory: Trajectory) -> bool:
        try:
            return self.collector.add(trajectory)
        except KeyError:  # a group this run no longer expects (scheduled before a resume)
            return False

    async def acknowledge(self, waited: WaitedBatch) -> None:
        """After the step that used the batch is checkpointed: its entries are done."""
        dropped, self._dropped = self._dropped, []
        await self.trajectories.ack(*waited.entry_ids, *dropped)

    # -- resume ------------------------------------------------------------------------

    def snapshot(self) -> dict:
        return {
            "groups": self.collector.snapshot(),
            "next_group": self.next_group,
            "task_cursor": self.tasks.cursor,
            "hint_tier": self.hint_tier,
        }

    def restore(self, snapshot: dict) -> None:
        self.collector.restore(snapshot["groups"])
        self.next_group = snapshot["next_group"]
        self.tasks.cursor = snapshot["task_cursor"]
        # Checkpoints written before tiers existed ran at the configured tier.
        self.hint_tier = snapshot.get("hint_tier", self.hint_tier)
