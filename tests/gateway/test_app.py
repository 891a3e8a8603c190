"""The gateway's HTTP API in-process (FastAPI's TestClient) over a real Redis: runs with
their task sets, stops, and the reaper that ends runs nothing is left to end."""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from pathlib import Path

import httpx
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
from etude.gateway.validation import gateway_run_dir
from etude.tasks.materialize import BUNDLED_TASKSETS, HELD_OUT_PROJECTS
from etude.tasks.task import read_jsonl
from etude.tasks.taskset import RunTasks

# The operator's token, as `etude runs` presents it (the root conftest made the set).
OPERATOR = bearer_header(get_settings().auth, "operator")
BUNDLED = list(read_jsonl(BUNDLED_TASKSETS["etude-mini"]))


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


def test_a_run_s_task_set_is_registered_with_it_uploaded_or_named(client, redis_url):
    """`etude runs start` sends the records of a file on the caller's machine; a bundled set
    is read by the gateway. Either way the run's tasks are in Redis before it is launched."""
    mine = [{**t.to_swe(), "instance_id": f"mine-{t.id}"} for t in BUNDLED[:3]]
    reply = client.post("/runs", json={
        "config": {"tasks": {"taskset": "/home/me/my.jsonl", "eval_limit": 0}},
        "run_id": "uploaded", "tasks": mine,
    })  # fmt: skip
    assert reply.status_code == 201, reply.text
    assert reply.json()["config"]["tasks"]["taskset"] == "/home/me/my.jsonl"  # a label only
    named = client.post("/runs", json={"config": {"tasks": {"train_limit": 2, "eval_limit": 1}},
                                       "run_id": "named"})  # fmt: skip
    assert named.status_code == 201, named.text

    async def registered(run_id: str):
        redis = aioredis.Redis.from_url(redis_url)
        try:
            return await RunTasks(redis).selection(run_id)
        finally:
            await redis.aclose()

    uploaded = asyncio.run(registered("uploaded"))
    trained = {t["instance_id"] for t in mine if t["metadata"]["split"] == "train"}
    assert {t.id for t in uploaded.train} == trained and uploaded.source == "/home/me/my.jsonl"
    bundled = asyncio.run(registered("named"))
    assert (len(bundled.train), len(bundled.held_out), bundled.source) == (2, 1, "etude-mini")


def test_a_run_s_sources_are_registered_with_it_inside_the_run_dir_or_the_shared_volume(
    client, redis_url
):
    """Workers and the reward service build the run's tasks from its sources, so they are
    registered with its tasks, resolved; a caller may not point them elsewhere on the host."""
    run_dir = gateway_run_dir()
    tasks = {"train_limit": 1, "eval_limit": 0, "environments": "off",
             "sources": {"repositories": {"acme/x": "repos/x"},
                         "checkouts": ["/shared/tasks/mirrors"]},
             "packages": {"wheelhouse": "wheels"}}  # fmt: skip
    reply = client.post("/runs", json={"config": {"tasks": tasks}, "run_id": "sourced"})
    assert reply.status_code == 201, reply.text

    async def registered():
        redis = aioredis.Redis.from_url(redis_url)
        try:
            return await RunTasks(redis).provisioning("sourced")
        finally:
            await redis.aclose()

    provisioning = asyncio.run(registered())
    assert provisioning.sources.repositories == {"acme/x": run_dir / "repos" / "x"}
    assert provisioning.sources.checkouts == (Path("/shared/tasks/mirrors"),)
    assert provisioning.packages.wheelhouse == run_dir / "wheels"
    assert provisioning.environments == "off"
    for where in ({"sources": {"checkouts": ["/etc"]}},
                  {"sources": {"projects": ["../../elsewhere"]}},
                  {"sources": {"repositories": {"acme/x": "/shared/tasks/../../etc"}}},
                  {"packages": {"wheelhouse": "/root/wheels"}}):  # fmt: skip
        refused = client.post("/runs", json={"config": {"tasks": where}, "run_id": "elsewhere"})
        assert refused.status_code == 422, (where, refused.text)
        assert "must lie under" in refused.text
    assert client.get("/runs/elsewhere").status_code == 404


def test_a_task_set_that_cannot_be_used_is_refused_and_no_run_recorded(client):
    for body, problem in (
        ({"config": {"tasks": {"taskset": "missing.jsonl"}}}, "no task set 'missing.jsonl'"),
        ({"tasks": [{"repo": "x"}]}, "tasks[0]: task record lacks"),
        ({"tasks": []}, "has no training tasks"),
    ):
        reply = client.post("/runs", json={**body, "run_id": "refused"})
        assert reply.status_code == 422, reply.text
        assert problem in reply.json()["detail"]
    assert client.get("/runs/refused").status_code == 404


