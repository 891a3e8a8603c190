"""pass@1 on held-out tasks through the same agent loop: `samples` episodes per task at one
hint tier (greedy by default), pass@1 the share of all episodes that pass, with a 95%
Wilson interval so two evaluations of a few dozen episodes can be told apart or not."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from etude.common.intervals import wilson_interval
from etude.common.payloads import RolloutRequest
from etude.rollout.agent import EpisodeRunner, Tokenizer
from etude.rollout.samplers import Generator, PolicySampler
from etude.rollout.types import EpisodeDone, Evaluation, behaviour_summary
from etude.tasks.task import Task


async def pass_at_1(
    tasks: list[Task],
    runner: EpisodeRunner,
    inference: Generator,
    tokenizer: Tokenizer,
    *,
    label: str = "eval",
    concurrency: int = 4,
    tier: int = 0,
    samples: int = 1,
    temperature: float = 0.0,
    on_episode: EpisodeDone | None = None,
) -> Evaluation:
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    started = time.perf_counter()
    gate = asyncio.Semaphore(concurrency)
    so_far: Counter[str] = Counter()

    async def attempt(index: int, task: Task, sample: int):
        request = RolloutRequest(
            run_id=label, task_id=task.id, group_id=f"{label}-{index}", sample_index=sample,
            min_policy_version=0, hint_tier=tier,
        )  # fmt: skip
        # Sampled episodes get a seed each, so an evaluation can be repeated exactly.
        seed = None if temperature == 0 else index * samples + sample
        sampler = PolicySampler(
            inference, tokenizer, f"{label}-{index}-s{sample}", temperature=temperature, seed=seed
        )
        async with gate:
            trajectory = await runner.run(request, task, sampler)
        so_far.update(episodes=1, passed=int(trajectory.correctness >= 1.0))
        if on_episode is not None:
            on_episode(so_far["episodes"], len(tasks) * samples, so_far["passed"])
        return trajectory

    trajectories = await asyncio.gather(
        *(attempt(i, t, s) for i, t in enumerate(tasks) for s in range(samples))
    )
    per_task: dict[str, list[float]] = {}
    reasons: dict[str, int] = {}
    for t in trajectories:
        per_task.setdefault(t.task_id, []).append(t.reward)
        reasons[t.finish_reason] = reasons.get(t.finish_reason, 0) + 1
    episodes = len(trajectories)
    passed = sum(t.correctness >= 1.0 for t in trajectories)  # not the turn cost
    low, high = wilson_interval(passed, episodes)
    return Evaluation(
        pass_at_1=passed / max(1, episodes),
        mean_reward=sum(t.reward for t in trajectories) / max(1, episodes),
        rewards={task_id: sum(r) / len(r) for task_id, r in per_task.items()},
        finish_reasons=reasons,
        seconds=time.perf_counter() - started,
        behaviour=behaviour_summary(trajectories),
        tier=tier,
        episodes=episodes,
        passed=passed,
        ci_low=low,
        ci_high=high,
    )
