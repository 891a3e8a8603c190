"""What the trainer asks the rollout for, and the only part of it the trainer imports.

* **A schedule of rollouts and their trajectories** — the `Orchestrator` is the client side
  of the rollout queue: it puts GRPO groups of rollout requests on the run's rollout stream,
  which rollout workers (etude.rollout.worker, elsewhere) take, and gathers the trajectories
  they write back into the trainer's batches. Which tasks come next is a `TaskCycle`; at which
  hint tier, a `Curriculum`.
* **An evaluation and demonstrations** — `InProcessEpisodes` runs episodes here, in the
  trainer's process, through the same agent loop a worker runs: held-out pass@1
  (`evaluate`) and the scripted demonstrations SFT trains on (`demonstrations`).

What comes back is plain data (etude.rollout.types). The schedule needs only the queue; the
agent loop, the scripted solvers and the honesty check load when `InProcessEpisodes` is
built (imported inside the call), so a reader of the queue does not pay for them.

The orchestrator in detail: it keeps `groups_per_step + over_provision` groups' worth of
rollouts running (one back from a worker no longer counts, though its group waits for the
others), and at most `groups_per_step × (max_staleness + 1) + over_provision` open; the
trainer steps as soon as `groups_per_step` of them are complete, and stragglers feed the
next step (GroupCollector). Except under the `sync` schedule, new groups are queued as
others complete, while the trainer waits and while it trains. Every rollout entry carries
`min_policy_version = trainer version − max_staleness`: a worker never starts it on an older
policy, and tokens that grew older than that by the time they are trained are left out of
the loss (a long episode outlives steps; the rest of it is trained). Trajectory entries are
acknowledged only after the step that used them is checkpointed, so a trainer that crashes
mid-step finds them again; those of groups already trained on (recorded in the checkpoint)
are acknowledged and dropped.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import redis.asyncio as aioredis

from etude.common.payloads import RolloutRequest, Trajectory
from etude.common.queue import WorkQueue
from etude.common.run_config import CurriculumConfig, RolloutConfig
from etude.common.settings import QueueSettings
from etude.rollout.groups import GroupCollector
from etude.rollout.streams import rollout_key, rollout_queue, trajectory_queue
from etude.rollout.types import Demonstrations, EpisodeDone, Evaluation, WaitedBatch
from etude.tasks.draw import round_robin
from etude.tasks.hints import HINT_TIERS
from etude.tasks.materialize import PROJECTS_DIR
from etude.tasks.provisioning import DEFAULT_PROVISIONING, TaskProvisioning
from etude.tasks.task import Task

if TYPE_CHECKING:
    from etude.environment.client import EnvironmentClient
    from etude.environment.types import ToolCatalog
    from etude.rollout.agent import Scorer, Tokenizer
    from etude.rollout.samplers import Generator

# -- the schedule ------------------------------------------------------------------------------


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


class Curriculum:
    """A hint curriculum: start where the policy can solve tasks (a high hint tier) and take
    the hints away one tier at a time (3 → 2 → 1 → 0, down to `final_tier`) once the training
    pass rate shows it no longer needs them.

    After each RL step the run calls `update` with that step's pass rate; when the mean over
    the last `window` steps reaches `promote_at`, the tier drops by one and the window starts
    over (the rates measured with more hints say nothing about the new tier). The
    orchestrator then schedules new rollouts at `tier`.
    """

    def __init__(self, config: CurriculumConfig, start_tier: int) -> None:
        if start_tier not in HINT_TIERS:
            raise ValueError(f"start tier {start_tier} is not one of {HINT_TIERS}")
        self.config = config
        self.tier = start_tier
        # Pass rates of the steps since the last move, oldest first (at most `window`).
        self.recent: list[float] = []

    def update(self, pass_rate: float) -> int:
        """Record one step's training pass rate; the tier to schedule at from now on."""
        if not (math.isfinite(pass_rate) and 0.0 <= pass_rate <= 1.0):
            raise ValueError(f"a pass rate is between 0 and 1, got {pass_rate}")
        config = self.config
        if not config.enabled or self.tier <= config.final_tier:
            return self.tier
        self.recent = [*self.recent, pass_rate][-config.window :]
        if len(self.recent) == config.window and (
            sum(self.recent) / config.window >= config.promote_at
        ):
            self.tier -= 1
            self.recent = []
        return self.tier

    def snapshot(self) -> dict:
        return {"tier": self.tier, "recent": list(self.recent)}

    def restore(self, snapshot: dict) -> None:
        tier, recent = snapshot["tier"], [float(r) for r in snapshot["recent"]]
        if tier not in HINT_TIERS:
            raise ValueError(f"curriculum snapshot has tier {tier}, not one of {HINT_TIERS}")
        self.tier, self.recent = tier, recent[-self.config.window :]


