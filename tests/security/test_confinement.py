"""Attacks on which directories a caller may open: CreateSession (its repository and its
Python environment) and IndexWorkspace on host directories, on the environment's own files,
through symlinks and `..`.

Each attack goes through the real gRPC service on loopback, must be refused
(PERMISSION_DENIED, nothing created or indexed), and a repository under the allowed root
must still work after it.
"""

from __future__ import annotations

import sys

import grpc
import pytest

from etude.api.v1 import (
    common_pb2,
    environment_pb2,
    environment_pb2_grpc,
    search_pb2,
    search_pb2_grpc,
)
from etude.common.grpc_client import open_channel
from etude.common.grpc_server import ServiceRuntime
from etude.common.settings import ClientSettings, GrpcSettings
from etude.environment.server import registration as environment_registration
from etude.search.server import SearchServicer
from etude.search.server import registration as search_registration
from etude.tasks.pyenv import PackageSource, build_environment
from etude.tasks.task import Task
from tests.environment.conftest import make_manager
from tests.search.conftest import engine, minilm, project, shared_cache  # noqa: F401

pytestmark = pytest.mark.integration

DENIED = grpc.StatusCode.PERMISSION_DENIED


async def start(registration) -> ServiceRuntime:
    runtime = ServiceRuntime("svc", GrpcSettings(port=0, drain_seconds=0), [registration])
    await runtime.start()
    return runtime


def host_paths(tmp_path, allowed):
    """Directories outside the allowed root (`allowed`, inside tmp_path), by name."""
    (allowed / "to-etc").symlink_to("/etc")
    (allowed / "to-root").symlink_to("/")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("host secret\n")
    return {
        "etc": "/etc",
        "root": "/",
        "proc-self": "/proc/self",
        "proc-self-root": "/proc/self/root/etc",
        "symlink-to-etc": str(allowed / "to-etc"),
        "symlink-to-root": str(allowed / "to-root" / "etc"),
        "dotdot-escape": str(allowed / "repo" / ".." / ".." / "outside"),
        "sibling": str(outside),
        "the-root-itself": str(allowed),
        "relative": "repo",
    }


# -- environment -------------------------------------------------------------------------


@pytest.fixture
async def environment(tmp_path, repo):
    # Repositories may come from tmp_path/tasks only; the environment keeps its own files
    # in tmp_path/tasks/environment-root, inside that root, and those stay refused.
    allowed = tmp_path / "tasks"
    allowed.mkdir()
    repo.rename(allowed / "repo")
    manager = make_manager(
        tmp_path, repository_roots=(allowed,), root_dir=allowed / "environment-root"
    )
    runtime = await start(environment_registration(manager))
    channel = open_channel(runtime.address, ClientSettings(timeout_seconds=60))
    try:
        yield environment_pb2_grpc.EnvironmentServiceStub(channel), manager, allowed
    finally:
        await channel.close()
        await runtime.shutdown()
        await manager.close_all()


async def create(stub, path: str):
    return await stub.CreateSession(environment_pb2.CreateSessionRequest(repository_path=path))


async def read(stub, session, path: str) -> str:
    call = common_pb2.ToolCall(id="c", name="read_file", arguments={"path": path})
    reply = await stub.Execute(environment_pb2.ExecuteRequest(session_id=session, calls=[call]))
    return reply.results[0].output


async def assert_refused(stub, manager, path: str) -> None:
    before = set(manager.sessions)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await create(stub, path)
    assert refused.value.code() == DENIED, refused.value.details()
    assert set(manager.sessions) == before  # no session was created


async def test_create_session_on_host_directories_is_refused(environment, tmp_path):
    stub, manager, allowed = environment
    for name, path in host_paths(tmp_path, allowed).items():
        try:
            await assert_refused(stub, manager, path)
        except AssertionError as error:
            raise AssertionError(f"{name}: {error}") from None
    session = (await create(stub, str(allowed / "repo"))).session_id
    assert "two" in await read(stub, session, "notes.txt")


