"""Sessions through the core and over gRPC: fork, diff, expiry, the bound, batches."""

from __future__ import annotations

import asyncio
import urllib.request

import pytest

from etude.common.toolcalls import ToolCall
from etude.environment.local import InProcessEnvironment
from etude.environment.metrics import PrometheusObserver
from etude.environment.observer import EnvironmentObserver
from etude.environment.tools import list_dir as list_dir_module
from etude.environment.tools import tool_catalog
from etude.environment.tools.base import SearchHit
from etude.environment.types import RepositoryError, SessionLimitError, SessionNotFoundError
from tests.environment.conftest import make_manager, serving

pytestmark = pytest.mark.integration


def call(name: str, index: int = 0, **arguments: str) -> ToolCall:
    return ToolCall(name, arguments, f"call_{index}")


def shell(command: str, index: int = 0) -> ToolCall:
    return call("run_terminal_command", index, command=command)


def printed(executed) -> str:
    """A command's output without the exit-code line the tool appends."""
    return executed.result.output.rsplit("[exit code:", 1)[0]


async def test_a_group_opens_sessions_of_a_new_repository_at_once(manager, repo):
    """The rollouts of a GRPO group start together: their sessions prepare the same
    repository's base concurrently, and every one must open on the whole repository."""
    for i in range(40):  # a larger tree makes the copies overlap
        (repo / "pkg" / f"m{i}.py").write_text(f"VALUE = {i}\n" * 200)
    env = InProcessEnvironment(manager)
    opened = await asyncio.gather(*(env.create_session("t", str(repo)) for _ in range(8)))
    for session in opened:
        [listing] = await env.execute(session.session_id, [shell("ls pkg | wc -l")])
        assert printed(listing).strip() == "42"  # __init__, calc and the 40 modules
    assert len(list(manager.store.bases.iterdir())) == 1  # one base, no staging left behind


async def test_fork_starts_from_the_parents_state_and_diverges(manager, repo):
    env = InProcessEnvironment(manager)
    parent = (await env.create_session("t", str(repo))).session_id
    await env.execute(parent, [shell("echo parent > made.txt; rm README.md; cd pkg")])
    child = await env.fork(parent)
    [seen] = await env.execute(child, [shell("cat made.txt; ls; pwd")])
    assert seen.result.output.startswith("parent\n")
    assert "README.md" not in seen.result.output
    await env.execute(child, [shell("echo child > made.txt")])
    [parents_view] = await env.execute(parent, [shell("cat /workspace/made.txt")])
    assert printed(parents_view) == "parent\n"
    grandchild = await env.fork(child)
    [deep] = await env.execute(grandchild, [shell("cat made.txt; ls README.md 2>&1")])
    assert deep.result.output.startswith("child\n") and "No such file" in deep.result.output


async def test_diff_shows_edits_additions_and_deletions(manager, repo):
    env = InProcessEnvironment(manager)
    session = (await env.create_session("t", str(repo))).session_id
    await env.execute(
        session,
        [
            call("edit_file", 0, path="pkg/calc.py", old_string="a + b", new_string="a - b"),
            call("write_file", 1, path="new.txt", content="hello\n"),
            call("delete_file", 2, path="notes.txt"),
        ],
    )
    diff = await env.diff(session)
    assert diff.changed_paths == ["new.txt", "notes.txt", "pkg/calc.py"]
    assert "-    return a + b\n+    return a - b\n" in diff.unified_diff
    assert "--- /dev/null\n+++ b/new.txt\n" in diff.unified_diff
    assert "--- a/notes.txt\n+++ /dev/null\n" in diff.unified_diff
    untouched = await env.fork(session)
    assert (await env.diff(untouched)).changed_paths == diff.changed_paths


async def test_idle_sessions_expire_and_free_their_files(tmp_path, repo):
    manager = make_manager(tmp_path, idle_ttl_seconds=0.3)
    try:
        session = await manager.create("t", repo)
        kept = await manager.create("t", repo, idle_ttl=60)
        await asyncio.sleep(0.5)
        assert await manager.expire_idle() == [session.id]
        assert not session.layout.session_dir.exists()
        with pytest.raises(SessionNotFoundError):
            await manager.execute(session.id, [shell("true")])
        assert printed((await manager.execute(kept.id, [shell("echo ok")]))[0]) == "ok\n"
    finally:
        await manager.close_all()


async def test_the_number_of_live_sessions_is_bounded(tmp_path, repo):
    manager = make_manager(tmp_path, max_sessions=2)
    try:
        first = await manager.create("t", repo)
        await manager.create("t", repo)
        with pytest.raises(SessionLimitError, match="2 sessions are live"):
            await manager.create("t", repo)
        with pytest.raises(SessionLimitError):
            await manager.fork(first.id)
        await manager.close(first.id)
        await manager.create("t", repo)
    finally:
        await manager.close_all()


