"""Process trees that die together: what a service starts (an engine core that ignores
SIGTERM and has no parent-death signal, as vLLM's) ends with the service, whether the stack
stops it, it is killed with SIGKILL, its start times out, or the whole stack was killed and the
next one starts in the same run directory; and Ctrl-C of `etude train` leaves nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from etude.cli.stack import STATE_FILE, LocalStack, ServiceSpec, StackError
from etude.common.processes import pid_alive
from etude.common.settings import EtudeSettings, StackSettings
from etude.sandbox.procs import descendants, in_session
from tests.cli.test_cli_integration import REPO_ROOT, start_long_training, wait_gone

pytestmark = pytest.mark.integration


def engine_like(pid_file: Path, *, never_ready: bool = False) -> ServiceSpec:
    env = [("PROBE_STUBBORN_CHILD", str(pid_file))]
    if never_ready:
        env.append(("PROBE_NEVER_READY", "1"))
    argv = (sys.executable, "-m", "tests.support.probe_service")
    return ServiceSpec("inference", argv, env=tuple(env))


def _stack(run_dir: Path, spec: ServiceSpec, ready_timeout: float = 30) -> LocalStack:
    stack = StackSettings(run_dir=run_dir, ready_timeout_seconds=ready_timeout)
    return LocalStack(EtudeSettings(stack=stack), (spec,))


def started_children(pid_file: Path, count: int = 1) -> list[int]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pids = [int(x) for x in pid_file.read_text().split()] if pid_file.exists() else []
        if len(pids) >= count and all(pid_alive(p) for p in pids):
            return pids
        time.sleep(0.05)
    raise AssertionError(f"the service did not start its engine-like child: {pid_file}")


def tree(pids: list[int]) -> set[int]:
    """Every live process in the sessions of `pids` or below them."""
    return {p for pid in pids for p in [*in_session(pid), *descendants(pid)]} | {
        p for p in pids if pid_alive(p)
    }


@pytest.fixture(autouse=True)
def _from_the_repository(monkeypatch):
    monkeypatch.chdir(REPO_ROOT)  # the probe service lives in the tests package


def test_stopping_the_stack_ends_a_child_that_ignores_sigterm(tmp_path):
    stack = _stack(tmp_path / "run", engine_like(tmp_path / "child.pid"))
    try:
        state = stack.start()
        [child] = started_children(tmp_path / "child.pid")
        members = tree([c.pid for c in state.components])
        assert child in members
    finally:
        stack.stop()
    assert wait_gone(sorted(members), timeout=5) == []


def test_a_service_killed_with_sigkill_leaves_nothing(tmp_path):
    stack = _stack(tmp_path / "run", engine_like(tmp_path / "child.pid"))
    try:
        state = stack.start()
        [child] = started_children(tmp_path / "child.pid")
        [service] = [c.pid for c in state.components if c.name == "inference"]
        os.kill(service, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not stack.exited() and time.monotonic() < deadline:  # as `etude up` polls it
            time.sleep(0.1)
        assert stack.exited() == [("inference", -signal.SIGKILL)]
        # Noticing the death ended the rest of the service's session, before any stop.
        assert wait_gone([child], timeout=2) == []
        assert stack.processes["inference"].returncode == -signal.SIGKILL
    finally:
        stack.stop()


def test_a_start_that_times_out_leaves_nothing(tmp_path):
    spec = engine_like(tmp_path / "child.pid", never_ready=True)
    stack = _stack(tmp_path / "run", spec, ready_timeout=2)
    with pytest.raises(StackError, match="inference did not become healthy"):
        stack.start()
    children = [int(x) for x in (tmp_path / "child.pid").read_text().split()]
    assert children  # each try started its engine-like child
    assert wait_gone(children, timeout=5) == []
    assert stack.processes == {} and stack.redis is None


SUPERVISOR = """
import sys, time
from pathlib import Path
from tests.cli.test_process_trees import _stack, engine_like
stack = _stack(Path(sys.argv[1]), engine_like(Path(sys.argv[2])))
stack.start()
print("ready", flush=True)
time.sleep(3600)
"""


def test_a_new_stack_ends_what_a_killed_stack_left_in_its_run_dir(tmp_path):
    run_dir, pid_file = tmp_path / "run", tmp_path / "child.pid"
    supervisor = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, str(run_dir), str(pid_file)],
        stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT,
    )  # fmt: skip
    try:
        assert supervisor.stdout is not None and supervisor.stdout.readline() == "ready\n"
        [child] = started_children(pid_file)
        services = [c["pid"] for c in json.loads((run_dir / STATE_FILE).read_text())["components"]]
    finally:
        supervisor.kill()  # SIGKILL: nothing of the supervisor cleans up
        supervisor.wait()
    # Its services follow it (their parent-death signal); the engine-like child has none.
    assert wait_gone(services) == []
    assert pid_alive(child)

    stack = _stack(run_dir, engine_like(tmp_path / "second.pid"))
    try:
        stack.start()
        assert wait_gone([child], timeout=5) == []
        [second] = started_children(tmp_path / "second.pid")
        assert pid_alive(second)  # the new stack's own engine is left alone
    finally:
        stack.stop()
        if pid_alive(child):
            os.kill(child, signal.SIGKILL)


def test_ctrl_c_of_etude_train_leaves_no_process_of_its_tree(tmp_path):
    train, run_dir, log = start_long_training(tmp_path, "interrupted")
    try:
        deadline = time.monotonic() + 180
        state: dict = {}
        while not state.get("components") or state.get("starting", True):
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            assert train.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
            try:
                state = json.loads((run_dir / STATE_FILE).read_text())
            except (OSError, ValueError):
                state = {}
        time.sleep(2)  # into the run's first phase
        members = tree([train.pid, *(c["pid"] for c in state["components"])])
        assert len(members) > len(state["components"])
        train.send_signal(signal.SIGINT)
        assert train.wait(timeout=120) == 130, log.read_text()[-3000:]
    finally:
        if train.poll() is None:
            train.kill()
            train.wait()
    assert wait_gone(sorted(members), timeout=10) == []
