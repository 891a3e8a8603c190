"""Grading patches against a synthesized task, in real sandboxes, and over gRPC."""

from __future__ import annotations

import tempfile
from pathlib import Path

import grpc
import pytest

from etude.api.v1 import common_pb2, reward_pb2, reward_pb2_grpc
from etude.common.grpc_client import open_channel
from etude.common.grpc_server import ServiceRuntime
from etude.common.settings import ClientSettings, GrpcSettings
from etude.common.toolcalls import ToolCall
from etude.environment.config import EnvironmentConfig
from etude.environment.local import InProcessEnvironment
from etude.environment.sessions import SessionManager
from etude.reward.config import RewardConfig
from etude.reward.grader import Grader
from etude.reward.server import RewardServicer, registration
from etude.sandbox.config import SandboxConfig
from etude.tasks.materialize import build_buggy_repository, materialize
from etude.tasks.repo import unified_diff
from etude.tasks.store import TaskStore
from etude.tasks.synth.synthesize import SynthOptions, kept_mutants, load_project, to_task
from etude.tasks.task import write_jsonl
from tests.tasks.conftest import write_tiny_project

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def task_and_project(tmp_path_factory, bwrap):
    """One synthesized task of the tiny project whose bug breaks `clamp`."""
    root = write_tiny_project(tmp_path_factory.mktemp("projects") / "mathbits")
    project = load_project(root)
    options = SynthOptions(seed=2, per_project=12, max_failing=4, workers=2)
    for kept in kept_mutants(project, options, bwrap):
        if any("clamp" in t for t in kept.fail_to_pass):
            draft = to_task(project, kept, options, "")
            commit = build_buggy_repository(
                project, draft.metadata["bug_patch"], Path(tempfile.mkdtemp())
            )
            return to_task(project, kept, options, commit), project
    pytest.fail("no clamp bug among the first mutants")


@pytest.fixture
def grader(task_and_project, tmp_path, bwrap):
    _task, project = task_and_project
    config = RewardConfig(
        projects_dir=project.root.parent, cache_dir=tmp_path / "cache", timeout_seconds=10,
        tasks_files=(),
    )  # fmt: skip
    return Grader(config, bwrap)


async def test_the_gold_patch_scores_one(grader, task_and_project):
    task, _ = task_and_project
    score = await grader.score(task, task.gold_patch)
    assert score.reward == 1.0 and score.error == ""
    assert all(score.fail_to_pass.values()) and all(score.pass_to_pass.values())
    assert score.components["fail_to_pass_total"] == len(task.fail_to_pass)
    assert score.components["touched_tests"] == 0.0


async def test_the_empty_patch_scores_zero(grader, task_and_project):
    task, _ = task_and_project
    score = await grader.score(task, "")
    assert score.reward == 0.0 and not any(score.fail_to_pass.values())
    assert all(score.pass_to_pass.values())


async def test_deleting_or_editing_the_hidden_tests_scores_zero(grader, task_and_project):
    task, project = task_and_project
    hidden = (project.root / "tests" / "test_core.py").read_text()
    deleted = unified_diff("tests/test_core.py", None, "def test_nothing():\n    pass\n")
    weakened = unified_diff("tests/test_core.py", None, hidden.replace("assert", "assert True or"))
    for patch in (deleted, weakened):
        score = await grader.score(task, patch)
        assert score.reward == 0.0
        assert score.components["touched_tests"] == 1.0
        assert not all(score.fail_to_pass.values())  # the real tests ran, and still fail


async def test_a_hanging_patch_is_cut_by_the_timeout(grader, task_and_project):
    task, _ = task_and_project
    patch = unified_diff("mathbits/__init__.py", "", "while True:\n    pass\n")
    score = await grader.score(task, patch)
    assert score.reward == 0.0 and score.timed_out and score.result == "timeout"
    assert score.seconds < 30


