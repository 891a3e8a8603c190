"""gRPC servicer of the search service: the engine's blocking work runs in worker threads,
so one workspace's indexing never stalls another's queries."""

from __future__ import annotations

import asyncio
import time

import grpc

from etude.api.v1 import search_pb2, search_pb2_grpc
from etude.common.confinement import PathNotAllowedError, confined_directory
from etude.common.grpc_server import Registration
from etude.common.request_checks import InvalidFieldError, check_count, check_path, check_text
from etude.search.engine import Hit, SearchArgumentError, SearchEngine, WorkspaceNotFoundError
from etude.search.metrics import CHUNKS_EMBEDDED, INDEX_SECONDS, QUERY_SECONDS, WORKSPACES

SERVICE_NAME = search_pb2.DESCRIPTOR.services_by_name["SearchService"].full_name
DEFAULT_K = 10


MAX_TARGET_DIRECTORIES = 64

# The engine's errors, and the request's, as the statuses a client sees.
_STATUSES = (
    (WorkspaceNotFoundError, grpc.StatusCode.NOT_FOUND),
    (SearchArgumentError, grpc.StatusCode.INVALID_ARGUMENT),
    (InvalidFieldError, grpc.StatusCode.INVALID_ARGUMENT),
    (PathNotAllowedError, grpc.StatusCode.PERMISSION_DENIED),
)


def _workspace(value: str, field: str = "workspace_id", required: bool = True) -> str:
    return check_text(value, field, required=required)


class SearchServicer(search_pb2_grpc.SearchServiceServicer):
    def __init__(self, engine: SearchEngine) -> None:
        self.engine = engine

    async def _call(self, context, function, *args):
        """`function(*args)` in a worker thread; the request's checks run inside it too, so
        their errors get their status code like the engine's."""
        try:
            return await asyncio.to_thread(function, *args)
        except tuple(kind for kind, _ in _STATUSES) as error:
            code = next(c for kind, c in _STATUSES if isinstance(error, kind))
            await context.abort(code, str(error))

    def _index(self, request: search_pb2.IndexWorkspaceRequest):
        """Index a workspace, from a directory only under the configured roots (where the
        environment keeps its bases): the hits' snippets are the files' text."""
        root = None
        if request.root_path:
            check_path(request.root_path, "root_path")
            root = confined_directory(
                request.root_path, self.engine.config.index_roots, field="root_path"
            )
        return self.engine.index_workspace(
            _workspace(request.workspace_id), root,
            _workspace(request.parent_workspace_id, "parent_workspace_id", required=False),
        )  # fmt: skip

    async def IndexWorkspace(self, request, context):
        result = await self._call(context, self._index, request)
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
            context, lambda: self.engine.update_files(
                _workspace(request.workspace_id), changed, list(request.deleted_paths)
            ),
        )  # fmt: skip
        INDEX_SECONDS.labels("update").observe(result.seconds)
        CHUNKS_EMBEDDED.inc(result.chunks_embedded)
        return search_pb2.UpdateFilesResponse(
            chunks_embedded=result.chunks_embedded, chunks_removed=result.chunks_removed
        )

    async def Query(self, request, context):
        mode = request.mode or "hybrid"
        started = time.perf_counter()
        hits = await self._call(context, self._query, request, mode)
        QUERY_SECONDS.labels(mode).observe(time.perf_counter() - started)  # answered ones only
        return search_pb2.QueryResponse(hits=[_hit_to_proto(h) for h in hits])

    def _query(self, request: search_pb2.QueryRequest, mode: str) -> list[Hit]:
        directories = list(request.target_directories)
        check_count(directories, "target_directories", MAX_TARGET_DIRECTORIES)
        for directory in directories:
            check_path(directory, "target_directories")
        return self.engine.query(
            _workspace(request.workspace_id), request.query, request.k or DEFAULT_K,
            directories, mode,
        )  # fmt: skip

    async def DropWorkspace(self, request, context):
        await self._call(context, lambda: self.engine.drop(_workspace(request.workspace_id)))
        WORKSPACES.set(len(self.engine.workspaces))
        return search_pb2.DropWorkspaceResponse()


def _hit_to_proto(hit: Hit) -> search_pb2.SearchHit:
    return search_pb2.SearchHit(
        path=hit.path, start_line=hit.start_line, end_line=hit.end_line, score=hit.score,
        snippet=hit.snippet,
    )  # fmt: skip


def registration(servicer: SearchServicer) -> Registration:
    return Registration(servicer, search_pb2_grpc.add_SearchServiceServicer_to_server, SERVICE_NAME)
