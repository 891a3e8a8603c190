"""The search service over real gRPC on loopback: the contract, its error codes, metrics."""

from __future__ import annotations

import grpc
import pytest
from prometheus_client import REGISTRY

from etude.api.v1 import search_pb2, search_pb2_grpc
from etude.common.grpc_client import open_channel
from etude.common.grpc_server import ServiceRuntime
from etude.common.settings import ClientSettings, GrpcSettings
from etude.search.server import SearchServicer, registration


@pytest.fixture
async def stub(engine):
    runtime = ServiceRuntime("search", GrpcSettings(port=0, drain_seconds=0), [
        registration(SearchServicer(engine))
    ])  # fmt: skip
    await runtime.start()
    try:
        async with open_channel(runtime.address, ClientSettings()) as channel:
            yield search_pb2_grpc.SearchServiceStub(channel)
    finally:
        await runtime.shutdown()


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_index_update_query_drop(stub, project):
    queries_before = sample("etude_search_query_seconds_count", mode="hybrid")
    indexed = await stub.IndexWorkspace(
        search_pb2.IndexWorkspaceRequest(workspace_id="base", root_path=str(project))
    )
    assert indexed.chunks > 50
    fork = await stub.IndexWorkspace(
        search_pb2.IndexWorkspaceRequest(workspace_id="s1", parent_workspace_id="base")
    )
    assert (fork.chunks, fork.chunks_embedded) == (indexed.chunks, 0)
    code = "def brew_espresso(grams):\n    return f'a {grams} g shot'\n"
    updated = await stub.UpdateFiles(
        search_pb2.UpdateFilesRequest(
            workspace_id="s1",
            changed=[search_pb2.ChangedFile(path="lrukit/coffee.py", content=code)],
            deleted_paths=["lrukit/stats.py"],
        )
    )
    assert updated.chunks_embedded <= 1 and updated.chunks_removed > 0
    reply = await stub.Query(search_pb2.QueryRequest(workspace_id="s1", query="espresso shot"))
    assert len(reply.hits) == 10  # k = 0 means the default
    top = reply.hits[0]
    assert (top.path, top.start_line, top.end_line) == ("lrukit/coffee.py", 1, 2)
    assert top.snippet.startswith("def brew_espresso")
    only_lrukit = search_pb2.QueryRequest(
        workspace_id="s1", query="hit rate", k=3, mode="lexical", target_directories=["lrukit"]
    )
    lexical = await stub.Query(only_lrukit)
    assert all(h.path.startswith("lrukit/") and h.path != "lrukit/stats.py" for h in lexical.hits)
    await stub.DropWorkspace(search_pb2.DropWorkspaceRequest(workspace_id="s1"))
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.Query(search_pb2.QueryRequest(workspace_id="s1", query="espresso"))
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
    assert sample("etude_search_query_seconds_count", mode="hybrid") == queries_before + 1
    assert sample("etude_search_index_seconds_count", operation="update") >= 1
    assert sample("etude_search_chunks_embedded_total") >= 0


@pytest.mark.parametrize(
    ("request_fields", "code", "message"),
    [
        ({"workspace_id": "missing", "query": "x"}, grpc.StatusCode.NOT_FOUND, "no workspace"),
        ({"workspace_id": "base", "query": ""}, grpc.StatusCode.INVALID_ARGUMENT, "empty"),
        ({"workspace_id": "base", "query": "x" * 5000}, grpc.StatusCode.INVALID_ARGUMENT, "limit"),
        ({"workspace_id": "base", "query": "x", "k": 101}, grpc.StatusCode.INVALID_ARGUMENT, "k "),
        (
            {"workspace_id": "base", "query": "x", "mode": "?"},
            grpc.StatusCode.INVALID_ARGUMENT,
            "mode",
        ),
    ],
)
async def test_bad_queries_get_clear_statuses(stub, project, request_fields, code, message):
    await stub.IndexWorkspace(
        search_pb2.IndexWorkspaceRequest(workspace_id="base", root_path=str(project))
    )
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.Query(search_pb2.QueryRequest(**request_fields))
    assert error.value.code() == code
    assert message in error.value.details()


async def test_index_errors(stub, tmp_path):
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.IndexWorkspace(
            search_pb2.IndexWorkspaceRequest(workspace_id="w", root_path=str(tmp_path / "none"))
        )
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.UpdateFiles(search_pb2.UpdateFilesRequest(workspace_id="nope"))
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.DropWorkspace(search_pb2.DropWorkspaceRequest(workspace_id="nope"))
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