class Orchestrator:
    """The client side of the rollout queue: schedules groups, hands complete ones over."""

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
        schedule: str = "async_partial",
        hint_tier: int = 0,
        poll_ms: int = 500,
    ) -> None:
        self.run_id = run_id
        self.rollouts = rollouts
        self.trajectories = trajectories
        self.tasks = tasks
        self.group_size = group_size
        self.schedule_mode = schedule
        if schedule == "sync":  # on-policy: one step's groups, all under the step's version
            over_provision = max_staleness = 0
        self.in_flight_target = groups_per_step + over_provision
        # Complete groups wait for the trainer, and each step they wait is a version of
        # staleness: no more open than `max_staleness + 1` steps' worth (AReaL's bound).
        self.max_open = groups_per_step * (max_staleness + 1) + over_provision
        self.max_staleness = max_staleness
        self.poll_ms = poll_ms
        # The hint tier new rollouts are scheduled at (a curriculum lowers it as the run
        # improves); groups already queued keep theirs.
        self.hint_tier = hint_tier
        self.collector = GroupCollector(groups_per_step)
        self.next_group = 0
        self._entries: dict[str, list[str]] = {}  # group id -> its trajectory entry ids
        self._dropped: list[str] = []  # late or duplicate entries, acknowledged after the step

    @classmethod
    def for_run(
        cls,
        client: aioredis.Redis,
        run_id: str,
        tasks: TaskCycle,
        config: RolloutConfig,
        queue: QueueSettings,
        *,
        hint_tier: int = 0,
    ) -> Orchestrator:
        """The trainer's orchestrator of a run: the run's two streams in `client`, groups
        sized as the run's `rollout` section says."""
        return cls(
            run_id=run_id,
            rollouts=rollout_queue(client, run_id, "orchestrator", queue),
            trajectories=trajectory_queue(client, run_id, "trainer", queue),
            tasks=tasks, group_size=config.group_size, groups_per_step=config.groups_per_step,
            over_provision=config.over_provision, max_staleness=config.max_staleness,
            schedule=config.schedule, hint_tier=hint_tier,
        )  # fmt: skip

    async def start(self) -> None:
        await self.rollouts.ensure_group()
        await self.trajectories.ensure_group()

    @property
    def overlaps_training(self) -> bool:
        """Whether rollouts for the next step run while the trainer trains (not `sync`)."""
        return self.schedule_mode != "sync"

    @property
    def drains_updates(self) -> bool:
        """Whether a weight update lets running completions finish first (not a partial
        rollout schedule)."""
        return self.schedule_mode != "async_partial"

    async def schedule(self, trainer_version: int) -> int:
        """Queue new groups until `in_flight_target` groups' worth of rollouts are running
        (a rollout back from a worker no longer holds an engine), at most `max_open` groups
        open; returns how many were added.
        `trainer_version`: the trainer's version when these will be trained at the
        earliest — no rollout of them starts on a policy more than `max_staleness` behind."""
        added = []
        running, opened = self.collector.running_rollouts, self.collector.open_groups
        while (
            running + len(added) * self.group_size < self.in_flight_target * self.group_size
            and opened + len(added) < self.max_open
        ):
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

    async def next_batch(
        self, trainer_version: int, give_up: Callable[[], Awaitable[bool]] | None = None
    ) -> WaitedBatch | None:
        """Wait until enough groups are complete; the oldest of them, with their entry ids.
        `give_up` is asked between two reads (each at most `poll_ms`): True ends the wait
        with None — a stopped run must not wait for workers that may be gone."""
        started = time.perf_counter()
        while True:
            for group_id in self.collector.drop_stale(trainer_version, self.max_staleness):
                self._dropped += self._entries.pop(group_id, [])
            if (batch := self.collector.take(trainer_version, self.max_staleness)) is not None:
                break
            if give_up is not None and await give_up():
                return None
            await self._receive(trainer_version + 1)
        entry_ids = [e for g in batch.groups for e in self._entries.pop(g.group_id, [])]
        return WaitedBatch(batch, entry_ids, time.perf_counter() - started)

    async def collect_until(
        self, done: asyncio.Event, trainer_version: int, *, top_up: bool = True
    ) -> None:
        """While the trainer trains (until `done`): take in trajectories as they come and,
        unless `sync` (or not `top_up`: the run's last step), queue new groups in the places
        of those that finished, so the engines do not empty out during a step. Stops between
        two reads, never inside one (an entry read and then forgotten would stay pending for
        nobody)."""
        while not done.is_set():
            await self._receive(trainer_version, top_up)

    async def _receive(self, trainer_version: int, top_up: bool = True) -> None:
        """One round: top up the groups in flight, read what has arrived."""
        if top_up and self.overlaps_training:  # finished rollouts' places go to new ones
            await self.schedule(trainer_version)
        for delivery in await self.trajectories.get(count=64, block_ms=self.poll_ms):
            trajectory = delivery.payload
            assert isinstance(trajectory, Trajectory)
            if trajectory.run_id != self.run_id or not self._accept(trajectory):
                self._dropped.append(delivery.entry_id)
            else:
                self._entries.setdefault(trajectory.group_id, []).append(delivery.entry_id)

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


