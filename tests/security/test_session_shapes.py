"""A correct fix scores 1 through a live session whatever else the session leaves behind.

The fix is made in a real sandbox session (write_file or the shell), next to a new, deleted,
binary, executable or symlinked file, or followed by the shell's death (`exit`, `kill -9 $$`,
`exec true`); the reward service scores it over gRPC from the session's Diff. After each, the
file tools still work.
"""

from __future__ import annotations

import shlex

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
from etude.tasks.materialize import materialize
from etude.tasks.store import TaskStore
from etude.tasks.task import write_jsonl
from tests.reward.test_grader_integration import task_and_project  # noqa: F401
from tests.tasks.conftest import bwrap  # noqa: F401

pytestmark = pytest.mark.integration

FIXED = "mathbits/core.py"


def shell(command: str) -> ToolCall:
    return ToolCall("run_terminal_command", {"command": command}, "c0")


SHAPES = {
    "fix_only": [],
    "new_file": [shell("printf 'notes\\n' > NOTES.md")],
    "new_file_in_new_dir": [shell("mkdir -p docs/deep && printf 'x\\n' > docs/deep/NOTES.md")],
    # Without it mathbits is a namespace package: the tests still import it.
    "deleted_file": [shell("rm mathbits/__init__.py")],
    "binary_file": [shell("printf '\\000\\001\\002\\377' > blob.bin")],
    "executable_file": [shell("printf '#!/bin/sh\\necho hi\\n' > run.sh && chmod +x run.sh")],
    "symlink": [shell("ln -s mathbits/core.py core_link.py")],
    "exit_last": [shell("exit")],
    "kill_shell_last": [shell("kill -9 $$")],
    "exec_last": [shell("exec true")],
}


@pytest.fixture
async def stack(task_and_project, tmp_path_factory, bwrap):  # noqa: F811
    task, project = task_and_project
    tmp = tmp_path_factory.mktemp("shapes")
    tasks_file = tmp / "tasks.jsonl"
    write_jsonl(tasks_file, [task])
    repository = materialize(task, tmp / "agent-cache", project.root.parent)
    manager = SessionManager(EnvironmentConfig(root_dir=tmp / "env"), SandboxConfig())
    environment = InProcessEnvironment(manager)
    config = RewardConfig(
        projects_dir=project.root.parent, cache_dir=tmp / "cache", tasks_files=(tasks_file,)
    )
    servicer = RewardServicer(Grader(config, bwrap), TaskStore(config.tasks_files), environment)
    runtime = ServiceRuntime("reward", GrpcSettings(drain_seconds=0), [registration(servicer)])
    await runtime.start()
    try:
        yield task, project, repository, environment, runtime
    finally:
        await runtime.shutdown()
        await manager.close_all()


CASES = [(shape, "write_file") for shape in SHAPES] + [("fix_only", "sed"), ("exit_last", "sed")]


@pytest.mark.parametrize(("shape", "how"), CASES)
async def test_a_correct_fix_scores_one_in_every_shape(stack, shape, how):
    task, project, repository, environment, runtime = stack
    fixed = (project.root / FIXED).read_text()
    session = (await environment.create_session(task.id, str(repository))).session_id
    if how == "write_file":
        fix = ToolCall("write_file", {"path": FIXED, "content": fixed}, "c0")
    else:
        fix = shell(f"printf %s {shlex.quote(fixed)} > {FIXED} && sed -i 's/\\r$//' {FIXED}")
    for call in [fix, *SHAPES[shape]]:
        [executed] = await environment.execute(session, [call])
        if not shape.endswith("_last"):  # those end the shell: no exit 0 to see
            assert executed.result.exit_code == 0, executed.result.output
    async with open_channel(runtime.address, ClientSettings()) as channel:
        reply = await reward_pb2_grpc.RewardServiceStub(channel).Score(
            reward_pb2.ScoreRequest(
                session_id=common_pb2.SessionId(value=session),
                task_id=common_pb2.TaskId(value=task.id),
            ),
            timeout=120,
        )
    assert reply.error == "" and reply.reward == 1.0, (reply.error, reply.reward)
    [read] = await environment.execute(session, [ToolCall("read_file", {"path": FIXED}, "c0")])
    assert read.result.exit_code == 0 and fixed.splitlines()[0] in read.result.output
    [ran] = await environment.execute(session, [shell("echo alive")])
    assert "alive" in ran.result.output
    await environment.close_session(session)
