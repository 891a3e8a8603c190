"""`etude train --cluster --ray` as the chart's RayJob runs it, on this machine: the
deployed services stand in as processes on loopback (environment, reward, Redis, a rollout
worker that reaches inference through a fixed address, as through the chart's Service),
and the inference engine and the trainer are Ray actors placed by custom resources."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest
import redis.asyncio as aioredis

from etude.cli.stack import LocalStack, ServiceSpec
from etude.cli.status import read_status
from etude.common.grpc_client import health_status
from etude.common.net import free_port
from etude.common.run_config import parse_run_config
from etude.common.runs import RunRegistry
from etude.common.settings import EtudeSettings, StackSettings
from tests.cli.test_cli_integration import ETUDE, REPO_ROOT
from tests.cli.test_train_integration import SMALL_RUN

pytestmark = pytest.mark.integration


async def record(redis_url: str, config, run_id: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    try:
        await RunRegistry(client).create(config, run_id=run_id)
    finally:
        await client.aclose()


def ray_address(port: int) -> str:
    import ray

    return f"{ray.util.get_node_ip_address()}:{port}"


def test_a_cluster_run_uses_the_deployed_services_and_ray_placed_engines(tmp_path):
    settings = EtudeSettings(stack=StackSettings(run_dir=tmp_path / "stack"))
    deployed = LocalStack(settings, tuple(ServiceSpec.module(n) for n in ("environment", "reward")))
    deployed.start()
    train = None
    try:
        status = read_status(deployed.run_dir)
        address = {c.name: c.address for c in status.components}
        engine_port = free_port("127.0.0.1")
        # Recorded as the gateway records `etude runs start`: the job trains that config.
        config = parse_run_config(
            {**SMALL_RUN, "output_dir": str(tmp_path / "out"), "sft": {"enabled": False}}
        )
        asyncio.run(record(status.redis_url, config, "cluster-1"))
        env = {
            **os.environ,
            "ETUDE_REDIS__URL": status.redis_url,
            "ETUDE_SERVICES__ENVIRONMENT": address["environment"],
            "ETUDE_SERVICES__REWARD": address["reward"],
            "ETUDE_STACK__RUN_DIR": str(deployed.run_dir),
        }
        argv = [*ETUDE, "train", "--ray", "--cluster", "--run-id", "cluster-1",
                "--inference-engines", "1", "--engine-port", str(engine_port)]  # fmt: skip
        log = (tmp_path / "train.log").open("wb")
        train = subprocess.Popen(argv, env=env, cwd=REPO_ROOT, stdout=log, stderr=log)
        engine = f"127.0.0.1:{engine_port}"
        deadline = time.monotonic() + 120
        while health_status(engine, timeout=0.5) != "SERVING":
            assert train.poll() is None, (tmp_path / "train.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the engine actor never served"
            time.sleep(0.5)
        # The chart's rollout Deployment: reaches inference through its Service address.
        worker_env = (("ETUDE_ROLLOUT__RUN_ID", "cluster-1"), ("ETUDE_SERVICES__INFERENCE", engine))
        deployed.add_service(
            ServiceSpec("rollout", (sys.executable, "-m", "etude.rollout"), env=worker_env)
        )
        assert train.wait(timeout=400) == 0, (tmp_path / "train.log").read_text()[-3000:]
    finally:
        if train is not None and train.poll() is None:
            train.kill()
        deployed.stop()
    out = tmp_path / "out" / "cluster-1"
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in lines if r["phase"] == "rl"]
    assert [r["step"] for r in rl] == [1, 2]
    assert rl[1]["policy_version"] == rl[0]["policy_version"] + 1
    # The engine it trained against is the Ray actor it placed (its trajectories came from
    # the deployed worker: `etude train --cluster` starts none).
    assert f"Inference engines: {ray_address(engine_port)}" in (tmp_path / "train.log").read_text()
