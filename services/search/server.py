"""gRPC servicer of the search service: the engine's blocking work runs in worker threads,
so one workspace's indexing never stalls another's queries."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc

from etude.api.v1 import search_pb2, search_pb2_grpc
from etude.common.grpc_server import Registration
from etude.search.engine import Hit, SearchArgumentError, SearchEngine, WorkspaceNotFoundError
from etude.search.metrics import CHUNKS_EMBEDDED, INDEX_SECONDS, QUERY_SECONDS, WORKSPACES

SERVICE_NAME = search_pb2.DESCRIPTOR.services_by_name["SearchService"].full_name
DEFAULT_K = 10


# The engine's errors, as the statuses a client sees.
_STATUSES = (
    (WorkspaceNotFoundError, grpc.StatusCode.NOT_FOUND),
    (SearchArgumentError, grpc.StatusCode.INVALID_ARGUMENT),
)


class SearchServicer(search_pb2_grpc.SearchServiceServicer):
    def __init__(self, engine: SearchEngine) -> None:
        self.engine = engine

    async def _call(self, context, function, *args):
        try:
            return await asyncio.to_thread(function, *args)
        except (WorkspaceNotFoundError, SearchArgumentError) as error:
            code = next(c for kind, c in _STATUSES if isinstance(error, kind))
            await context.abort(code, str(error))

    async def IndexWorkspace(self, request, context):
        root = Path(request.root_path) if request.root_path else None
        result = await self._call(
            context, self.engine.index_workspace, request.workspace_id, root,
            request.parent_workspace_id,
        )  # fmt: skip
        operation = "fork" if request.parent_workspace_id else "index"
        INDEX_SECONDS.labels(operation).observe(result.seconds)
        CHUNKS_EMBEDDED.inc(result.chunks_embedded)
        WORKSPACES.set(len(self.engine.workspaces))
        return search_pb2.IndexWorkspaceResponse(
            chunks=result.chunks, chunks_embedded=result.chunks_embedded, seconds=result.seconds
        )

    async def UpdateFiles(self, request, context):
        changed = [(f.path, f.content) for f in request.changed]
        result = await self._call(
            context, self.engine.update_files, request.workspace_id, changed,
            list(request.deleted_paths),
        )  # fmt: skip
        INDEX_SECONDS.labels("update").observe(result.seconds)
        CHUNKS_EMBEDDED.inc(result.chunks_embedded)
        return search_pb2.UpdateFilesResponse(
            chunks_embedded=result.chunks_embedded, chunks_removed=result.chunks_removed
        )

    async def Query(self, request, context):
        mode = request.mode or "hybrid"
        started = time.perf_counter()
        hits = await self._call(
            context, self.engine.query, request.workspace_id, request.query,
            request.k or DEFAULT_K, list(request.target_directories), mode,
        )  # fmt: skip
        QUERY_SECONDS.labels(mode).observe(time.perf_counter() - started)  # answered ones only
        return search_pb2.QueryResponse(hits=[_hit_to_proto(h) for h in hits])

    async def DropWorkspace(self, request, context):
        await self._call(context, self.engine.drop, request.workspace_id)
        WORKSPACES.set(len(self.engine.workspaces))
        return search_pb2.DropWorkspaceResponse()


def _hit_to_proto(hit: Hit) -> search_pb2.SearchHit:
    return search_pb2.SearchHit(
        path=hit.path, start_line=hit.start_line, end_line=hit.end_line, score=hit.score,
        snippet=hit.snippet,
    )  # fmt: skip


def registration(servicer: SearchServicer) -> Registration:
    return Registration(servicer, search_pb2_grpc.add_SearchServiceServicer_to_server, SERVICE_NAME)
