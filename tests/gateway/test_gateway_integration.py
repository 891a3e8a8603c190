"""`python -m etude.gateway` as a real process beside a real redis-server, started the way
`etude up` starts services: a run goes through HTTP and through `etude runs`, and a Redis
that dies turns Redis-backed answers into 503, never 500."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import urllib.error
import urllib.request

import pytest
import redis.asyncio as aioredis
from typer.testing import CliRunner

from etude.cli.runs import app as runs_app
from etude.cli.stack import LocalStack, ServiceSpec
from etude.common.auth import bearer_header
from etude.common.net import free_port
from etude.common.runs import RunRegistry
from etude.common.settings import EtudeSettings, StackSettings, get_settings
from etude.common.trajectory_log import TrajectoryLog
from etude.model.tokenizer import load_tokenizer
from etude.tasks.materialize import TASKS_FILE
from etude.tasks.task import read_jsonl, write_jsonl
from etude.tasks.taskset import RunTasks
from tests.common.test_trajectory_log import episode

pytestmark = pytest.mark.integration


def call(method: str, url: str, body: dict | None = None) -> tuple[int, dict | list]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", **bearer_header(get_settings().auth, "operator")}
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


async def registered_ids(redis_url: str, run_id: str) -> list[str]:
    client = aioredis.Redis.from_url(redis_url)
    try:
        return sorted(t.id for t in (await RunTasks(client).selection(run_id)).train)
    finally:
        await client.aclose()


@pytest.fixture
def stack(tmp_path, monkeypatch):
    # Runs are only recorded: `etude train` is not what this test is about.
    monkeypatch.setenv("ETUDE_GATEWAY__LAUNCHER", "none")
    monkeypatch.setenv("ETUDE_GATEWAY__REDIS_TIMEOUT_SECONDS", "1")
    settings = EtudeSettings(stack=StackSettings(run_dir=tmp_path, ready_timeout_seconds=60))
    gateway = ServiceSpec("gateway", (sys.executable, "-m", "etude.gateway"), http=True)
    stack = LocalStack(settings, (gateway,))
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


def test_runs_over_http_and_a_dead_redis_gives_503(stack):
    component = next(c for c in stack.state.components if c.name == "gateway")
    url = component.http_url
    assert call("GET", f"{url}/health") == (200, {"status": "ok"})

    status, run = call("POST", f"{url}/runs", {"config": {"name": "live"}, "run_id": "live-1"})
    assert (status, run["status"]) == (201, "queued")
    assert call("GET", f"{url}/runs/live-1")[1] == run
    assert call("GET", f"{url}/runs/missing") == (404, {"detail": "no run 'missing'"})
    status, stopped = call("POST", f"{url}/runs/live-1/stop")
    # Queued, and no driver ever took it (launcher `none`): stopped at once.
    assert (status, stopped["status"], stopped["stop_requested"]) == (202, "stopped", True)
    with urllib.request.urlopen(f"{url}/openapi.json", timeout=10) as reply:
        assert "/runs/{run_id}/stop" in json.loads(reply.read())["paths"]
    with urllib.request.urlopen(component.metrics_url, timeout=10) as reply:
        assert 'etude_gateway_requests_total{method="POST",route="/runs",status="201"}' in (
            reply.read().decode()
        )

    stack.redis.kill()
    for path in ("/health", "/runs", "/runs/live-1"):
        status, body = call("GET", f"{url}{path}")
        assert status == 503 and body["detail"].startswith("redis unavailable"), path
    assert call("POST", f"{url}/runs", {"run_id": "after"})[0] == 503


def test_etude_runs_finds_the_stacks_gateway(stack, tmp_path):
    runner = CliRunner()
    where = ["--run-dir", str(tmp_path)]
    config = tmp_path / "run.yaml"
    config.write_text("name: cli\ntrainer:\n  steps: 2\n")

    started = runner.invoke(runs_app, ["start", str(config), "--set", "trainer.steps=3",
                                       "--run-id", "cli-1", "--json", *where])  # fmt: skip
    assert started.exit_code == 0, started.output
    assert json.loads(started.stdout)["config"]["trainer"]["steps"] == 3

    listed = runner.invoke(runs_app, ["list", "--json", *where])
    assert [r["run_id"] for r in json.loads(listed.stdout)] == ["cli-1"]
    for command, expected in ((["list"], "cli-1"), (["show", "cli-1"], "0 of 3"),
                              (["tasksets"], "etude-mini")):  # fmt: skip
        shown = runner.invoke(runs_app, [*command, *where])
        assert shown.exit_code == 0 and expected in shown.stdout, shown.output
    stopped = runner.invoke(runs_app, ["stop", "cli-1", "--json", *where])
    assert json.loads(stopped.stdout)["status"] == "stopped"

    # A task set in a file here travels with the run, whatever the gateway can read.
    mine = tmp_path / "elsewhere" / "my.jsonl"
    mine.parent.mkdir()
    bundled = [t for t in read_jsonl(TASKS_FILE) if t.split == "train"][:2]
    write_jsonl(mine, [dataclasses.replace(t, id=f"mine-{i}") for i, t in enumerate(bundled)])
    uploaded = runner.invoke(runs_app, ["start", str(config), "--set", f"tasks.taskset={mine}",
                                        "--run-id", "cli-2", "--json", *where])  # fmt: skip
    assert uploaded.exit_code == 0, uploaded.output
    assert "Sending 2 tasks from" in uploaded.output
    assert json.loads(uploaded.stdout)["config"]["tasks"]["taskset"] == str(mine)
    assert asyncio.run(registered_ids(stack.redis_url, "cli-2")) == ["mine-0", "mine-1"]
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"repo": "x"}\n')
    refused = runner.invoke(runs_app, ["start", "--set", f"tasks.taskset={broken}", *where])
    assert refused.exit_code == 2 and "task record lacks" in refused.output

    missing = runner.invoke(runs_app, ["show", "nope", *where])
    assert missing.exit_code == 1 and "404 no run 'nope'" in missing.output
    invalid = runner.invoke(runs_app, ["start", str(config), "--set", "trainer.stepz=1", *where])
    assert invalid.exit_code == 2 and "trainer.stepz" in invalid.output


async def _ran(redis_url: str, run_id: str, output_dir) -> None:
    """What a run's driver records: where its files go."""
    client = aioredis.Redis.from_url(redis_url)
    try:
        await RunRegistry(client).update(run_id, status="running", output_dir=str(output_dir))
    finally:
        await client.aclose()