async def test_create_session_on_the_environments_own_files_is_refused(environment):
    stub, manager, allowed = environment
    victim = (await create(stub, str(allowed / "repo"))).session_id
    write = common_pb2.ToolCall(
        id="w", name="write_file", arguments={"path": "private.txt", "content": "victim data\n"}
    )
    await stub.Execute(environment_pb2.ExecuteRequest(session_id=victim, calls=[write]))
    layout = manager.sessions[victim.value].layout
    root_dir = manager.config.root_dir
    targets = [
        root_dir,
        root_dir / "bases",
        layout.base,
        layout.session_dir,
        *(p for p in layout.session_dir.iterdir() if p.is_dir()),  # its upper/workspace
    ]
    (allowed / "to-sessions").symlink_to(layout.session_dir)
    targets.append(allowed / "to-sessions")
    for target in targets:
        await assert_refused(stub, manager, str(target))
    # The victim's session is intact, and a fresh one on the task repository works.
    assert "victim data" in await read(stub, victim, "private.txt")
    fresh = (await create(stub, str(allowed / "repo"))).session_id
    listing = common_pb2.ToolCall(id="l", name="list_dir", arguments={"path": "."})
    reply = await stub.Execute(environment_pb2.ExecuteRequest(session_id=fresh, calls=[listing]))
    assert "notes.txt" in reply.results[0].output
    assert "private.txt" not in reply.results[0].output


async def test_a_python_environment_outside_the_roots_or_not_one_is_refused(environment, tmp_path):
    """A session's Python environment is bound into its sandbox, every file readable: a host
    directory (etude's own environment included), the environment's own files, or a
    directory of the task store that no environment build completed are refused, and the
    service goes on serving sessions, with and without a real environment."""
    stub, manager, allowed = environment
    repository = str(allowed / "repo")

    async def create_with(python_environment: str):
        return await stub.CreateSession(
            environment_pb2.CreateSessionRequest(
                repository_path=repository, python_environment=python_environment
            )
        )

    async def refused_with(python_environment: str) -> grpc.StatusCode:
        before = set(manager.sessions)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await create_with(python_environment)
        assert set(manager.sessions) == before  # no session was created
        return refused.value.code()

    hostile = {
        **host_paths(tmp_path, allowed),
        "etude's-own-venv": sys.prefix,
        "environment-root": str(manager.config.root_dir),
    }
    for name, path in hostile.items():
        assert await refused_with(path) == DENIED, name
    half_built = allowed / "envs" / "half-built"
    (half_built / "bin").mkdir(parents=True)
    (half_built / "pyvenv.cfg").write_text("home = /usr/bin\n")  # a venv, never marked complete
    for not_one in (repository, str(half_built)):
        assert await refused_with(not_one) == grpc.StatusCode.INVALID_ARGUMENT, not_one

    plain = (await create(stub, repository)).session_id
    assert "two" in await read(stub, plain, "notes.txt")
    task = Task(id="t", repo="acme/repo", base_commit="a" * 40, instruction="",
                test_patch="", fail_to_pass=(), pass_to_pass=())  # fmt: skip
    built = build_environment(task, allowed / "repo", allowed / "envs", PackageSource())
    session = (await create_with(str(built.root))).session_id
    call = common_pb2.ToolCall(
        id="c", name="run_terminal_command",
        arguments={"command": "python -c 'import sys; print(sys.prefix)'"},
    )  # fmt: skip
    reply = await stub.Execute(environment_pb2.ExecuteRequest(session_id=session, calls=[call]))
    assert reply.results[0].output.split()[0] == str(built.root)


# -- search ------------------------------------------------------------------------------


@pytest.fixture
async def search(engine, tmp_path):  # noqa: F811
    allowed = tmp_path / "bases"
    allowed.mkdir()
    engine.config = engine.config.model_copy(update={"index_roots": (allowed,)})
    runtime = await start(search_registration(SearchServicer(engine)))
    channel = open_channel(runtime.address, ClientSettings())
    try:
        yield search_pb2_grpc.SearchServiceStub(channel), engine, allowed
    finally:
        await channel.close()
        await runtime.shutdown()


async def test_index_workspace_on_host_directories_is_refused(search, tmp_path, project):  # noqa: F811
    stub, engine, allowed = search  # noqa: F811
    project.rename(allowed / "repo")
    for name, path in host_paths(tmp_path, allowed).items():
        request = search_pb2.IndexWorkspaceRequest(workspace_id=f"evil-{name}", root_path=path)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.IndexWorkspace(request)
        assert refused.value.code() == DENIED, (name, refused.value.details())
        assert f"evil-{name}" not in engine.workspaces
    indexed = await stub.IndexWorkspace(
        search_pb2.IndexWorkspaceRequest(workspace_id="base", root_path=str(allowed / "repo"))
    )
    assert indexed.chunks > 0
    hits = await stub.Query(search_pb2.QueryRequest(workspace_id="base", query="evict", k=3))
    assert hits.hits and not any("secret" in h.snippet for h in hits.hits)
