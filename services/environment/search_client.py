"""The search service as the environment uses it, over gRPC: indexing sessions' workspaces,
sending their edits, and `codebase_search`'s queries."""

from __future__ import annotations

from pathlib import Path

from etude.api.v1 import search_pb2, search_pb2_grpc
from etude.common.grpc_client import open_channel
from etude.common.settings import ClientSettings
from etude.environment.tools.base import SearchHit


class GrpcSearchBackend:
    def __init__(self, target: str, settings: ClientSettings) -> None:
        # Indexing embeds a whole repository: its length follows the repository's size.
        self.channel = open_channel(
            target, settings, long_methods=("etude.api.v1.SearchService/IndexWorkspace",)
        )
        self.stub = search_pb2_grpc.SearchServiceStub(self.channel)

    async def index_workspace(self, workspace_id: str, root: Path | None, parent: str) -> None:
        await self.stub.IndexWorkspace(
            search_pb2.IndexWorkspaceRequest(
                workspace_id=workspace_id,
                root_path=str(root) if root else "",
                parent_workspace_id=parent,
            )
        )

    async def update_files(
        self, workspace_id: str, changed: list[tuple[str, str]], deleted: list[str]
    ) -> None:
        await self.stub.UpdateFiles(
            search_pb2.UpdateFilesRequest(
                workspace_id=workspace_id,
                changed=[search_pb2.ChangedFile(path=p, content=c) for p, c in changed],
                deleted_paths=deleted,
            )
        )

    async def drop_workspace(self, workspace_id: str) -> None:
        await self.stub.DropWorkspace(search_pb2.DropWorkspaceRequest(workspace_id=workspace_id))

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
