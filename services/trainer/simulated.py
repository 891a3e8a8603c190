"""A trainer that trains nothing: each step takes the simulated time a real one would
(`trainer_step_seconds` plus `trainer_seconds_per_token` per token the policy sampled, from
the scenario — tokens left out of the loss as too stale still pass through the forward and
backward passes) and reports the batch's figures. The simulated fleet runs the real RL loop
(etude.trainer.rl_loop) with it."""

from __future__ import annotations

import statistics
import time

from etude.common.payloads import Trajectory
from etude.sim.clock import SimClock
from etude.sim.scenario import Scenario
from etude.trainer.trainer import StepStats


class SimulatedTrainer:
    trainable: frozenset[str] = frozenset()

    def __init__(self, scenario: Scenario, clock: SimClock) -> None:
        self.scenario = scenario
        self.clock = clock
        self.steps = 0

    def step_seconds(self, tokens: int) -> float:
        s = self.scenario
        return s.trainer_step_seconds + s.trainer_seconds_per_token * tokens

    def step(self, groups: list[list[Trajectory]]) -> StepStats:
        """Blocks, as a real step does (the run loop calls it in a thread)."""
        trajectories = [t for g in groups for t in g]
        tokens = sum(sum(v >= 0 for v in t.policy_versions) for t in trajectories)
        seconds = self.step_seconds(tokens)
        time.sleep(self.clock.real_seconds(seconds))
        self.steps += 1
        rewards = [t.reward for t in trajectories] or [0.0]
        return StepStats(
            loss=0.0, policy_loss=0.0, aux_loss=0.0, entropy=0.0, grad_norm=0.0,
            clip_fraction=0.0, tis_truncated_fraction=0.0, mismatch_kl=0.0, kl=0.0,
            reward_mean=statistics.fmean(rewards), reward_std=statistics.pstdev(rewards),
            pass_rate=sum(t.correctness >= 1.0 for t in trajectories) / max(1, len(trajectories)),
            tokens=tokens, sequences=len(trajectories), seconds=seconds,
        )  # fmt: skip
