"""Nothing left after a kill: a `kill -9` of the environment service leaves its sessions'
cgroups, layers and (with the `process` backend) running commands behind; the next start
on the same root, or `etude up`, reclaims all of it, and only what belongs to a process
that is gone.

The service runs as its own process (`python -m etude.environment`) on real bwrap
sandboxes or the `process` backend, real cgroups and gRPC on loopback. Every test first
asserts that the debris exists, so that a reclaim doing nothing fails it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from etude.cli.stack import LocalStack
from etude.common.grpc_client import health_status
from etude.common.net import free_port
from etude.common.processes import log_tail, spawn, terminate
from etude.common.settings import ClientSettings, EtudeSettings, StackSettings
from etude.common.toolcalls import ToolCall
from etude.environment.client import GrpcEnvironment
from etude.environment.types import SessionNotFoundError
from etude.sandbox.bwrap import check_bwrap_works, configured_bwrap
from etude.sandbox.config import SandboxConfig
from etude.sandbox.limits import CgroupSupport, SessionCgroup, cgroup_pids, limited
from etude.sandbox.reclaim import Owner
from tests.conftest import skip_without_sandboxes
from tests.sandbox.conftest import small_sandbox

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"


@pytest.fixture
def sandboxes() -> None:
    with skip_without_sandboxes():
        bwrap = configured_bwrap(SandboxConfig())
        assert bwrap is not None
        check_bwrap_works(bwrap)


@dataclass
class Service:
    process: subprocess.Popen[bytes]
    address: str
    metrics_url: str
    log: Path

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def reclaimed(self) -> dict[str, float]:
        """etude_environment_leftovers_reclaimed_total by kind."""
        with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
            text = response.read().decode()
        pattern = r'^etude_environment_leftovers_reclaimed_total\{kind="(\w+)"\} (\S+)$'
        return {kind: float(value) for kind, value in re.findall(pattern, text, re.M)}


def start_environment(log: Path, **env: str) -> Service:
    """`python -m etude.environment` with `ETUDE_*` settings `env`, once it serves."""
    port, metrics = free_port(HOST), free_port(HOST)
    environ = {
        **os.environ,
        "ETUDE_GRPC__HOST": HOST,
        "ETUDE_GRPC__PORT": str(port),
        "ETUDE_GRPC__METRICS_PORT": str(metrics),
        **env,
    }
    process = spawn([sys.executable, "-m", "etude.environment"], log_path=log, env=environ)
    address = f"{HOST}:{port}"
    deadline = time.monotonic() + 60
    while health_status(address, timeout=0.5) != "SERVING":
        assert process.poll() is None, f"the environment did not start:\n{log_tail(log)}"
        assert time.monotonic() < deadline, f"the environment never served:\n{log_tail(log)}"
        time.sleep(0.1)
    return Service(process, address, f"http://{HOST}:{metrics}/metrics", log)


def on_root(root: Path, tasks: Path, backend: str = "bwrap") -> dict[str, str]:
    return {
        "ETUDE_ENVIRONMENT__ROOT_DIR": str(root),
        "ETUDE_ENVIRONMENT__REPOSITORY_ROOTS": json.dumps([str(tasks)]),
        "ETUDE_SANDBOX__BACKEND": backend,
    }


@contextlib.asynccontextmanager
async def client(service: Service) -> AsyncIterator[GrpcEnvironment]:
    env = GrpcEnvironment(service.address, ClientSettings(timeout_seconds=60))
    try:
        yield env
    finally:
        await env.close()


async def run(env: GrpcEnvironment, session: str, command: str) -> str:
    call = ToolCall("run_terminal_command", {"command": command}, "call_0")
    [result] = await env.execute(session, [call])
    return result.result.output


# --- what a session leaves, seen from the host ------------------------------------------


def cgroups_of(sessions: list[str]) -> list[Path]:
    """Cgroup directories named for `sessions` (`etude-<id>@<owner>`), in every hierarchy."""
    found = []
    for parent in CgroupSupport.detect().parents.values():
        for name in os.listdir(parent):
            if any(name.startswith(f"etude-{s}@") for s in sessions):
                found.append(parent / name)
    return found


def session_dirs(root: Path, sessions: list[str]) -> list[str]:
    return sorted(d.name for d in (root / "sessions").glob("*/*") if d.name in sessions)


def marked(nonce: str) -> list[int]:
    """Live processes whose command line holds `nonce` (the test's `sleep 100N.<nonce>`)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            with contextlib.suppress(OSError):
                if nonce in Path(f"/proc/{name}/cmdline").read_text() and Owner.of(int(name)):
                    found.append(int(name))
    return found


async def until(condition: Callable[[], bool], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return condition()


def clean_up(nonce: str, sessions: list[str]) -> None:
    """After a failed test: this test's processes and cgroups, nobody else's."""
    for pid in marked(nonce):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for directory in cgroups_of(sessions):
        for pid in cgroup_pids(directory):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
        with contextlib.suppress(OSError):
            directory.rmdir()


def new_nonce() -> str:
    return f"{secrets.randbelow(10**9):09d}"


# --- the tests ----------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["bwrap", "process"])
async def test_a_killed_service_leaves_nothing_once_restarted(
    tmp_path, repo, cgroups, sandboxes, backend
):
    root, nonce, sessions = tmp_path / "environment", new_nonce(), []
    first = start_environment(tmp_path / "first.log", **on_root(root, tmp_path, backend))
    second = None
    try:
        async with client(first) as env:
            a = (await env.create_session("t", str(repo))).session_id
            started = await run(
                env, a, f"echo edit >> README.md; sleep 1000.{nonce} & "
                f"setsid sleep 1001.{nonce} & echo started",
            )  # fmt: skip
            assert "started" in started
            b = await env.fork(a)
            c = (await env.create_session("t", str(repo))).session_id
            sessions = [a, b, c]
            # A command still running when the service dies.
            busy = asyncio.create_task(run(env, c, f"sleep 1002.{nonce}"))
            assert await until(lambda: len(marked(nonce)) == 3), marked(nonce)
            first.kill()
            with pytest.raises(Exception):  # noqa: B017 - the server is gone mid-call
                await busy

        # The debris a SIGKILL leaves: every session's cgroup (one per hierarchy) and
        # layer; with the `process` backend, its commands too (re-parented, still running,
        # also the one that left its process session). bwrap's end with its pid namespace.
        assert len(cgroups_of(sessions)) == 3 * len(cgroups.parents)
        assert session_dirs(root, sessions) == sorted(sessions)
        if backend == "process":
            assert len(marked(nonce)) == 3

        second = start_environment(tmp_path / "second.log", **on_root(root, tmp_path, backend))

        # Reclaimed before it served: nothing of those sessions remains.
        assert cgroups_of(sessions) == []
        assert session_dirs(root, sessions) == []
        assert await until(lambda: marked(nonce) == [], timeout=5), marked(nonce)
        assert "reclaimed what killed environment services left" in second.log.read_text()
        counts = second.reclaimed()  # cgroups: more if another killed service left some
        assert counts["sessions"] == 3 and counts["cgroups"] >= 3
        if backend == "process":
            assert counts["processes"] >= 3

        async with client(second) as env:
            with pytest.raises(SessionNotFoundError):
                await run(env, a, "true")
            fresh = (await env.create_session("t", str(repo))).session_id
            # The base as it was: the killed session's edit stayed in its own layer.
            assert (await run(env, fresh, "cat README.md; echo works")).startswith("# demo\nworks")
        assert terminate(second.process, 30) == 0
        # A clean stop leaves nothing either.
        assert list((root / "sessions").iterdir()) == []
    finally:
        for service in (first, second):
            if service is not None and service.process.poll() is None:
                terminate(service.process, 30)
        clean_up(nonce, sessions)


async def test_a_start_reclaims_only_what_belongs_to_processes_that_are_gone(
    tmp_path, repo, cgroups, sandboxes
):
    """Three services on one root: a live one, a killed one, and one starting after the
    kill. The start reclaims the killed one's sessions; the live one keeps its sessions,
    their cgroups, files and processes, and goes on working."""
    root, nonce = tmp_path / "environment", new_nonce()
    settings, services, mine, theirs = on_root(root, tmp_path), [], [], []
    try:
        live = start_environment(tmp_path / "live.log", **settings)
        services.append(live)
        async with client(live) as env:
            a = (await env.create_session("t", str(repo))).session_id
            mine.append(a)
            await run(env, a, f"echo kept > mine.txt; sleep 1000.{nonce} & echo started")

        killed = start_environment(tmp_path / "killed.log", **settings)
        services.append(killed)
        async with client(killed) as env:
            k = (await env.create_session("t", str(repo))).session_id
            theirs.append(k)
            await run(env, k, "true")  # its sandbox started (and its cgroup with it)
        killed.kill()
        assert cgroups_of(theirs) and session_dirs(root, theirs) == theirs

        services.append(start_environment(tmp_path / "third.log", **settings))

        assert cgroups_of(theirs) == [] and session_dirs(root, theirs) == []
        assert len(cgroups_of(mine)) == len(cgroups.parents)
        assert session_dirs(root, mine) == mine
        assert len(marked(nonce)) == 1  # its command, still running
        async with client(live) as env:
            assert (await run(env, a, "cat mine.txt")).startswith("kept")
    finally:
        for service in services:
            if service.process.poll() is None:
                terminate(service.process, 30)
        clean_up(nonce, mine + theirs)


def test_the_stack_start_reclaims_sessions_and_gradings_of_killed_services(tmp_path, repo, cgroups):
    """`etude up` (LocalStack.start) before it starts anything: a killed environment's
    sessions under the stack's run directory, and a grading's cgroup (named as
    etude.tasks.testrun names it) whose process is gone, each with a process still in it."""
    run_dir, nonce, sessions = tmp_path / "run", new_nonce(), []
    environment = start_environment(
        tmp_path / "environment.log",
        ETUDE_STACK__RUN_DIR=str(run_dir),
        ETUDE_ENVIRONMENT__REPOSITORY_ROOTS=json.dumps([str(tmp_path)]),
        ETUDE_SANDBOX__BACKEND="process",
    )

    async def open_session() -> None:
        async with client(environment) as env:
            sessions.append((await env.create_session("t", str(repo))).session_id)
            await run(env, sessions[0], f"sleep 1000.{nonce} & echo started")

    grading = cgroup = None
    try:
        asyncio.run(open_session())
        environment.kill()
        gone = subprocess.Popen(["true"])
        gone.wait()  # a grading process that is gone, by its pid
        cgroup = SessionCgroup(
            cgroups, f"etude-grade-{gone.pid}-{secrets.token_hex(6)}", small_sandbox()
        )
        grading = subprocess.Popen(limited(["sleep", f"1001.{nonce}"], small_sandbox(), cgroup))
        assert asyncio.run(until(lambda: len(marked(nonce)) == 2)), marked(nonce)
        assert cgroups_of(sessions) and session_dirs(run_dir / "environment", sessions)

        settings = EtudeSettings(stack=StackSettings(run_dir=run_dir, ready_timeout_seconds=30))
        stack = LocalStack(settings, ())
        try:
            stack.start()
        finally:
            stack.stop()

        assert cgroups_of(sessions) == []
        assert session_dirs(run_dir / "environment", sessions) == []
        assert not any(d.exists() for d in cgroup.dirs)
        assert grading.wait(5) == -signal.SIGKILL
        assert asyncio.run(until(lambda: marked(nonce) == [], timeout=5)), marked(nonce)
    finally:
        if environment.process.poll() is None:
            terminate(environment.process, 30)
        if grading is not None and grading.poll() is None:
            grading.kill()
            grading.wait()
        if cgroup is not None:
            cgroup.remove()
        clean_up(nonce, sessions)
