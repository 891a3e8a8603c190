"""The sandbox settings reach grading: the reward service as `python -m etude.reward` builds
it (settings from the environment → `build` → grader) grades a task whose hidden test
needs a toolchain that only `ETUDE_SANDBOX__RO_BINDS` makes visible. Real sandboxes."""

from __future__ import annotations

import contextlib
import json
import stat
from pathlib import Path

import pytest

from etude.api.v1 import common_pb2, reward_pb2, reward_pb2_grpc
from etude.common.grpc_client import open_channel
from etude.common.grpc_server import ServiceRuntime
from etude.common.settings import ClientSettings, GrpcSettings
from etude.reward.__main__ import build
from etude.reward.config import RewardSettings
from etude.tasks.materialize import build_buggy_repository
from etude.tasks.repo import unified_diff
from etude.tasks.synth.synthesize import SUITE_COMMAND, load_project
from etude.tasks.task import Task, write_jsonl

pytestmark = pytest.mark.integration

FIXED = """import subprocess


def greeting():
    # The toolchain's own program answers (found on PATH, from the bound toolchain's bin/).
    return subprocess.run(["etude-greet"], capture_output=True, text=True).stdout.strip()
"""
BUGGY = 'def greeting():\n    return ""\n'
HIDDEN_TEST = """from toolbits import greeting


def test_greets_through_the_toolchain():
    assert greeting() == "hello from the toolchain"
"""


@pytest.fixture
def toolchain(tmp_path: Path) -> Path:
    """A directory that exists on the host only: the sandbox sees it through a bind alone."""
    program = tmp_path / "toolchain" / "bin" / "etude-greet"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\necho 'hello from the toolchain'\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return program.parent.parent


@pytest.fixture
def task(tmp_path: Path) -> Task:
    """A task whose fix calls the toolchain's program, in a project of its own."""
    root = tmp_path / "projects" / "toolbits"
    (root / "toolbits").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "toolbits" / "__init__.py").write_text(FIXED)
    (root / "tests" / "test_toolbits.py").write_text(HIDDEN_TEST)
    project = load_project(root)
    bug_patch = unified_diff("toolbits/__init__.py", FIXED, BUGGY)
    commit = build_buggy_repository(project, bug_patch, tmp_path / "build")
    return Task(
        id="toolbits.needs-toolchain", repo="etude-mini/toolbits", base_commit=commit,
        instruction="greeting() must return what the toolchain's etude-greet prints.",
        test_patch=unified_diff("tests/test_toolbits.py", None, HIDDEN_TEST),
        fail_to_pass=("tests/test_toolbits.py::test_greets_through_the_toolchain",),
        pass_to_pass=(), test_command=SUITE_COMMAND,
        gold_patch=unified_diff("toolbits/__init__.py", BUGGY, FIXED),
        metadata={"bug_patch": bug_patch},
    )  # fmt: skip


async def grade_gold_patch(task: Task) -> reward_pb2.ScoreResponse:
    """Score the task's gold patch over gRPC on a reward service built from the settings."""
    async with contextlib.AsyncExitStack() as resources:
        registrations = await build(RewardSettings(), resources)
        runtime = ServiceRuntime("reward", GrpcSettings(drain_seconds=0), registrations)
        await runtime.start()
        resources.push_async_callback(runtime.shutdown)
        async with open_channel(runtime.address, ClientSettings()) as channel:
            return await reward_pb2_grpc.RewardServiceStub(channel).Score(
                reward_pb2.ScoreRequest(
                    task_id=common_pb2.TaskId(value=task.id), patch=task.gold_patch
                ),
                timeout=120,
            )


@pytest.mark.parametrize("bound", [True, False], ids=["with-the-bind", "without"])
async def test_a_bind_set_in_the_settings_reaches_grading(
    bound, task, toolchain, tmp_path, monkeypatch, bwrap
):
    tasks_file = tmp_path / "tasks.jsonl"
    write_jsonl(tasks_file, [task])
    monkeypatch.delenv("ETUDE_SERVICES__ENVIRONMENT", raising=False)  # graded from the patch
    monkeypatch.setenv("ETUDE_REWARD__TASKS_FILES", json.dumps([str(tasks_file)]))
    monkeypatch.setenv("ETUDE_REWARD__PROJECTS_DIR", str(tmp_path / "projects"))
    monkeypatch.setenv("ETUDE_REWARD__CACHE_DIR", str(tmp_path / "cache"))
    # bwrap, not `process`: a process sandbox sees the whole host, toolchain included.
    monkeypatch.setenv("ETUDE_SANDBOX__BACKEND", "bwrap")
    monkeypatch.setenv("ETUDE_SANDBOX__RO_BINDS", json.dumps([str(toolchain)] if bound else []))

    reply = await grade_gold_patch(task)

    assert reply.error == ""
    [outcome] = reply.fail_to_pass
    assert outcome.passed is bound
    assert reply.reward == (1.0 if bound else 0.0)