def first_prompt(instruction: str, catalog: ToolCatalog) -> str:
    """An episode's first prompt as the agent loop writes it at hint tier 0: the system
    prompt documenting every tool of `catalog`, then the task's instruction."""
    from etude.rollout.prompt import episode_start, system_prompt

    return episode_start(instruction, system_prompt(catalog))


# -- episodes run here -------------------------------------------------------------------------


class InProcessEpisodes:
    """Episodes the trainer runs itself, through the agent loop a rollout worker runs, with
    the trainer's own clients of the environment and reward services: held-out evaluation
    and SFT demonstrations. Task repositories (and Python environments) are built under
    `repositories_dir`, from where `provisioning` says: the run's, as registered."""

    def __init__(
        self,
        environment: EnvironmentClient,
        reward: Scorer,
        tokenizer: Tokenizer,
        config: RolloutConfig,
        repositories_dir: Path,
        projects_dir: Path = PROJECTS_DIR,
        provisioning: TaskProvisioning = DEFAULT_PROVISIONING,
    ) -> None:
        from etude.rollout.agent import EpisodeRunner
        from etude.rollout.repositories import RepositoryCache, TaskPreparer

        async def the_run_s(run_id: str) -> TaskProvisioning:
            return provisioning  # every episode here is of the trainer's one run

        self.tokenizer = tokenizer
        prepare = TaskPreparer(RepositoryCache(repositories_dir, projects_dir), the_run_s)
        self.runner = EpisodeRunner(environment, reward, tokenizer, config, prepare)

    async def evaluate(
        self,
        tasks: list[Task],
        inference: Generator,
        *,
        label: str = "eval",
        tier: int = 0,
        samples: int = 1,
        temperature: float = 0.0,
        concurrency: int = 4,
        on_episode: EpisodeDone | None = None,
    ) -> Evaluation:
        """pass@1 of the policy `inference` serves on `tasks` (etude.rollout.evaluation):
        `samples` episodes per task at hint tier `tier`, greedy unless `temperature`."""
        from etude.rollout.evaluation import pass_at_1

        return await pass_at_1(
            tasks, self.runner, inference, self.tokenizer, label=label, concurrency=concurrency,
            tier=tier, samples=samples, temperature=temperature, on_episode=on_episode,
        )  # fmt: skip

    async def demonstrations(
        self,
        tasks: list[Task],
        *,
        tiers: Sequence[int] = (0,),
        variants: int = 1,
        run_id: str = "sft",
        concurrency: int = 4,
    ) -> Demonstrations:
        """Honest, solved scripted demonstrations of `tasks` at each of `tiers` in `variants`
        styles (etude.rollout.demonstrations)."""
        from etude.rollout.demonstrations import collect_demonstrations

        return await collect_demonstrations(
            tasks, self.runner, self.tokenizer, tiers=tiers, variants=variants, run_id=run_id,
            concurrency=concurrency,
        )  # fmt: skip
