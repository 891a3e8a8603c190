"""Honest scripted demonstrations at every hint tier, what the SFT warm start trains on.

A demonstration is a real episode: the agent loop drives a real environment session at the
request's hint tier and the reward service grades it; only the turns come from the solver
(etude.rollout.scripted, etude.rollout.scripted_locate for locate tasks) instead of the
policy. Each task is demonstrated at every requested tier in several styles (`variants`).
Kept are the demonstrations that submitted, solved their task (reward 1), fit the episode
budget and pass the honesty check on the tokens the policy was shown
(etude.rollout.scripted_honesty). What comes back is etude.rollout.types.Demonstrations.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from etude.common.payloads import RolloutRequest
from etude.rollout.agent import EpisodeRunner, Tokenizer
from etude.rollout.samplers import ScriptedSampler
from etude.rollout.scripted import ScriptedSolver, ScriptError
from etude.rollout.scripted_honesty import derivable_violations, episode_from_text
from etude.rollout.scripted_locate import LocateSolver
from etude.rollout.types import Demonstration, Demonstrations, TierCounts
from etude.tasks.locate import is_locate
from etude.tasks.task import Task

log = logging.getLogger(__name__)


async def collect_demonstrations(
    tasks: list[Task],
    runner: EpisodeRunner,
    tokenizer: Tokenizer,
    *,
    tiers: Sequence[int] = (0,),
    variants: int = 1,
    run_id: str = "sft",
    concurrency: int = 4,
    on_done: Callable[[], None] | None = None,
) -> Demonstrations:
    """Scripted episodes of every task at every tier in `variants` styles; the ones that
    submitted, solved the task, fit `max_episode_tokens` and pass the honesty check."""
    if variants < 1:
        raise ValueError(f"variants must be ≥ 1, got {variants}")
    gate = asyncio.Semaphore(concurrency)
    counts = {tier: TierCounts() for tier in tiers}
    decode = getattr(tokenizer, "decode", None)
    rollout = runner.config

    async def demonstrate(index: int, task: Task, tier: int, variant: int):
        c = counts[tier]
        c.written += 1
        async with gate:
            try:
                prepared = await runner.prepare(run_id, task)
                solver = (
                    LocateSolver(task, variant) if is_locate(task) else ScriptedSolver(
                        task, prepared.repository, tier=tier, variant=variant,
                        shown_chars=rollout.max_tool_output_chars,
                    )
                )  # fmt: skip
            except ScriptError as error:
                log.info("no demonstration of %s at tier %d: %s", task.id, tier, error)
                c.unscriptable += 1
                return None
            request = RolloutRequest(
                run_id=run_id, task_id=task.id, group_id=f"demo-{index}-t{tier}-v{variant}",
                sample_index=0, min_policy_version=0, hint_tier=tier,
            )  # fmt: skip
            sampler = ScriptedSampler(solver, tokenizer)
            try:
                trajectory = await runner.run(request, task, sampler)
            except Exception:  # a session or grade that failed loses this one, not the set
                log.warning("demonstration of %s at tier %d failed", task.id, tier, exc_info=True)
                c.failed += 1
                return None
        if on_done is not None:
            on_done()
        if sampler.error is not None:
            log.info("no demonstration of %s at tier %d: %s", task.id, tier, sampler.error)
            c.unscriptable += 1
            return None
        if trajectory.finish_reason in ("max_turns", "max_tokens") or (
            len(trajectory.token_ids) > rollout.max_episode_tokens
        ):
            c.over_budget += 1
            return None
        if trajectory.finish_reason != "submitted" or trajectory.correctness < 1.0:
            c.unsolved += 1
            return None
        if decode is not None:
            problems = derivable_violations(
                episode_from_text(decode(trajectory.token_ids)), runner.tools
            )
            if problems:
                log.warning("dishonest demonstration of %s: %s", task.id, problems[:3])
                c.dishonest += 1
                return None
        c.kept += 1
        c.turns.append(trajectory.turns)
        c.tokens.append(len(trajectory.token_ids))
        return Demonstration(task.id, tier, variant, solver.label, trajectory)

    jobs = [
        demonstrate(index, task, tier, variant)
        for index, task in enumerate(tasks)
        for tier in tiers
        for variant in range(variants)
    ]
    done = await asyncio.gather(*jobs)
    return Demonstrations([d for d in done if d is not None], counts)