# Reaches the runner through names the static check does not know (left to the canaries):
# forces every report to passed, then, after pytest reported its end, prints a collection
# error and exits as pytest does when a test module fails to import.
FORGED_THEN_BROKEN = """
import logging as _logging


def _forge():
    modules = getattr(_logging, "s" + "ys").modules
    reports = modules["_py" + "test.reports"]
    original = reports.TestReport.__init__

    def forged(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.outcome = "passed"
        self.longrepr = None

    reports.TestReport.__init__ = forged
    leave = getattr(_logging.os, "_e" + "xit")

    def fake_collection_error():
        print("ERROR tests/test_core.py - ModuleNotFoundError: No module named 'mathbits'")
        leave(2)

    modules["at" + "exit"].register(fake_collection_error)


_forge()
"""
# Prints a collection error and ends the run before pytest can report its end.
BROKEN_THEN_KILLED = """
import logging as _logging

print("ERROR tests/test_core.py - ModuleNotFoundError: No module named 'mathbits'")
getattr(_logging.os, "_e" + "xit")(2)
"""


async def test_a_patch_that_stops_the_tests_importing_is_a_suite_error(grader, task_and_project):
    task, _ = task_and_project
    patch = unified_diff("mathbits/__init__.py", "", "from .nowhere import anything\n")
    score = await grader.score(task, patch)
    assert score.reward == 0.0 and score.result == "error"
    assert score.error.startswith("the suite could not run: tests/test_core.py: ")
    assert "No module named 'mathbits.nowhere'" in score.error
    assert score.components["tampered"] == 0.0
    assert not any(score.fail_to_pass.values())


@pytest.mark.parametrize(
    ("attack", "why"),
    [
        (FORGED_THEN_BROKEN, "was reported passed"),
        (BROKEN_THEN_KILLED, "without reporting its end"),
    ],
    ids=["forged-then-broken", "broken-then-killed"],
)
async def test_a_faked_suite_error_is_still_tampering(grader, task_and_project, attack, why):
    task, _ = task_and_project
    patch = task.gold_patch + unified_diff("mathbits/__init__.py", "", attack)
    score = await grader.score(task, patch)
    assert score.reward == 0.0
    assert score.components["runner_access"] == 0.0  # past the static check: the run decides
    assert score.components["tampered"] == 1.0
    assert score.error.startswith("tampered: ") and why in score.error, score.error


async def test_a_malformed_diff_is_a_clear_error(grader, task_and_project):
    task, _ = task_and_project
    score = await grader.score(task, "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+garbage\n")
    assert score.reward == 0.0 and score.result == "error"
    assert score.error.startswith("the patch does not apply")


async def test_score_over_grpc_reads_the_agents_session(task_and_project, tmp_path, bwrap):
    task, project = task_and_project
    tasks_file = tmp_path / "tasks.jsonl"
    write_jsonl(tasks_file, [task])
    repository = materialize(task, tmp_path / "agent-cache", project.root.parent)
    manager = SessionManager(EnvironmentConfig(root_dir=tmp_path / "env"), SandboxConfig())
    environment = InProcessEnvironment(manager)
    config = RewardConfig(
        projects_dir=project.root.parent, cache_dir=tmp_path / "cache", tasks_files=(tasks_file,)
    )
    servicer = RewardServicer(Grader(config, bwrap), TaskStore(config.tasks_files), environment)
    runtime = ServiceRuntime("reward", GrpcSettings(drain_seconds=0), [registration(servicer)])
    await runtime.start()
    try:
        session = (await environment.create_session(task.id, str(repository))).session_id
        fixed = (project.root / "mathbits" / "core.py").read_text()
        write = ToolCall("write_file", {"path": "mathbits/core.py", "content": fixed}, "call_0")
        await environment.execute(session, [write])
        async with open_channel(runtime.address, ClientSettings()) as channel:
            stub = reward_pb2_grpc.RewardServiceStub(channel)
            reply = await stub.Score(
                reward_pb2.ScoreRequest(
                    session_id=common_pb2.SessionId(value=session),
                    task_id=common_pb2.TaskId(value=task.id),
                ),
                timeout=120,
            )
            assert reply.reward == 1.0 and reply.error == ""
            assert {o.test_id for o in reply.fail_to_pass} == set(task.fail_to_pass)
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await stub.Score(
                    reward_pb2.ScoreRequest(task_id=common_pb2.TaskId(value="no-such-task")),
                    timeout=10,
                )
            assert error.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        await runtime.shutdown()
        await manager.close_all()
