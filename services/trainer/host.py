"""The trainer as an object that lives in a process of its own: a plain object in the
driver's process, or a Ray actor (`ray.remote(TrainerHost)`) — the path a cluster uses, where
KubeRay places it on a GPU worker. Its methods are coroutines, so the driver awaits them the
same way in both cases (a Ray ObjectRef is awaitable). Progress does not travel through
return values: it is in the run registry in Redis, which the driver polls like any other
client. The other services' hosts are `etude.inference.host` and `etude.rollout.host`.
"""

from __future__ import annotations

from pathlib import Path

from etude.common.run_config import RunConfig
from etude.common.settings import EtudeSettings
from etude.trainer.run import TrainingRun
from etude.trainer.types import Endpoints


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
        # A stop request ends the loop; a run failed elsewhere (a worker that could not find
        # or build a task) raises RunFailedError out of it.
        return await self.run.rl(lambda: registry.should_stop(run_id))

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

    async def close(self) -> None:
        """Release what `setup` opened (a no-op after `finish`): a failed or stopped run
        ends its progress writes and its clients while the loop still runs."""
        await self.run.close()


def reward_ends(history: list[dict]) -> dict[str, float]:
    """Mean training reward over the first and over the last quarter of the RL steps (at
    least one step each): one step's few groups are too noisy to compare alone."""
    rewards = [r["reward_mean"] for r in history if "reward_mean" in r]
    if not rewards:
        return {}
    k = max(1, len(rewards) // 4)
    return {"train_reward_first": sum(rewards[:k]) / k, "train_reward_last": sum(rewards[-k:]) / k}