class SlowSearch:
    """A search backend that takes 200 ms per query: what makes batch overlap measurable
    (the real service answers in milliseconds, too fast to see overlap on)."""

    async def index_workspace(self, workspace_id, root, parent):
        pass

    async def update_files(self, workspace_id, changed, deleted):
        pass

    async def drop_workspace(self, workspace_id):
        pass

    async def query(self, workspace_id, query, k, target_directories):
        await asyncio.sleep(0.2)
        return [SearchHit("pkg/calc.py", 1, 2, 0.9, "def add(a, b):")]


async def test_eight_slow_reads_overlap_in_one_batch(tmp_path, repo):
    manager = make_manager(tmp_path, search=SlowSearch())
    try:
        session = await manager.create("t", repo)
        batch = [call("codebase_search", i, query="add") for i in range(8)]
        loop = asyncio.get_running_loop()
        start = loop.time()
        results = await manager.execute(session.id, batch)
        elapsed = loop.time() - start
        assert [r.call_id for r in results] == [f"call_{i}" for i in range(8)]
        assert all(r.result.exit_code == 0 and "pkg/calc.py" in r.result.output for r in results)
        assert elapsed < 0.2 * 8 / 3  # well under eight times one call
        serial_start = loop.time()
        await manager.execute(session.id, batch, parallel=False)
        assert loop.time() - serial_start >= 0.2 * 8
    finally:
        await manager.close_all()


async def test_writes_in_a_batch_are_seen_by_later_reads(manager, repo):
    session = await manager.create("t", repo)
    results = await manager.execute(
        session.id,
        [
            call("read_file", 0, path="notes.txt"),
            call("write_file", 1, path="notes.txt", content="rewritten\n"),
            call("read_file", 2, path="notes.txt"),
            shell("echo appended >> notes.txt", 3),
            call("read_file", 4, path="notes.txt"),
        ],
    )
    assert "three" in results[0].result.output
    assert "rewritten" in results[2].result.output and "three" not in results[2].result.output
    assert "appended" in results[4].result.output


async def test_a_tool_failure_is_a_result_and_the_session_lives_on(manager, repo):
    session = await manager.create("t", repo)
    results = await manager.execute(
        session.id,
        [
            call("read_file", 0, path="../../etc/passwd"),
            call("read_file", 1, path="/etc/passwd"),
            call("no_such_tool", 2),
            call("read_file", 3, path="notes.txt", start_line="many"),
            call("read_file", 4, path="notes.txt"),
        ],
    )
    assert [r.result.exit_code != 0 for r in results] == [True, True, True, True, False]
    assert results[0].result.error_reason == "outside_workspace"
    assert results[2].result.error_reason == "unknown_tool"
    assert "two" in results[4].result.output


def _buggy_list(*arguments):
    return len(*arguments)  # a bug of the tool's own: TypeError, len() takes one argument


async def test_a_tools_own_type_error_is_a_tool_failure_not_a_bad_argument(
    manager, repo, monkeypatch
):
    """Only the `@tool` guard judges arguments: a TypeError raised inside a tool is a bug in
    the tool, and an argument named like the guard's own parameter is merely unknown."""
    monkeypatch.setattr(list_dir_module, "_list", _buggy_list)
    session = await manager.create("t", repo)
    broken, clash, fine = await manager.execute(
        session.id,
        [
            call("list_dir", 0),
            call("read_file", 1, path="notes.txt", ctx="x"),
            call("read_file", 2, path="notes.txt"),
        ],
    )
    assert broken.result.error_reason == "internal"
    assert "list_dir failed: len() takes exactly one argument" in broken.result.output
    assert clash.result.error_reason == "bad_argument"
    assert "unknown parameter(s): ctx" in clash.result.output
    assert fine.result.exit_code == 0


class ToolTimes(EnvironmentObserver):
    def __init__(self) -> None:
        self.seconds: list[float] = []

    def tool_called(self, tool: str, seconds: float, error_reason: str | None) -> None:
        self.seconds.append(seconds)


async def test_the_environment_and_its_caller_see_one_duration_per_call(tmp_path, repo):
    times = ToolTimes()
    manager = make_manager(tmp_path, observer=times)
    try:
        session = await manager.create("t", repo)
        results = await manager.execute(
            session.id, [shell("sleep 0.2", 0), call("read_file", 1, path="notes.txt")]
        )
        assert times.seconds == [r.seconds for r in results]  # the same figure, not re-timed
        assert results[0].seconds >= 0.2
    finally:
        await manager.close_all()


