"""The simulated fleet on the real scheduler — a redis-server, the orchestrator, a rollout
worker running the agent loop, the router, Serving's weight updates, the RL loop — with
engines, sandboxes, grading and training that take simulated time.

What the schedules promise: `sync` trains only tokens of the step's own version; `async`
(draining updates) never splits a turn between versions; `async_partial` lets an update land
mid-episode, and the trajectory's loss weights are computed token by token."""

from __future__ import annotations

import itertools

import pytest
import torch

from etude.common.payloads import Trajectory
from etude.inference.sim_backend import behaviour_logprob
from etude.sim.scenario import EngineModel, EpisodeShapes, Scenario, Spread
from etude.trainer.fleet import FleetPlan, FleetResult, SimulatedFleet
from etude.trainer.loss import importance_weights

pytestmark = pytest.mark.integration

# Few, long turns and frequent steps: updates often land while a turn is being written.
SCENARIO = Scenario(
    time_scale=200,
    episodes=EpisodeShapes(generated_tokens=Spread(median=3000, tail=3, high=12000),
                           turns=Spread(median=3, tail=2, high=6)),
    engine=EngineModel(max_num_seqs=8, parameter_bytes=1e9),
    score_seconds=Spread(median=2.0), trainer_step_seconds=20.0,
    trainer_seconds_per_token=0.0,
)  # fmt: skip


def plan(schedule: str, **changes) -> FleetPlan:
    values = {
        "engines": 2,
        "schedule": schedule,
        "group_size": 4,
        "groups_per_step": 2,
        "over_provision": 2,
        "max_staleness": 2,
        "simulated_seconds": 900,
        **changes,
    }
    return FleetPlan(**values)  # fmt: skip


async def run(redis_url: str, schedule: str, **changes):
    trained: list[tuple[int, Trajectory]] = []

    def keep(step, groups, stats) -> None:
        trained.extend((step, t) for g in groups for t in g)

    fleet = SimulatedFleet(SCENARIO, redis_url, plan(schedule, **changes), f"fleet-{schedule}")
    result = await fleet.run(on_trained=keep)
    assert result.failed_rollouts == 0 and result.steps >= 3
    return result, trained


def turns(trajectory: Trajectory) -> list[list[int]]:
    """The versions of each turn's tokens."""
    runs, sampled = [], zip(trajectory.loss_mask, trajectory.policy_versions, strict=True)
    for is_sampled, group in itertools.groupby(sampled, key=lambda mv: mv[0]):
        if is_sampled:
            runs.append([v for _, v in group])
    return runs


async def test_sync_never_trains_a_token_older_than_its_step(redis_url):
    result, trained = await run(redis_url, "sync")
    assert result.sync_never_stale and set(result.staleness) == {0}
    for step, trajectory in trained:
        # Version 1 is published before the first step; step k trains what k's version wrote.
        sampled = {v for v, m in zip(trajectory.policy_versions, trajectory.loss_mask,
                                     strict=True) if m}  # fmt: skip
        assert sampled == {step}


async def test_an_update_mid_episode_gives_two_versions_weighed_token_by_token(redis_url):
    result, trained = await run(redis_url, "async_partial")
    spanning = [t for _, t in trained if len(set(itertools.chain(*turns(t)))) > 1]
    assert spanning, "no trained episode saw a weight update"
    assert any(len(set(turn)) > 1 for t in spanning for turn in turns(t)), "no turn was split"
    assert max(result.in_flight) >= 1
    trajectory = spanning[0]
    mask = torch.tensor(trajectory.loss_mask, dtype=torch.bool)
    versions = torch.tensor(trajectory.policy_versions)[mask]
    behaviour = torch.tensor(trajectory.logprobs)[mask]
    newest = int(versions.max())
    proximal = torch.full_like(behaviour, behaviour_logprob(newest))  # the trainer's policy
    weights = importance_weights(proximal, behaviour, cap=2.0)
    for version in versions.unique().tolist():
        expected = torch.exp(torch.tensor(behaviour_logprob(newest) - behaviour_logprob(version)))
        assert torch.allclose(weights[versions == version], expected)
    assert weights[versions == newest].eq(1.0).all()
    assert weights[versions < newest].ne(1.0).all()  # older tokens: weighed differently


async def test_draining_updates_never_split_a_turn_between_versions(redis_url):
    _, trained = await run(redis_url, "async")
    assert all(len(set(turn)) == 1 for _, t in trained for turn in turns(t))
    # Bounded staleness holds per trained token: step k trains on version k (version 1 is
    # published before the first step), nothing older than k − max_staleness.
    for step, trajectory in trained:
        assert all(v >= step - 2 for t in turns(trajectory) for v in t)


def test_the_steady_state_begins_once_the_first_cohort_of_episodes_has_ended():
    """Figures that need no fleet: the warm-up ends with the first step that ends after the
    p99 episode; idle and throughput count only the steps after it."""
    result = FleetResult(
        FleetPlan(),
        episode_seconds=[100.0] * 99 + [250.0],  # p99: 250
        step_ends=[120.0, 200.0, 300.0, 400.0, 500.0],
        step_trained=[8, 8, 8, 8, 8],
        step_waited=[120.0, 60.0, 40.0, 10.0, 10.0],
    )
    assert result.warmup_steps == 3 and result.steady_steps == 2  # step 3 ends at 300 ≥ 250
    assert result.steady_seconds == 200.0
    assert result.trainer_idle == pytest.approx(20 / 200)
    assert result.throughput_per_hour == pytest.approx(16 / 200 * 3600)
    assert result.trainer_idle_with_warmup == pytest.approx(120 / 380)
    never = FleetResult(FleetPlan(), episode_seconds=[900.0], step_ends=[100.0, 200.0],
                        step_trained=[8, 8], step_waited=[1.0, 1.0])  # fmt: skip
    assert never.steady_steps == 0 and never.steady_seconds == 0.0
