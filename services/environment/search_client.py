"""`codebase_search`'s way to the search service, over gRPC."""

from __future__ import annotations

from etude.api.v1 import search_pb2, search_pb2_grpc
from etude.common.grpc_client import insecure_channel
from etude.common.settings import ClientSettings
from etude.environment.tools.base import SearchHit


class GrpcSearchBackend:
    def __init__(self, target: str, settings: ClientSettings) -> None:
        self.channel = insecure_channel(target, settings)
        self.stub = search_pb2_grpc.SearchServiceStub(self.channel)

    async def query(
        self, workspace_id: str, query: str, k: int, target_directories: list[str]
    ) -> list[SearchHit]:
        reply = await self.stub.Query(
            search_pb2.QueryRequest(
                workspace_id=workspace_id, query=query, k=k, target_directories=target_directories
            )
        )
        return [SearchHit(h.path, h.start_line, h.end_line, h.score, h.snippet) for h in reply.hits]

    async def close(self) -> None:
        await self.channel.close()