def test_the_reaper_ends_a_run_whose_driver_is_gone(redis_url):
    app = create_app(redis_url, RecordOnlyLauncher(), driver_timeout_seconds=0.5,
                     reap_interval_seconds=0.2)  # fmt: skip
    with TestClient(app, headers=OPERATOR) as client:
        for run_id in ("silent", "shown"):
            assert client.post("/runs", json={"run_id": run_id}).status_code == 201
            report(redis_url, run_id, status="running")  # and no heartbeat after that
        client.post("/runs/silent/stop")
        deadline = time.monotonic() + 10
        while client.get("/runs/silent").json()["status"] != "stopped":
            assert time.monotonic() < deadline, client.get("/runs/silent").json()
            time.sleep(0.1)
        # The reaper's reason is what `etude runs show` prints.
        assert "no heartbeat from the run's driver" in client.get("/runs/silent").json()["error"]
        shown = client.get("/runs/shown").json()
        assert shown["status"] == "failed" and "no heartbeat" in shown["error"]


def test_showing_one_run_does_not_lose_the_exit_of_another(redis_url, tmp_path):
    """Each exit is handed over once: `GET /runs/a` must end `b` too, or b's exit code and
    log are never recorded (only the driver timeout would end it, for another reason)."""
    launcher = LocalLauncher(tmp_path, argv_prefix=(sys.executable, "-c", "exit(3)"))
    app = create_app(redis_url, launcher, reap_interval_seconds=3600)  # only GETs reap
    with TestClient(app, headers=OPERATOR) as client:
        for run_id in ("a", "b"):
            assert client.post("/runs", json={"run_id": run_id}).status_code == 201
        for process in list(launcher.processes.values()):
            process.wait(timeout=30)
        assert client.get("/runs/a").json()["status"] == "failed"
        b = client.get("/runs/b").json()
        assert b["status"] == "failed" and "exited with code 3" in b["error"], b


class _LauncherFailingOnce(LocalLauncher):
    """A stand-in for a fault the test cannot cause on time: the first reap finds the
    launcher raising (as `exited()` did when a launch changed its table mid-read)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.failures_left = 1

    def exited(self) -> dict[str, int]:
        if self.failures_left:
            self.failures_left -= 1
            raise RuntimeError("dictionary changed size during iteration")
        return super().exited()


def test_a_failing_reaper_round_neither_stops_the_reaper_nor_the_shutdown(redis_url, tmp_path):
    launcher = _LauncherFailingOnce(tmp_path, argv_prefix=(sys.executable, "-c", "exit(3)"))
    app = create_app(redis_url, launcher, reap_interval_seconds=0.1)

    async def scenario() -> dict:
        # The lifespan driven directly: a shutdown that raised would fail the test here
        # (TestClient's exit would wait for ever instead).
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://gateway", headers=OPERATOR
            ) as client:
                assert (await client.post("/runs", json={"run_id": "dies"})).status_code == 201
                while launcher.failures_left:  # the failing round has run
                    await asyncio.sleep(0.05)
                deadline = time.monotonic() + 20
                while (run := (await client.get("/runs/dies")).json())["status"] == "queued":
                    assert time.monotonic() < deadline, run
                    await asyncio.sleep(0.1)
                return run

    run = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert run["status"] == "failed" and "exited with code 3" in run["error"]


def test_a_queued_run_stops_at_once_and_a_launched_process_that_exits_ends_its_run(
    redis_url, tmp_path
):
    # `exit 3` stands in for an `etude train` that dies before it records anything.
    launcher = LocalLauncher(tmp_path, argv_prefix=(sys.executable, "-c", "exit(3)"))
    app = create_app(redis_url, launcher, reap_interval_seconds=0.2)
    with TestClient(app, headers=OPERATOR) as client:
        assert client.post("/runs", json={"run_id": "crashes"}).status_code == 201
        deadline = time.monotonic() + 20
        while (run := client.get("/runs/crashes").json())["status"] == "queued":
            assert time.monotonic() < deadline, run
            time.sleep(0.1)
        assert run["status"] == "failed" and "exited with code 3" in run["error"]
        assert str(tmp_path / "gateway" / "crashes.log") in run["error"]
    with TestClient(create_app(redis_url, RecordOnlyLauncher()), headers=OPERATOR) as client:
        client.post("/runs", json={"run_id": "waiting"})
        stopped = client.post("/runs/waiting/stop")
        assert stopped.status_code == 202 and stopped.json()["status"] == "stopped"
