"""pass@1 on held-out tasks: one greedy episode per task through the same agent loop."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from etude.common.payloads import RolloutRequest
from etude.rollout.agent import EpisodeRunner, Tokenizer
from etude.rollout.samplers import Generator, PolicySampler
from etude.tasks.task import Task


@dataclass(frozen=True, slots=True)
class Evaluation:
    pass_at_1: float
    mean_reward: float
    rewards: dict[str, float]
    finish_reasons: dict[str, int]
    seconds: float


async def pass_at_1(
    tasks: list[Task],
    runner: EpisodeRunner,
    inference: Generator,
    tokenizer: Tokenizer,
    *,
    label: str = "eval",
    concurrency: int = 4,
) -> Evaluation:
    started = time.perf_counter()
    gate = asyncio.Semaphore(concurrency)

    async def attempt(index: int, task: Task):
        request = RolloutRequest(
            run_id=label, task_id=task.id, group_id=f"{label}-{index}", sample_index=0,
            min_policy_version=0,
        )  # fmt: skip
        sampler = PolicySampler(inference, tokenizer, f"{label}-{index}", temperature=0.0)
        async with gate:
            return await runner.run(request, task, sampler)

    trajectories = await asyncio.gather(*(attempt(i, t) for i, t in enumerate(tasks)))
    rewards = {t.task_id: t.reward for t in trajectories}
    reasons: dict[str, int] = {}
    for t in trajectories:
        reasons[t.finish_reason] = reasons.get(t.finish_reason, 0) + 1
    n = max(1, len(trajectories))
    return Evaluation(
        pass_at_1=sum(r >= 1.0 for r in rewards.values()) / n,
        mean_reward=sum(rewards.values()) / n,
        rewards=rewards,
        finish_reasons=reasons,
        seconds=time.perf_counter() - started,
    )
