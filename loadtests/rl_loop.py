"""The RL loop end to end on this machine: rollouts per minute, trainer idle fraction,
weight-sync seconds and held-out pass@1 before and after a fixed short run.

The inference, environment and reward services and one rollout worker run as processes on
loopback with a real redis-server; the trainer runs here (etude.trainer.run.TrainingRun,
what `etude train` drives). The run: SFT warm start on scripted demonstrations, pass@1 on
held-out tasks, RL steps with over-provisioned groups (asynchronous: rollouts continue
while the trainer steps), pass@1 again. The full run also repeats the RL phase without
over-provisioning (synchronous: the trainer waits for every group, the workers wait for
the trainer) as the baseline of rollouts/min and idle fraction, measured in the same run.

    python loadtests/rl_loop.py --quick --json out.json
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

import redis.asyncio as aioredis
from benchlib import argument_parser, metric, print_metrics, write_json

from etude.cli.stack import LocalStack, ServiceSpec
from etude.cli.status import read_status
from etude.common.run_config import RunConfig, parse_run_config
from etude.common.runs import RunRegistry
from etude.common.settings import EtudeSettings, StackSettings
from etude.model.checkpoint import save_checkpoint
from etude.trainer.run import Endpoints, TrainingRun


def run_config(quick: bool, output_dir: Path, over_provision: int, init: str = "tiny") -> RunConfig:
    return parse_run_config({
        "name": "bench",
        "policy": {"init": init},
        "tasks": {"train_limit": 2 if quick else 16, "eval_limit": 1 if quick else 8},
        "sft": {"steps": 3 if quick else 40, "batch_size": 4},
        "rollout": {"group_size": 2 if quick else 4, "groups_per_step": 2,
                    "over_provision": over_provision, "max_staleness": 1, "max_turns": 4,
                    "max_new_tokens": 48 if quick else 192, "max_episode_tokens": 3072,
                    "concurrency": 8},
        "trainer": {"steps": 2 if quick else 6, "micro_batch": 4},
        "output_dir": str(output_dir),
    })  # fmt: skip


async def one_run(
    stack: LocalStack, config: RunConfig, *, warm: bool, save_policy: Path | None = None
) -> dict:
    status = read_status(stack.run_dir)
    address = {c.name: c.address for c in status.components}
    where = Endpoints(status.redis_url, (address["inference"],), address["environment"],
                      address["reward"])  # fmt: skip
    client = aioredis.Redis.from_url(status.redis_url)
    run_id = (await RunRegistry(client).create(config)).run_id
    await client.aclose()
    run = TrainingRun(run_id, config, where, stack.settings)
    await run.setup()
    result: dict = {}
    if warm:
        await run.warm_start()
    if save_policy is not None:  # the synchronous baseline's RL starts from this policy
        save_checkpoint(run.model, save_policy, run.tokenizer)
    result["initial_sync_s"] = await run.publish()
    if warm:
        result["before"] = (await run.evaluate("before"))[0].pass_at_1
    worker = ServiceSpec(
        f"rollout-{run_id}",
        (sys.executable, "-m", "etude.rollout"),
        env=(("ETUDE_ROLLOUT__RUN_ID", run_id),),
    )
    stack.add_service(worker)
    started = time.perf_counter()
    try:
        await run.rl(stop_requested=_never)
    finally:
        stack.stop_service(worker.name)
    history = run.reporter.history()
    result["rl_seconds"] = time.perf_counter() - started
    result["rollouts_per_min"] = history[-1]["rollouts_per_min"]
    result["idle"] = history[-1]["trainer_idle_fraction"]
    result["sync_s"] = sorted(r["weight_sync_seconds"] for r in history)[len(history) // 2]
    if warm:
        result["after"] = (await run.evaluate("after"))[0].pass_at_1
    await run.close()
    return result


async def _never() -> bool:
    return False


async def main(quick: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="etude-rl-bench-") as scratch:
        root = Path(scratch)
        settings = EtudeSettings(stack=StackSettings(run_dir=root / "stack"))
        services = tuple(ServiceSpec.module(n) for n in ("inference", "environment", "reward"))
        stack = LocalStack(settings, services)
        stack.start()
        try:
            policy = root / "sft-policy"
            asynchronous = await one_run(
                stack, run_config(quick, root / "runs", 1), warm=True, save_policy=policy
            )
            synchronous = None
            if not quick:
                config = run_config(quick, root / "runs", 0, init=str(policy))
                synchronous = await one_run(stack, config, warm=False)
        finally:
            stack.stop()
    metrics = {
        "rollouts_per_min": metric(
            asynchronous["rollouts_per_min"], "rollouts/min",
            baseline=synchronous and synchronous["rollouts_per_min"],
        ),
        "trainer_idle_fraction": metric(
            asynchronous["idle"], "fraction", baseline=synchronous and synchronous["idle"]
        ),
        "weight_sync_s": metric(asynchronous["sync_s"], "s"),
        "pass1_before": metric(asynchronous["before"], "fraction"),
        "pass1_after": metric(asynchronous["after"], "fraction"),
    }  # fmt: skip
    return metrics


if __name__ == "__main__":
    arguments = argument_parser(__doc__).parse_args()
    started = time.perf_counter()
    results = asyncio.run(main(arguments.quick))
    print_metrics(f"RL loop ({time.perf_counter() - started:.0f} s)", results)
    write_json(arguments.json, "rl_loop", results, quick=arguments.quick)
