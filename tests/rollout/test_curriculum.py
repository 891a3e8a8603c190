"""The hint curriculum moves one tier harder when the pass rate holds up, resumes where it
was, and the orchestrator schedules rollouts at the tier it is given (kept across a resume)."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from etude.common.payloads import RolloutRequest
from etude.common.run_config import CurriculumConfig
from etude.common.settings import QueueSettings
from etude.rollout.client import Curriculum, Orchestrator, TaskCycle
from etude.rollout.streams import rollout_queue, trajectory_queue
from etude.tasks.materialize import TASKS_FILE
from etude.tasks.task import read_jsonl

ON = CurriculumConfig(enabled=True, promote_at=0.5, window=2, final_tier=1)


def test_the_tier_drops_when_the_window_mean_reaches_the_threshold_and_the_window_restarts():
    curriculum = Curriculum(ON, start_tier=3)
    # Means over the last two steps: -, 0.45, 0.2, 0.5 (moves); then the window starts over,
    # so the first step at tier 2 alone does not move it; then 0.5 again; tier 1 is final.
    rates = [0.9, 0.0, 0.4, 0.6, 1.0, 0.0, 1.0, 1.0, 1.0]
    assert [curriculum.update(r) for r in rates] == [3, 3, 3, 2, 2, 1, 1, 1, 1]
    assert curriculum.tier == 1


def test_a_window_of_rates_below_the_threshold_never_moves():
    curriculum = Curriculum(ON, start_tier=3)
    assert {curriculum.update(0.49) for _ in range(10)} == {3}


def test_a_disabled_curriculum_keeps_the_start_tier():
    curriculum = Curriculum(CurriculumConfig(enabled=False), start_tier=2)
    assert {curriculum.update(1.0) for _ in range(5)} == {2}


def test_a_restored_curriculum_continues_exactly_as_an_uninterrupted_one():
    rates = [0.2, 0.7, 0.6, 0.1, 0.9, 0.8, 0.3, 1.0]
    straight = Curriculum(ON, start_tier=3)
    expected = [straight.update(r) for r in rates]
    first = Curriculum(ON, start_tier=3)
    for rate in rates[:3]:
        first.update(rate)
    resumed = Curriculum(ON, start_tier=3)
    resumed.restore(first.snapshot())
    assert expected[:3] + [resumed.update(r) for r in rates[3:]] == expected
    assert expected[-1] < 3  # the sequence did move


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="start tier 4"):
        Curriculum(ON, start_tier=4)
    with pytest.raises(ValueError, match="between 0 and 1"):
        Curriculum(ON, start_tier=3).update(float("nan"))
    with pytest.raises(ValueError, match="tier 7"):
        Curriculum(ON, start_tier=3).restore({"tier": 7, "recent": []})


async def test_rollouts_are_scheduled_at_the_orchestrator_s_tier_across_a_resume(redis_url):
    client = aioredis.Redis.from_url(redis_url)
    queue = QueueSettings()
    tasks = list(read_jsonl(TASKS_FILE))[:6]

    def orchestrator(tier: int, over_provision: int = 0) -> Orchestrator:
        return Orchestrator(
            run_id="run-tiers", rollouts=rollout_queue(client, "run-tiers", "orch", queue),
            trajectories=trajectory_queue(client, "run-tiers", "trainer", queue),
            tasks=TaskCycle(tasks, seed=0), group_size=2, groups_per_step=1,
            over_provision=over_provision, max_staleness=1, hint_tier=tier,
        )  # fmt: skip

    async def scheduled_tiers() -> list[int]:
        deliveries = await worker.get(count=10, block_ms=200)
        requests = [d.payload for d in deliveries]
        assert all(isinstance(r, RolloutRequest) for r in requests)
        return [r.hint_tier for r in requests]

    try:
        first = orchestrator(3)
        await first.start()
        worker = rollout_queue(client, "run-tiers", "worker", queue)
        await first.schedule(trainer_version=0)
        assert await scheduled_tiers() == [3, 3]
        first.hint_tier = 2  # what the curriculum does after a step
        snapshot = first.snapshot()
        # Resumed with the config's tier (and one more group in flight): the snapshot's
        # tier wins, and the group still open from before is not scheduled again.
        resumed = orchestrator(3, over_provision=1)
        resumed.restore(snapshot)
        assert resumed.hint_tier == 2 and resumed.tasks.cursor == first.tasks.cursor
        assert await resumed.schedule(trainer_version=0) == 1
        assert await scheduled_tiers() == [2, 2]
    finally:
        await client.aclose()
