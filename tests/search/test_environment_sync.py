"""The environment's sessions kept in sync with a real search service over gRPC: the base
indexed once, sessions as forks, edits by tools and by shell commands, forks, closing,
and a search service that goes away."""

from __future__ import annotations

import pytest

from etude.common.grpc_server import ServiceRuntime
from etude.common.settings import ClientSettings, GrpcSettings
from etude.common.toolcalls import ToolCall
from etude.environment.search_client import GrpcSearchBackend
from etude.search.server import SearchServicer, registration
from tests.conftest import skip_without_sandboxes
from tests.environment.conftest import make_manager

ESPRESSO = "def brew_espresso(grams):\n    return f'a {grams} g shot of espresso'\n"


@pytest.fixture
async def search_runtime(engine):
    runtime = ServiceRuntime(
        "search", GrpcSettings(port=0, drain_seconds=0), [registration(SearchServicer(engine))]
    )
    await runtime.start()
    yield runtime
    await runtime.shutdown()


@pytest.fixture
async def manager(tmp_path, search_runtime):
    backend = GrpcSearchBackend(search_runtime.address, ClientSettings(max_attempts=1))
    with skip_without_sandboxes():
        manager = make_manager(tmp_path, search=backend)
    yield manager
    await manager.close_all()
    await backend.close()


async def run(manager, session_id: str, name: str, **arguments) -> str:
    [executed] = await manager.execute(session_id, [ToolCall(name, arguments, "call_0")])
    output = executed.result
    assert output.exit_code == 0, output.output
    return output.output


async def search(manager, session_id: str, query: str) -> list[str]:
    """The paths of codebase_search's hits, best first."""
    output = await run(manager, session_id, "codebase_search", query=query, k="20")
    return [block.split(":")[0] for block in output.split("\n\n") if block]


async def test_sessions_search_what_they_edit(manager, engine, project):
    session = await manager.create("t", project)
    assert (await search(manager, session.id, "frequency of a key in the LFU cache"))[0] == (
        "lrukit/caches.py"
    )
    await run(manager, session.id, "write_file", path="lrukit/coffee.py", content=ESPRESSO)
    assert (await search(manager, session.id, "pull an espresso shot"))[0] == "lrukit/coffee.py"
    # Shell commands are caught up with at the next query.
    command = (
        "printf 'def grind_coffee_beans(size):\\n    return size\\n' > lrukit/grinder.py"
        " && rm lrukit/stats.py"
    )
    await run(manager, session.id, "run_terminal_command", command=command)
    assert (await search(manager, session.id, "grind coffee beans"))[0] == "lrukit/grinder.py"
    assert "lrukit/stats.py" not in await search(manager, session.id, "hit rate statistics")
    await run(manager, session.id, "delete_file", path="lrukit/coffee.py")
    assert "lrukit/coffee.py" not in await search(manager, session.id, "pull an espresso shot")


async def test_forks_and_sessions_are_isolated_and_the_base_is_indexed_once(
    manager, engine, project
):
    first = await manager.create("t", project)
    second = await manager.create("t", project)
    await run(manager, first.id, "write_file", path="lrukit/coffee.py", content=ESPRESSO)
    child = await manager.fork(first.id)
    await run(manager, child.id, "delete_file", path="lrukit/coffee.py")
    espresso = "pull an espresso shot"
    assert (await search(manager, first.id, espresso))[0] == "lrukit/coffee.py"
    assert "lrukit/coffee.py" not in await search(manager, child.id, espresso)
    assert "lrukit/coffee.py" not in await search(manager, second.id, espresso)
    bases = [w for w in engine.workspaces if w.startswith("base-")]
    assert len(bases) == 1
    await manager.close(first.id)
    assert first.id not in engine.workspaces and child.id in engine.workspaces
    await manager.close(child.id)
    await manager.close(second.id)
    assert engine.workspaces == {}  # the base goes with its last session


async def test_a_search_service_that_lost_its_indexes_gets_them_again(manager, engine, project):
    first = await manager.create("t", project)
    await search(manager, first.id, "cache")
    engine.workspaces.clear()  # what a restart of the search service leaves
    second = await manager.create("t", project)
    found = await search(manager, second.id, "frequency of a key in the LFU cache")
    assert found[0] == "lrukit/caches.py"


async def test_without_the_search_service_the_agent_is_told_to_use_grep(
    manager, search_runtime, project
):
    session = await manager.create("t", project)
    await search(manager, session.id, "cache")  # indexed and answering
    await search_runtime.shutdown()
    [executed] = await manager.execute(
        session.id, [ToolCall("codebase_search", {"query": "cache"}, "call_0")]
    )
    output = executed.result
    assert output.error_reason == "search_unavailable" and "grep" in output.output
    assert (await run(manager, session.id, "read_file", path="README.md")).strip()
