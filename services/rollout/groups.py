"""Collecting rollouts into GRPO groups for the trainer, with stragglers and staleness.

The orchestrator schedules more groups than one step needs (over-provisioning). The trainer
steps as soon as `groups_per_step` groups are complete; groups still running then are not
waited for — they complete later and feed the next step, their staleness (how many versions
old their oldest token is when the trainer uses them) recorded. Within a group, a rollout
that arrives after the group was handed to the trainer is kept aside, counted, and never
handed out twice.

Staleness is bounded per token: a token sampled more than `max_staleness` versions before
the trainer's is left out of the loss, and the rest of its trajectory is trained. A
heavy-tailed episode can outlive many steps; dropping its whole group would throw away the
longest (costliest) episodes and bias the batch towards short ones. Only a group with no
token recent enough left is dropped.
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import compress

import msgspec

from etude.common.payloads import Trajectory
from etude.rollout.types import Group, StepBatch


def oldest_version(trajectory: Trajectory) -> int:
    """The oldest version among the tokens the policy sampled; -1 when it sampled none."""
    return min(compress(trajectory.policy_versions, trajectory.loss_mask), default=-1)


def newest_version(trajectory: Trajectory) -> int:
    return max(compress(trajectory.policy_versions, trajectory.loss_mask), default=-1)


def may_start(policy_version: int, trainer_version: int, max_staleness: int) -> bool:
    """Whether a rollout may start on `policy_version` while the trainer is at
    `trainer_version`: never on a policy more than `max_staleness` versions behind."""
    return policy_version >= trainer_version - max_staleness


class GroupCollector:
    def __init__(self, groups_per_step: int) -> None:
        self.groups_per_step = groups_per_step
        self._open: OrderedDict[str, Group] = OrderedDict()  # in scheduling order
        self._handed_out: set[str] = set()
        self.late = 0
        """Rollouts that arrived after their group went to the trainer."""
        self.duplicates = 0
        """Rollouts delivered again (a worker died after writing, before acknowledging)."""
        self.stale = 0
        """Complete groups dropped untrained: not one token recent enough (drop_stale)."""
        self._newest: dict[str, int] = {}  # open group id -> its newest sampled version

    def expect(self, group_id: str, size: int) -> None:
        if group_id in self._open or group_id in self._handed_out:
            raise ValueError(f"group {group_id!r} is already scheduled")
        self._open[group_id] = Group(group_id, size)

    def add(self, trajectory: Trajectory) -> bool:
        """Whether the trajectory was taken into its group; a late one, an extra beyond a
        full group or a redelivered duplicate (same sample index) is counted and left out."""
        if trajectory.group_id in self._handed_out:
            self.late += 1
            return False
        group = self._open.get(trajectory.group_id)
        if group is None:
            raise KeyError(f"trajectory of unknown group {trajectory.group_id!r}")
        if any(t.sample_index == trajectory.sample_index for t in group.trajectories):
            self.duplicates += 1
            return False
        if group.complete:  # an over-provisioned extra: the group is already full
            self.late += 1
            return False
        group.trajectories.append(trajectory)
        newest = newest_version(trajectory)
        self._newest[group.group_id] = max(self._newest.get(group.group_id, newest), newest)
        return True

    @property
    def open_groups(self) -> int:
        """Scheduled groups not yet handed to the trainer (complete or still running)."""
        return len(self._open)

    @property
    def running_rollouts(self) -> int:
        """Rollouts scheduled and not yet back."""
        return sum(g.size - len(g.trajectories) for g in self._open.values())

    def snapshot(self) -> dict:
        """What a resumed trainer needs: the groups still expected (their trajectories are
        redelivered from the stream) and those already trained on (never again)."""
        return {
            "open": {g.group_id: g.size for g in self._open.values()},
            "handed_out": sorted(self._handed_out),
        }

    def restore(self, snapshot: dict) -> None:
        self._handed_out = set(snapshot["handed_out"])
        self._open = OrderedDict((gid, Group(gid, size)) for gid, size in snapshot["open"].items())
        self._newest = {}  # the open groups' trajectories are delivered again

    def drop_stale(self, trainer_version: int, max_staleness: int) -> list[str]:
        """Drop complete groups whose every sampled token is more than `max_staleness`
        versions behind the trainer: nothing of them could be trained. Returns the dropped
        group ids; the orchestrator's top-up schedules others in their place."""
        bound = trainer_version - max_staleness
        dropped = [
            g.group_id for g in self._open.values()
            if g.complete and self._newest[g.group_id] < bound
        ]  # fmt: skip
        for group_id in dropped:
            del self._open[group_id]
            del self._newest[group_id]
            self._handed_out.add(group_id)
        self.stale += len(dropped)
        return dropped

    @property
    def complete_groups(self) -> int:
        return sum(g.complete for g in self._open.values())

    def take(self, trainer_version: int, max_staleness: int | None = None) -> StepBatch | None:
        """The oldest `groups_per_step` complete groups, once that many are in; else None.
        With `max_staleness`, tokens sampled more than that many versions before
        `trainer_version` are left out of the loss (`StepBatch.stale_tokens` counts them)."""
        ready = [g for g in self._open.values() if g.complete][: self.groups_per_step]
        if len(ready) < self.groups_per_step:
            return None
        stale_tokens = 0
        for group in ready:
            del self._open[group.group_id]
            self._newest.pop(group.group_id, None)
            self._handed_out.add(group.group_id)
            if max_staleness is not None:
                bound = trainer_version - max_staleness
                for i, trajectory in enumerate(group.trajectories):
                    group.trajectories[i], left_out = without_tokens_before(trajectory, bound)
                    stale_tokens += left_out
        # Staleness is that of the tokens trained: a trajectory left with none (every token
        # too stale, or none sampled) adds only its reward to its group's baseline.
        trained = [t for g in ready for t in g.trajectories if oldest_version(t) >= 0]
        oldest = [oldest_version(t) for t in trained]
        newest = [newest_version(t) for t in trained]
        return StepBatch(
            ready,
            staleness=[trainer_version - o for o in oldest],
            in_flight=[n - o for o, n in zip(oldest, newest, strict=True)],
            in_queue=[trainer_version - n for n in newest],
            stale_tokens=stale_tokens,
        )


def without_tokens_before(trajectory: Trajectory, bound: int) -> tuple[Trajectory, int]:
    """The trajectory with the tokens sampled by a version older than `bound` left out of
    the loss, and how many they were (the trajectory itself when none)."""
    if not 0 <= oldest_version(trajectory) < bound:
        return trajectory, 0
    mask = [
        m if v >= bound else 0
        for m, v in zip(trajectory.loss_mask, trajectory.policy_versions, strict=True)
    ]
    left_out = sum(trajectory.loss_mask) - sum(mask)
    return msgspec.structs.replace(trajectory, loss_mask=mask), left_out
