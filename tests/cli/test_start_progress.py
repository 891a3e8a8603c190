"""The stack waits for a start that shows progress, however slow, and fails a stuck or
crashed one at once with the reason and the service's log."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from etude.cli.stack import LocalStack, ServiceSpec, StackError
from etude.common.settings import EtudeSettings, StackSettings
from tests.cli.test_cli_integration import REPO_ROOT

pytestmark = pytest.mark.integration


def probe(**env: str) -> ServiceSpec:
    argv = (sys.executable, "-m", "tests.support.probe_service")
    return ServiceSpec("probe", argv, env=tuple(env.items()))


def _stack(run_dir: Path, spec: ServiceSpec, *, stall: float, timeout: float) -> LocalStack:
    settings = StackSettings(
        run_dir=run_dir, ready_timeout_seconds=timeout, start_stall_seconds=stall
    )
    return LocalStack(EtudeSettings(stack=settings), (spec,))


@pytest.fixture(autouse=True)
def _from_the_repository(monkeypatch):
    monkeypatch.chdir(REPO_ROOT)  # the probe service lives in the tests package


def test_a_slow_start_that_shows_progress_is_waited_for(tmp_path):
    # Busy three times the stall window before it serves: a fixed deadline of that size
    # would have failed it.
    stack = _stack(tmp_path, probe(PROBE_BUSY_SECONDS="6"), stall=2, timeout=60)
    started = time.monotonic()
    try:
        state = stack.start()
        assert time.monotonic() - started >= 6
        assert [c.name for c in state.components] == ["redis", "probe"]
    finally:
        stack.stop()


def test_a_stuck_start_fails_after_the_stall_window_with_its_log(tmp_path):
    spec = probe(PROBE_NEVER_READY="1", PROBE_STUBBORN_CHILD=str(tmp_path / "child.pid"))
    stack = _stack(tmp_path / "run", spec, stall=2, timeout=120)
    started = time.monotonic()
    with pytest.raises(StackError) as failed:
        stack.start()
    assert time.monotonic() - started < 30
    message = str(failed.value)
    assert "probe did not become healthy: it showed no progress for" in message
    assert "stack.start_stall_seconds" in message and "its log (" in message
    # One try: a stuck start is not started again.
    assert len((tmp_path / "child.pid").read_text().split()) == 1


def test_a_start_that_keeps_computing_past_the_limit_fails_with_the_limit(tmp_path):
    stack = _stack(tmp_path, probe(PROBE_BUSY_SECONDS="60"), stall=30, timeout=3)
    with pytest.raises(StackError, match=r"not serving after 3 s \(stack.ready_timeout_seconds\)"):
        stack.start()


def test_a_crashed_start_fails_at_once_with_its_exit_code_and_log(tmp_path):
    crash = ServiceSpec("crash", (sys.executable, "-c", "raise SystemExit('no model: x')"))
    stack = _stack(tmp_path, crash, stall=30, timeout=120)
    started = time.monotonic()
    with pytest.raises(StackError, match=r"it exited with code 1 .*\n(.|\n)*no model: x"):
        stack.start()
    assert time.monotonic() - started < 30
