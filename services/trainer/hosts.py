"""The trainer and a rollout worker as objects that live in a process of their own: a plain
object in this process, or a Ray actor (`ray.remote(TrainerHost)`) — the path a cluster
uses, where KubeRay places the actors on GPU and CPU workers. Their methods are coroutines,
so the driver awaits them the same way in both cases (a Ray ObjectRef is awaitable).
Progress does not travel through return values: it is in the run registry in Redis, which
the driver polls like any other client.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from etude.common.run_config import RunConfig
from etude.common.settings import EtudeSettings
from etude.rollout.config import RolloutSettings
from etude.rollout.service import build_worker
from etude.trainer.run import Endpoints, TrainingRun


class TrainerHost:
    def __init__(
        self, run_id: str, config: RunConfig, endpoints: Endpoints, settings: EtudeSettings
    ) -> None:
        self.run = TrainingRun(run_id, config, endpoints, settings)

    async def setup(self, resume: bool) -> bool:
        await self.run.setup(resume)
        return self.run.resumed

    async def warm_start(self) -> dict:
        summary = await self.run.warm_start()
        summary["initial_weight_sync_seconds"] = await self.run.publish()
        return summary

    async def evaluate(self, label: str) -> dict | None:
        """Per tier: pass@1 with its counts and 95% interval, finish reasons, behaviour; the
        first tier's figures also at the top level (the run's own tier)."""
        results = await self.run.evaluate(label)
        if not results:
            return None
        by_tier = {
            str(r.tier): {
                "pass_at_1": r.pass_at_1, "passed": r.passed, "episodes": r.episodes,
                "ci_low": r.ci_low, "ci_high": r.ci_high, "mean_reward": r.mean_reward,
                "finish_reasons": r.finish_reasons, "behaviour": r.behaviour,
                "seconds": r.seconds,
            }
            for r in results
        }  # fmt: skip
        return {**by_tier[str(results[0].tier)], "tier": results[0].tier, "by_tier": by_tier}

    async def rl(self) -> int:
        registry, run_id = self.run.registry, self.run.run_id
        return await self.run.rl(lambda: registry.stop_requested(run_id))

    async def save_policy(self, directory: str) -> str:
        from etude.model.checkpoint import save_checkpoint

        return str(save_checkpoint(self.run.model, Path(directory), self.run.tokenizer))

    async def finish(self, summary: dict) -> dict:
        """Write the summary and the reward curve; returns the curve's path and the training
        reward at the start and the end of RL."""
        ends = reward_ends(self.run.reporter.history())
        path = self.run.reporter.finish({**summary, **self.run.totals, **ends})
        await self.run.close()
        return {"curve": str(path), **ends}


def reward_ends(history: list[dict]) -> dict[str, float]:
    """Mean training reward over the first and over the last quarter of the RL steps (at
    least one step each): one step's few groups are too noisy to compare alone."""
    rewards = [r["reward_mean"] for r in history if "reward_mean" in r]
    if not rewards:
        return {}
    k = max(1, len(rewards) // 4)
    return {"train_reward_first": sum(rewards[:k]) / k, "train_reward_last": sum(rewards[-k:]) / k}


class RolloutHost:
    """A rollout worker for Ray; `python -m etude.rollout` is the process form."""

    def __init__(self, settings: RolloutSettings, config: RunConfig) -> None:
        self.settings = settings
        self.config = config
        self._stop = asyncio.Event()

    async def run(self) -> int:
        async with contextlib.AsyncExitStack() as resources:
            worker = await build_worker(self.settings, resources, self.config)
            await worker.run(self._stop)
            return worker.completed

    async def stop(self) -> None:
        self._stop.set()