@pytest.fixture
async def grpc_environment(tmp_path):
    manager = make_manager(tmp_path, max_sessions=3, observer=PrometheusObserver())
    try:
        async with serving(manager) as served:
            yield served
    finally:
        await manager.close_all()


async def test_the_whole_api_over_grpc(grpc_environment, repo):
    client, runtime = grpc_environment
    assert await client.list_tools() == tool_catalog()
    opened = await client.create_session("t", str(repo))
    assert opened.workspace_mode == "overlay" and opened.sandbox_backend == "bwrap"
    results = await client.execute(
        opened.session_id,
        [
            call("read_file", 0, path="pkg/calc.py"),
            shell("echo out; echo err >&2; exit 3", 1),
            call("submit", 2, message="done"),
            call("read_file", 3, path="missing.txt"),
            call("run_terminal_command", 4, command="sleep 30", timeout_s="1"),
        ],
    )
    outputs = [r.result for r in results]
    assert outputs[3].error_reason == "not_found"
    assert outputs[4].error_reason == "timeout" and outputs[4].exit_code == 124
    assert "return a + b" in outputs[0].output
    assert outputs[1].exit_code == 3 and "out" in outputs[1].output and "err" in outputs[1].output
    assert outputs[2].ends_episode and not outputs[0].ends_episode
    assert all(r.seconds > 0 for r in results)
    child = await client.fork(opened.session_id)
    await client.execute(child, [call("write_file", 0, path="x.txt", content="x\n")])
    assert (await client.diff(child)).changed_paths == ["x.txt"]
    await client.close_session(child)
    with pytest.raises(SessionNotFoundError):
        await client.execute(child, [shell("true")])
    with pytest.raises(RepositoryError):
        await client.create_session("t", str(repo / "missing"))
    await client.create_session("t", str(repo))
    await client.create_session("t", str(repo))
    with pytest.raises(SessionLimitError):
        await client.create_session("t", str(repo))

    with urllib.request.urlopen(runtime.metrics_url, timeout=5) as response:
        metrics = response.read().decode()
    assert "etude_environment_live_sessions 3.0" in metrics
    assert 'etude_environment_tool_call_seconds_count{tool="read_file"} 2.0' in metrics
    assert 'etude_environment_tool_errors_total{reason="not_found",tool="read_file"} 1.0' in metrics
    assert 'etude_environment_sandbox_kills_total{reason="timeout"} 1.0' in metrics
    assert 'etude_environment_sessions_closed_total{reason="closed"} 1.0' in metrics


async def test_a_symlink_made_inside_the_sandbox_cannot_lead_tools_out(manager, repo):
    session = await manager.create("t", repo)
    await manager.execute(session.id, [shell("ln -s / rootlink; ln -s /etc etclink")])
    results = await manager.execute(
        session.id,
        [
            call("read_file", 0, path="rootlink/etc/passwd"),
            call("read_file", 1, path="etclink/passwd"),
            call("edit_file", 2, path="etclink/passwd", old_string="root", new_string="x"),
            call("write_file", 3, path="rootlink/tmp/planted", content="x"),
            call("list_dir", 4, path="rootlink"),
            call("grep", 5, pattern="root", path="etclink"),
        ],
    )
    assert [r.result.error_reason for r in results] == ["outside_workspace"] * 6
    assert "root:" not in "".join(r.result.output for r in results)
    [listing] = await manager.execute(session.id, [call("list_dir", 0)])
    assert listing.result.exit_code == 0 and "pkg/" in listing.result.output


@pytest.mark.parametrize(
    ("backend", "mode"), [("bwrap", "copy"), ("process", "copy")], ids=["bwrap-copy", "process"]
)
async def test_other_backends_and_modes_keep_the_same_behaviour(tmp_path, repo, backend, mode):
    manager = make_manager(tmp_path, backend=backend, workspace_mode=mode)
    try:
        env = InProcessEnvironment(manager)
        opened = await env.create_session("t", str(repo))
        assert (opened.workspace_mode, opened.sandbox_backend) == (mode, backend)
        session = opened.session_id
        results = await env.execute(
            session,
            [
                shell("cd pkg && export N=7 && echo new > made.txt"),
                shell("pwd; echo $N"),
                call("read_file", 2, path="pkg/made.txt"),
            ],
        )
        assert printed(results[1]).splitlines()[1] == "7"
        assert printed(results[1]).splitlines()[0].endswith("/pkg")
        assert "new" in results[2].result.output
        child = await env.fork(session)
        assert (await env.diff(child)).changed_paths == ["pkg/made.txt"]
        assert (repo / "pkg" / "made.txt").exists() is False
    finally:
        await manager.close_all()