def test_etude_runs_trajectories_shows_what_the_agent_did(stack, tmp_path):
    """The trajectories a run kept, through the gateway: the worst first, each turn's text
    and tool calls, the environment's answers, the diff and the hidden tests' verdict."""
    runner = CliRunner()
    where = ["--run-dir", str(tmp_path)]
    assert runner.invoke(runs_app, ["start", "--run-id", "seen-1", *where]).exit_code == 0
    output = tmp_path / "out" / "seen-1"
    tokenizer = load_tokenizer()
    log = TrajectoryLog(output, tokenizer, keep=1.0)
    log.write(1, [[episode(tokenizer, "stats-1", 1.0, 0), episode(tokenizer, "stats-1", 0.0, 1)]])
    log.write(2, [[episode(tokenizer, "stats-2", 0.5, 0, "g2")]])
    asyncio.run(_ran(stack.redis_url, "seen-1", output))

    shown = runner.invoke(runs_app, ["trajectories", "seen-1", "--worst", "--limit", "1", *where])
    assert shown.exit_code == 0, shown.output
    assert "stats-1" in shown.stdout and "reward 0 " in shown.stdout
    assert "FAIL_TO_PASS 0/1" in shown.stdout and "PASS_TO_PASS broken 0/4" in shown.stdout
    assert "→ read_file(path='stats.py')" in shown.stdout  # the policy's call
    assert "def mean(xs): ..." in shown.stdout  # what the environment answered
    assert "+return total / n" in shown.stdout  # the diff
    picked = runner.invoke(runs_app, ["trajectories", "seen-1", "--step", "2", "--json", *where])
    assert [(r["task_id"], r["step"]) for r in json.loads(picked.stdout)] == [("stats-2", 2)]
    for refused, message in ((["nope"], "404 no run 'nope'"),
                             (["seen-1", "--worst", "--best"], "not both")):  # fmt: skip
        result = runner.invoke(runs_app, ["trajectories", *refused, *where])
        assert result.exit_code != 0 and message in result.output, result.output


def test_etude_runs_says_when_no_gateway_answers(tmp_path):
    runner = CliRunner()
    nobody = runner.invoke(runs_app, ["list", "--gateway", f"http://127.0.0.1:{free_port()}"])
    assert nobody.exit_code == 1 and "no gateway reachable" in nobody.output
    no_stack = runner.invoke(runs_app, ["tasksets", "--run-dir", str(tmp_path)])
    assert no_stack.exit_code == 1 and "no gateway" in no_stack.output
