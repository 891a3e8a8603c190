"""The `sim` environment as `python -m etude.environment` serves it: the backend chosen by the
settings (`ETUDE_ENVIRONMENT__BACKEND=sim`, `ETUDE_SIM__*`) → `build` → the real gRPC server
on loopback, called through `GrpcEnvironment` as a rollout worker calls it. The scenario's
spreads are constant, so every latency it reports is known."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pydantic import ValidationError

from etude.common.grpc_server import ServiceRuntime
from etude.common.settings import ClientSettings, GrpcSettings
from etude.common.toolcalls import ToolCall
from etude.environment.__main__ import build
from etude.environment.client import GrpcEnvironment
from etude.environment.config import EnvironmentSettings
from etude.environment.server import SERVICE_NAME
from etude.environment.tools import tool_catalog
from etude.environment.types import SessionNotFoundError
from etude.sim.scenario import ScenarioError

TIME_SCALE = 1000
READ_SECONDS = 2.0
COMMAND_SECONDS = 300.0
OUTPUT_WORDS = 7

SCENARIO = f"""\
name: constant
seed: 0
episodes:
  tool_output_tokens: {{median: {OUTPUT_WORDS}, tail: 1}}
tools:
  default: {{median: {READ_SECONDS}, tail: 1}}
  by_tool:
    run_terminal_command: {{median: {COMMAND_SECONDS}, tail: 1}}
session_seconds: {{median: 5, tail: 1}}
"""


@pytest.fixture
def sim_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The sim backend selected by the environment variables; returns a repository that
    lies under the allowed roots (requests are checked as the real service checks them)."""
    scenario = tmp_path / "constant.yaml"
    scenario.write_text(SCENARIO)
    repository = tmp_path / "tasks" / "repo"
    repository.mkdir(parents=True)
    monkeypatch.setenv("ETUDE_ENVIRONMENT__BACKEND", "sim")
    monkeypatch.setenv("ETUDE_SIM__SCENARIO", str(scenario))
    monkeypatch.setenv("ETUDE_SIM__TIME_SCALE", str(TIME_SCALE))
    monkeypatch.setenv("ETUDE_STACK__RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("ETUDE_ENVIRONMENT__REPOSITORY_ROOTS", json.dumps([str(tmp_path / "tasks")]))
    return repository


@pytest.fixture
async def sim_environment(sim_settings: Path):
    async with contextlib.AsyncExitStack() as resources:
        registrations = await build(EnvironmentSettings(), resources)
        runtime = ServiceRuntime(
            "environment", GrpcSettings(drain_seconds=0, grace_seconds=1), registrations
        )
        await runtime.start()
        resources.push_async_callback(runtime.shutdown)
        client = GrpcEnvironment(runtime.address, ClientSettings(timeout_seconds=30))
        resources.push_async_callback(client.close)
        yield client, sim_settings


async def health(client: GrpcEnvironment, service: str) -> str:
    stub = health_pb2_grpc.HealthStub(client.channel)
    reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def call(name: str, index: int, **arguments: str) -> ToolCall:
    return ToolCall(name, arguments, f"call_{index}")


async def test_an_episode_over_grpc_follows_the_scenario(sim_environment):
    client, repository = sim_environment
    assert await health(client, "") == "SERVING"
    assert await health(client, SERVICE_NAME) == "SERVING"
    assert await client.list_tools() == tool_catalog()
    opened = await client.create_session("t", str(repository))
    assert opened.session_id and opened.sandbox_backend == "sim"

    started = time.monotonic()
    results = await client.execute(
        opened.session_id,
        [
            call("read_file", 0, path="pkg/calc.py"),
            call("run_terminal_command", 1, command="pytest -q"),
        ],
    )
    elapsed = time.monotonic() - started
    assert [(r.call_id, r.name) for r in results] == [
        ("call_0", "read_file"),
        ("call_1", "run_terminal_command"),
    ]
    assert [r.seconds for r in results] == pytest.approx([READ_SECONDS, COMMAND_SECONDS])
    assert all(r.result.output.split() == ["line"] * OUTPUT_WORDS for r in results)
    assert not any(r.result.ends_episode or r.result.exit_code for r in results)
    # As long as the slowest call, in real time divided by the time scale.
    assert COMMAND_SECONDS / TIME_SCALE <= elapsed < 5

    [submitted] = await client.execute(opened.session_id, [call("submit", 2, message="done")])
    assert submitted.result.ends_episode
    assert (await client.diff(opened.session_id)).unified_diff == ""
    await client.close_session(opened.session_id)
    with pytest.raises(SessionNotFoundError):
        await client.execute(opened.session_id, [call("read_file", 3, path="a.py")])


async def test_an_unknown_session_is_a_clear_error_and_the_service_goes_on(sim_environment):
    client, repository = sim_environment
    with pytest.raises(SessionNotFoundError, match="no session 'sim-unknown'"):
        await client.execute("sim-unknown", [call("read_file", 0, path="a.py")])
    with pytest.raises(SessionNotFoundError):
        await client.close_session("sim-unknown")
    opened = await client.create_session("t", str(repository))
    [result] = await client.execute(opened.session_id, [call("read_file", 0, path="a.py")])
    assert result.seconds == pytest.approx(READ_SECONDS)
    assert await health(client, SERVICE_NAME) == "SERVING"


def test_an_unknown_backend_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("ETUDE_ENVIRONMENT__BACKEND", "simulated")
    with pytest.raises(ValidationError, match=r"environment\.backend[\s\S]*'sandbox' or 'sim'"):
        EnvironmentSettings()


async def test_an_unknown_scenario_is_a_clear_error(sim_settings, monkeypatch):
    monkeypatch.setenv("ETUDE_SIM__SCENARIO", "no-such-scenario")
    async with contextlib.AsyncExitStack() as resources:
        with pytest.raises(ScenarioError, match="no scenario 'no-such-scenario'"):
            await build(EnvironmentSettings(), resources)
