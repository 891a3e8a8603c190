"""The reward service the forgery suites attack: a real one on loopback, grading bundled
tasks in real bwrap sandboxes, and what attacks are built from (patches of the semverkit
project's task)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

from etude.api.v1 import common_pb2, reward_pb2, reward_pb2_grpc
from etude.common.grpc_client import open_channel
from etude.common.grpc_server import ServiceRuntime
from etude.common.settings import ClientSettings, GrpcSettings
from etude.reward.config import RewardConfig
from etude.reward.grader import Grader
from etude.reward.server import RewardServicer, registration
from etude.sandbox.config import SandboxConfig
from etude.tasks.materialize import LOCATE_TASKS_FILE, PROJECTS_DIR, TASKS_FILE
from etude.tasks.repo import unified_diff
from etude.tasks.store import TaskStore
from etude.tasks.task import read_jsonl

TASK = next(t for t in read_jsonl(TASKS_FILE) if t.metadata["project"] == "semverkit")
# An etude-locate task of the same project: its hidden test has a path an agent can foresee.
LOCATE_TASK = next(t for t in read_jsonl(LOCATE_TASKS_FILE) if t.metadata["project"] == "semverkit")
PACKAGE = "semverkit"
INIT = (PROJECTS_DIR / PACKAGE / PACKAGE / "__init__.py").read_text()
HIDDEN_FILE = "tests/test_version.py"


def added(path: str, content: str) -> str:
    return unified_diff(path, None, content)


def init_with(extra: str) -> str:
    """The package's `__init__.py` with `extra` appended: no new file."""
    return unified_diff(f"{PACKAGE}/__init__.py", INIT, INIT + extra)


def reward_service(tmp_path_factory, bwrap, **config) -> Iterator[str]:
    """A reward service on loopback, in a thread with its own event loop; its address.
    `config`: RewardConfig fields besides the defaults of these suites."""
    cache = tmp_path_factory.mktemp("grader-cache")
    config = RewardConfig(cache_dir=cache, **{"timeout_seconds": 15, **config})
    sandbox = SandboxConfig(processes=64)  # the sessions' settings reach grading
    grader = Grader(config, bwrap, sandbox)
    servicer = RewardServicer(grader, TaskStore(config.tasks_files), None)
    runtime = ServiceRuntime("reward", GrpcSettings(drain_seconds=0), [registration(servicer)])
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(runtime.start(), loop).result(30)
    try:
        yield runtime.address
    finally:
        asyncio.run_coroutine_threadsafe(runtime.shutdown(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


async def score(address: str, patch: str, task_id: str = TASK.id) -> reward_pb2.ScoreResponse:
    async with open_channel(address, ClientSettings()) as channel:
        stub = reward_pb2_grpc.RewardServiceStub(channel)
        request = reward_pb2.ScoreRequest(task_id=common_pb2.TaskId(value=task_id), patch=patch)
        return await stub.Score(request, timeout=120)


async def assert_gold_scores_one(address: str) -> None:
    reply = await score(address, TASK.gold_patch)
    assert reply.reward == 1.0, reply.error
    assert reply.components["tampered"] == 0.0
