"""A dependency that dies fails the run at once, with its reason: the stack tells a service
that ended (and how) or that reports it can no longer serve (an engine that died) from a
busy one, and `etude train` ends the run `failed` with that reason in the registry and on
the terminal within seconds, not after a call's deadline and not with a traceback."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis
import yaml

from etude.cli import service_watch
from etude.cli.stack import STATE_FILE, LocalStack, ServiceSpec
from etude.common.runs import RunRegistry
from etude.common.settings import EtudeSettings, StackSettings
from tests.cli.test_cli_integration import ETUDE, REPO_ROOT, start_long_training

pytestmark = pytest.mark.integration


def probe(**env: str) -> ServiceSpec:
    argv = (sys.executable, "-m", "tests.support.probe_service")
    return ServiceSpec("probe", argv, env=tuple(env.items()))


@pytest.fixture
def stack_of(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)  # the probe service lives in the tests package
    stacks: list[LocalStack] = []

    def start(spec: ServiceSpec) -> LocalStack:
        settings = EtudeSettings(stack=StackSettings(run_dir=tmp_path, ready_timeout_seconds=60))
        stacks.append(LocalStack(settings, (spec,)))
        stacks[-1].start()
        return stacks[-1]

    yield start
    for stack in stacks:
        stack.stop()


def first_failures(stack: LocalStack, within: float) -> tuple[list[str], float]:
    started = time.monotonic()
    while time.monotonic() - started < within:
        failed = stack.failures()
        if failed:
            return failed, time.monotonic() - started
        time.sleep(1.0)  # as often as the run driver asks
    return [], within


def test_a_service_that_says_it_can_no_longer_serve_fails_after_three_checks(stack_of):
    stack = stack_of(probe(PROBE_DIES_AFTER="3"))
    assert stack.failures() == []
    [failure], _ = first_failures(stack, within=30)
    assert failure.startswith("probe reports NOT_SERVING")
    assert failure.endswith(f"(its log: {stack.run_dir / 'logs' / 'probe.log'})")


def test_a_busy_moment_is_not_a_failure_but_a_long_silence_is(stack_of, monkeypatch):
    monkeypatch.setattr(service_watch, "SILENT_SECONDS", 8.0)
    stack = stack_of(probe())
    os.kill(stack.processes["probe"].pid, signal.SIGSTOP)  # alive, answering nothing
    try:
        started = time.monotonic()
        assert [stack.failures() for _ in range(4)] == [[], [], [], []]  # 4 s and more
        [failure], _ = first_failures(stack, within=30)
        assert time.monotonic() - started >= 8
        assert failure.startswith("probe has not answered its health check for")
    finally:
        os.kill(stack.processes["probe"].pid, signal.SIGCONT)
    assert stack.failures() == []  # answering again: the silence starts again


def test_a_killed_service_fails_at_once_with_how_it_ended(stack_of):
    stack = stack_of(probe())
    os.kill(stack.processes["probe"].pid, signal.SIGKILL)
    [failure], seconds = first_failures(stack, within=10)
    assert failure.startswith("probe was killed by SIGKILL")
    assert seconds < 2


async def _failed_record(redis_url: str, within: float):
    client = aioredis.Redis.from_url(redis_url)
    try:
        registry = RunRegistry(client)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            runs = await registry.list()
            if runs and runs[0].status == "failed":
                return runs[0]
            await asyncio.sleep(0.2)
    finally:
        await client.aclose()
    raise AssertionError("the run was not failed")


def kill_during_sft(train, run_dir: Path, log: Path, component: str) -> tuple[dict, float]:
    """Once the run's SFT has taken a step, SIGKILL the stack's `component` (its pid from the
    stack's state file); (that state, when it was killed)."""
    deadline = time.monotonic() + 300
    while "SFT step" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline and train.poll() is None, log.read_text()[-3000:]
        time.sleep(0.5)
    state = json.loads((run_dir / STATE_FILE).read_text())
    [process] = [c for c in state["components"] if c["name"] == component]
    killed = time.monotonic()
    os.kill(process["pid"], signal.SIGKILL)
    return state, killed


def test_etude_train_fails_the_run_within_seconds_when_its_inference_service_dies(tmp_path):
    train, run_dir, log = start_long_training(tmp_path, "doomed")
    try:
        state, killed = kill_during_sft(train, run_dir, log, "inference")
        record = asyncio.run(_failed_record(state["redis_url"], within=60))
        seconds_to_failed = time.monotonic() - killed
        assert train.wait(timeout=120) == 1
        exited_after = time.monotonic() - killed
    finally:
        if train.poll() is None:
            train.kill()
            train.wait()
    print(f"killed → failed record {seconds_to_failed:.1f} s, → exit {exited_after:.1f} s")
    assert seconds_to_failed < 10
    assert "inference was killed by SIGKILL" in record.error
    assert "inference.log" in record.error
    output = log.read_text()
    assert "the local stack can no longer serve: inference was killed by SIGKILL" in output
    # Nothing left half-done as the run ends: no traceback, no task its loop destroyed.
    assert "Traceback" not in output and "Task was destroyed" not in output


def test_etude_train_ends_within_seconds_with_the_reason_when_its_redis_dies(tmp_path):
    """The run registry lives in that Redis, so the reason cannot be recorded there: the
    terminal says it, and the run ends rather than retrying a registry that is gone."""
    train, run_dir, log = start_long_training(tmp_path, "no-redis")
    try:
        _, killed = kill_during_sft(train, run_dir, log, "redis")
        assert train.wait(timeout=120) == 1
        exited_after = time.monotonic() - killed
    finally:
        if train.poll() is None:
            train.kill()
            train.wait()
    print(f"Redis killed → etude train exited after {exited_after:.1f} s")
    assert exited_after < 30
    output = log.read_text()
    assert "the local stack can no longer serve: redis was killed by SIGKILL" in output
    assert "Traceback" not in output


def test_any_other_failure_prints_its_reason_and_where_the_logs_are(tmp_path):
    (tmp_path / "a-file").touch()
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({
        "name": "unwritable", "output_dir": str(tmp_path / "a-file" / "out"),
        "tasks": {"train_limit": 2, "eval_limit": 1, "hint_tier": 3},
        "sft": {"steps": 2, "batch_size": 2},
    }))  # fmt: skip
    run_dir = tmp_path / "stack"
    done = subprocess.run(
        [*ETUDE, "train", str(config), "--run-dir", str(run_dir)],
        capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
    )  # fmt: skip
    assert done.returncode == 1
    assert "The run failed: NotADirectoryError" in done.stderr, done.stderr[-3000:]
    assert f"are in {run_dir / 'logs'}" in done.stderr
    assert "Traceback" not in done.stderr
    assert "NotADirectoryError" in (run_dir / "logs" / "train.log").read_text()
