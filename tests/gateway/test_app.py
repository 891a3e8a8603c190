"""The gateway's HTTP API in-process (FastAPI's TestClient) over a real Redis."""

from __future__ import annotations

import asyncio
import json
import math
import sys

import pytest
import redis.asyncio as aioredis
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from etude.common.auth import bearer_header
from etude.common.run_config import load_run_config
from etude.common.runs import RunRegistry
from etude.common.settings import get_settings
from etude.gateway.__main__ import make_launcher
from etude.gateway.app import create_app
from etude.gateway.config import GatewayConfig, GatewaySettings
from etude.gateway.launcher import LocalLauncher, RecordOnlyLauncher
from etude.tasks.materialize import BUNDLED_TASKSETS, HELD_OUT_PROJECTS
from etude.tasks.task import read_jsonl

# The operator's token, as `etude runs` presents it (the root conftest made the set).
OPERATOR = bearer_header(get_settings().auth, "operator")


@pytest.fixture
def client(redis_url):
    with TestClient(create_app(redis_url, RecordOnlyLauncher()), headers=OPERATOR) as client:
        yield client


def report(redis_url: str, run_id: str, **fields) -> None:
    """What the training loop does: update the run through its own registry."""

    async def update() -> None:
        redis = aioredis.Redis.from_url(redis_url)
        try:
            await RunRegistry(redis).update(run_id, **fields)
        finally:
            await redis.aclose()

    asyncio.run(update())


def test_health_answers_when_redis_does(client):
    assert client.get("/health").json() == {"status": "ok"}


def test_a_run_is_created_listed_shown_and_stopped(client, redis_url):
    reply = client.post("/runs", json={"config": {"name": "demo", "trainer": {"steps": 2}}})
    assert reply.status_code == 201, reply.text
    run = reply.json()
    assert run["run_id"].startswith("demo-") and run["status"] == "queued"
    assert run["config"]["trainer"]["steps"] == 2
    second = client.post("/runs", json={"config": {}, "run_id": "second"}).json()
    assert [r["run_id"] for r in client.get("/runs").json()] == [second["run_id"], run["run_id"]]
    assert [r["run_id"] for r in client.get("/runs?limit=1").json()] == ["second"]

    report(redis_url, run["run_id"], status="running", step=1, metrics={"reward": 0.25})
    shown = client.get(f"/runs/{run['run_id']}").json()
    assert (shown["status"], shown["step"], shown["metrics"]) == ("running", 1, {"reward": 0.25})

    stopped = client.post(f"/runs/{run['run_id']}/stop")
    assert stopped.status_code == 202
    assert (stopped.json()["status"], stopped.json()["stop_requested"]) == ("stopping", True)


