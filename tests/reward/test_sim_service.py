"""The `sim` reward as `python -m etude.reward` serves it: the backend chosen by the settings
(`ETUDE_REWARD__BACKEND=sim`, `ETUDE_SIM__*`) → `build` → the real gRPC server on loopback,
called through `GrpcReward` as a rollout worker calls it, after an episode in the `sim`
environment served the same way."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pydantic import ValidationError

from etude.common.grpc_server import ServiceRuntime
from etude.common.settings import ClientSettings, GrpcSettings
from etude.environment.__main__ import build as build_environment
from etude.environment.client import GrpcEnvironment
from etude.environment.config import EnvironmentSettings
from etude.reward.__main__ import build
from etude.reward.client import GrpcReward, RewardRequestError
from etude.reward.config import RewardSettings
from etude.reward.server import SERVICE_NAME

TIME_SCALE = 1000
SCORE_SECONDS = 40.0
SCENARIO = f"""\
name: constant
seed: 0
episodes:
  solve_rate: 0.5
score_seconds: {{median: {SCORE_SECONDS}, tail: 1}}
session_seconds: {{median: 1, tail: 1}}
"""


@pytest.fixture
def sim_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Both services' backends set to `sim` by the environment variables; returns a
    repository the environment may open a session on."""
    scenario = tmp_path / "constant.yaml"
    scenario.write_text(SCENARIO)
    repository = tmp_path / "tasks" / "repo"
    repository.mkdir(parents=True)
    monkeypatch.setenv("ETUDE_REWARD__BACKEND", "sim")
    monkeypatch.setenv("ETUDE_ENVIRONMENT__BACKEND", "sim")
    monkeypatch.setenv("ETUDE_SIM__SCENARIO", str(scenario))
    monkeypatch.setenv("ETUDE_SIM__TIME_SCALE", str(TIME_SCALE))
    monkeypatch.setenv("ETUDE_STACK__RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("ETUDE_ENVIRONMENT__REPOSITORY_ROOTS", json.dumps([str(tmp_path / "tasks")]))
    return repository


async def serve(name: str, registrations, resources: contextlib.AsyncExitStack) -> str:
    runtime = ServiceRuntime(name, GrpcSettings(drain_seconds=0, grace_seconds=1), registrations)
    await runtime.start()
    resources.push_async_callback(runtime.shutdown)
    return runtime.address


@pytest.fixture
async def sim_services(sim_settings: Path):
    """The reward and the environment services, both `sim`, built in this one process."""
    async with contextlib.AsyncExitStack() as resources:
        rewards = await build(RewardSettings(), resources)
        environments = await build_environment(EnvironmentSettings(), resources)
        reward = GrpcReward(await serve("reward", rewards, resources), ClientSettings())
        resources.push_async_callback(reward.close)
        environment = GrpcEnvironment(
            await serve("environment", environments, resources), ClientSettings()
        )
        resources.push_async_callback(environment.close)
        yield reward, environment, sim_settings, (rewards[0].servicer, environments[0].servicer)


async def test_a_finished_session_gets_a_score_after_the_scenarios_time(sim_services):
    reward, environment, repository, _ = sim_services
    stub = health_pb2_grpc.HealthStub(reward.channel)
    reply = await stub.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING

    opened = await environment.create_session("t", str(repository))
    started = time.monotonic()
    score = await reward.score("etude-mini/task", session_id=opened.session_id)
    elapsed = time.monotonic() - started
    await environment.close_session(opened.session_id)

    assert score.components == {"correctness": score.reward}
    assert score.reward in (0.0, 1.0) and score.error == ""
    assert score.seconds == pytest.approx(SCORE_SECONDS)
    assert SCORE_SECONDS / TIME_SCALE <= elapsed < 5
    again = await reward.score("etude-mini/task", session_id=opened.session_id)
    assert again.reward == score.reward  # drawn from the session, not from the call


async def test_sessions_are_solved_at_the_solve_rate(sim_services):
    reward, *_ = sim_services
    scores = await asyncio.gather(
        *(reward.score("etude-mini/task", session_id=f"sim-{i}") for i in range(32))
    )
    assert {s.components["correctness"] for s in scores} == {0.0, 1.0}
    assert all(s.reward == s.components["correctness"] for s in scores)


async def test_a_bad_request_is_refused_and_the_service_goes_on(sim_services):
    reward, *_ = sim_services
    with pytest.raises(RewardRequestError, match="task_id is required"):
        await reward.score("", session_id="sim-1")
    with pytest.raises(RewardRequestError, match="NUL"):
        await reward.score("etude-mini/\0task", session_id="sim-1")
    assert (await reward.score("etude-mini/task", patch="diff")).seconds == pytest.approx(
        SCORE_SECONDS
    )


async def test_the_sim_parts_of_one_process_share_one_clock(sim_services):
    *_, (scoring, environment) = sim_services
    assert scoring.scorer.clock is environment.environment.clock
    assert scoring.scorer.clock.time_scale == TIME_SCALE


def test_an_unknown_backend_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("ETUDE_REWARD__BACKEND", "simulated")
    with pytest.raises(ValidationError, match=r"reward\.backend[\s\S]*'grader' or 'sim'"):
        RewardSettings()