def test_invalid_configs_get_422_naming_the_field(client):
    reply = client.post("/runs", json={"config": {"trainer": {"steps": -1}}})
    assert reply.status_code == 422
    assert reply.json()["detail"][0]["loc"] == ["body", "config", "trainer", "steps"]
    reply = client.post("/runs", json={"config": {"rollout": {"group_sise": 4}}})
    assert reply.json()["detail"][0]["loc"] == ["body", "config", "rollout", "group_sise"]
    for body in ({"config": {"name": "Bad Name"}}, {"run_id": "../x"}, {"extra": 1}, []):
        assert client.post("/runs", json=body).status_code == 422, body
    bad_json = client.post(
        "/runs", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert bad_json.status_code == 422


def test_conflicts_and_unknown_runs(client, redis_url):
    assert client.post("/runs", json={"run_id": "taken"}).status_code == 201
    taken = client.post("/runs", json={"run_id": "taken"})
    assert taken.status_code == 409 and "already exists" in taken.json()["detail"]
    assert client.get("/runs/ghost").json() == {"detail": "no run 'ghost'"}
    assert client.get("/runs/ghost").status_code == 404
    assert client.post("/runs/ghost/stop").status_code == 404
    report(redis_url, "taken", status="finished")
    ended = client.post("/runs/taken/stop")
    assert ended.status_code == 409 and "finished" in ended.json()["detail"]


@pytest.mark.parametrize("limit", ["0", "1001", "-5", "many", "1e3", "99999999999999999999"])
def test_limits_out_of_bounds_get_422(client, limit):
    assert client.get(f"/runs?limit={limit}").status_code == 422


def test_non_finite_metrics_are_served_as_null(client, redis_url):
    client.post("/runs", json={"run_id": "nan"})
    report(redis_url, "nan", metrics={"loss": math.nan, "reward": 1.0})
    assert client.get("/runs/nan").json()["metrics"] == {"loss": None, "reward": 1.0}
    assert client.get("/runs").status_code == 200


def test_tasksets_count_train_and_held_out_tasks(client):
    expected = []
    for name, path in BUNDLED_TASKSETS.items():
        tasks = list(read_jsonl(path))
        held_out = sum(t.metadata["project"] in HELD_OUT_PROJECTS for t in tasks)
        assert held_out > 0
        expected.append({"name": name, "tasks": len(tasks), "train": len(tasks) - held_out,
                         "held_out": held_out})  # fmt: skip
    assert client.get("/tasksets").json() == expected


def test_requests_are_counted_by_route_template(client):
    def count() -> float:
        labels = {"method": "GET", "route": "/runs/{run_id}", "status": "404"}
        return REGISTRY.get_sample_value("etude_gateway_requests_total", labels) or 0.0

    before = count()
    client.get("/runs/one")
    client.get("/runs/two")
    assert count() == before + 2
    assert REGISTRY.get_sample_value("etude_gateway_request_seconds_count",
                                     {"route": "/runs/{run_id}"})  # fmt: skip


def test_a_dead_redis_gives_503_not_500(fresh_redis):
    with TestClient(create_app(fresh_redis.url, RecordOnlyLauncher(),
                               redis_timeout_seconds=0.5), headers=OPERATOR) as client:  # fmt: skip
        assert client.post("/runs", json={"run_id": "before"}).status_code == 201
        fresh_redis.kill()
        for method, path in (("GET", "/health"), ("GET", "/runs"), ("GET", "/runs/before"),
                             ("POST", "/runs"), ("POST", "/runs/before/stop")):  # fmt: skip
            reply = client.request(method, path, json={} if path == "/runs" else None)
            assert reply.status_code == 503, (method, path, reply.text)
            assert reply.json()["detail"].startswith("redis unavailable")
        assert client.get("/tasksets").status_code == 200  # needs no Redis


def test_local_launcher_spawns_train_with_the_written_config(redis_url, tmp_path):
    # The argv prefix stands in for `python -m etude.cli`: a real process that writes its
    # arguments and whether it leads its own session next to the config it was given.
    recorder = (
        "import json, os, pathlib, sys; "
        "pathlib.Path(sys.argv[2]).with_suffix('.argv').write_text(json.dumps({"
        "'argv': sys.argv[1:], 'own_session': os.getsid(0) == os.getpid(), "
        "'redis': os.environ['ETUDE_REDIS__URL']}))"
    )
    launcher = LocalLauncher(tmp_path, argv_prefix=(sys.executable, "-c", recorder),
                             env={"ETUDE_REDIS__URL": redis_url})  # fmt: skip
    with TestClient(create_app(redis_url, launcher), headers=OPERATOR) as client:
        reply = client.post("/runs", json={"config": {"name": "local", "sft": {"steps": 5}},
                                           "run_id": "local-1"})  # fmt: skip
        assert reply.status_code == 201, reply.text
    assert launcher.processes["local-1"].wait(timeout=30) == 0
    config_path = tmp_path / "gateway" / "local-1.yaml"
    seen = json.loads(config_path.with_suffix(".argv").read_text())
    assert seen == {"argv": ["train", str(config_path), "--run-id", "local-1"],
                    "own_session": True, "redis": redis_url}  # fmt: skip
    config = load_run_config(config_path)
    assert (config.name, config.sft.steps) == ("local", 5)
    assert (tmp_path / "gateway" / "local-1.log").is_file()


def test_settings_choose_the_launcher(tmp_path):
    none = GatewaySettings(gateway=GatewayConfig(launcher="none"))
    assert isinstance(make_launcher(none), RecordOnlyLauncher)
    local = make_launcher(GatewaySettings(gateway=GatewayConfig(run_dir=tmp_path)))
    assert isinstance(local, LocalLauncher) and local.directory == tmp_path.resolve() / "gateway"
    assert local.env["ETUDE_GRPC__PORT"] == "0"  # not the gateway's own port


def test_a_launch_that_fails_marks_the_run_failed(redis_url, tmp_path):
    launcher = LocalLauncher(tmp_path, argv_prefix=(str(tmp_path / "no-such-program"),))
    with TestClient(
        create_app(redis_url, launcher), raise_server_exceptions=False, headers=OPERATOR
    ) as client:
        reply = client.post("/runs", json={"run_id": "doomed"})
        assert reply.status_code == 500 and "could not launch" in reply.json()["detail"]
        run = client.get("/runs/doomed").json()
    assert run["status"] == "failed" and "no-such-program" in run["error"]
