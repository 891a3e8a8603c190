"""The search engine: workspaces, incremental updates and hybrid queries. No gRPC here;
`server.py` exposes it and runs its blocking calls in worker threads.

A query ranks the workspace's chunks twice, by cosine similarity to the query's embedding
and by BM25, and fuses the two rankings by reciprocal rank: a chunk at rank r in a list
scores weight / (rrf_k + r). Each ranking looks at the top `candidates` of its list, which is
also what makes one ranking able to rescue a hit the other missed.
"""

from __future__ import annotations

import posixpath
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from etude.search.chunking import Chunk, chunk_file
from etude.search.config import SearchConfig
from etude.search.embedding_cache import CachedEmbedder
from etude.search.files import decode_text, read_workspace
from etude.search.index import IndexedChunk, Segment, Workspace, normalize_directory
from etude.search.types import is_indexed_path

Mode = Literal["hybrid", "vector", "lexical"]
MODES: tuple[Mode, ...] = ("hybrid", "vector", "lexical")
SNIPPET_MAX_LINES = 30
SNIPPET_MAX_CHARS = 2_000
MAX_PATH_BYTES = 4096


class WorkspaceNotFoundError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


class SearchArgumentError(ValueError):
    """A request the engine refuses: the message says what to change."""


@dataclass(frozen=True, slots=True)
class Hit:
    path: str
    start_line: int
    end_line: int
    score: float
    snippet: str
    symbol: str


@dataclass(frozen=True, slots=True)
class IndexResult:
    chunks: int
    chunks_embedded: int
    seconds: float


@dataclass(frozen=True, slots=True)
class UpdateResult:
    chunks_embedded: int
    chunks_removed: int
    seconds: float


class SearchEngine:
    def __init__(self, config: SearchConfig, embedder: CachedEmbedder) -> None:
        self.config = config
        self.embedder = embedder
        self.workspaces: dict[str, Workspace] = {}
        self._lock = threading.Lock()

    # -- workspaces ----------------------------------------------------------------------

    def index_workspace(
        self, workspace_id: str, root: Path | None = None, parent_id: str = ""
    ) -> IndexResult:
        """Index a workspace from its files (or fork `parent_id`'s index); replaces any
        earlier index of the same id."""
        started = time.perf_counter()
        if not workspace_id:
            raise SearchArgumentError("workspace_id is empty")
        if parent_id:
            workspace = self.get(parent_id).fork()
            with self._lock:
                self.workspaces[workspace_id] = workspace
            return IndexResult(workspace.chunk_count(), 0, time.perf_counter() - started)
        if root is None or not root.is_dir():
            raise SearchArgumentError(f"root_path {str(root)!r} is not a directory")
        result = self.index_files(workspace_id, read_workspace(root, self.config.max_file_bytes))
        return IndexResult(result.chunks, result.chunks_embedded, time.perf_counter() - started)

    def index_files(self, workspace_id: str, files: Iterable[tuple[str, str]]) -> IndexResult:
        """Index a workspace from (path, text) pairs."""
        started = time.perf_counter()
        base, embedded = self.build_segment(
            chunk for path, text in files for chunk in self.chunk(path, text)
        )
        workspace = Workspace(base, self.config.exact_max_chunks)
        with self._lock:
            self.workspaces[workspace_id] = workspace
        return IndexResult(workspace.chunk_count(), embedded, time.perf_counter() - started)

    def build_segment(self, chunks_iter: Iterable[Chunk]) -> tuple[Segment, int]:
        chunks: list[Chunk] = list(chunks_iter)
        vectors, embedded = self.embedder.embed_chunks(
            [c.text for c in chunks], [c.content_hash for c in chunks]
        )
        return Segment(chunks, vectors, self.config.exact_max_chunks), embedded

    def drop(self, workspace_id: str) -> None:
        with self._lock:
            workspace = self.workspaces.pop(workspace_id, None)
        if workspace is None:
            raise WorkspaceNotFoundError(f"no workspace {workspace_id!r}")

    def get(self, workspace_id: str) -> Workspace:
        try:
            return self.workspaces[workspace_id]
        except KeyError:
            raise WorkspaceNotFoundError(
                f"no workspace {workspace_id!r} (never indexed, or dropped)"
            ) from None

    def chunk(self, path: str, text: str) -> list[Chunk]:
        return chunk_file(path, text, self.config.chunk_tokens, self.config.chunk_overlap_tokens)

    # -- updates -------------------------------------------------------------------------

    def update_files(
        self, workspace_id: str, changed: Sequence[tuple[str, str]], deleted: Sequence[str]
    ) -> UpdateResult:
        """Re-chunk changed files, embedding only chunks whose content hash is new to the
        file; drop deleted ones. A file that is not indexable (too large, not text, hidden)
        is treated as deleted."""
        started = time.perf_counter()
        workspace = self.get(workspace_id)
        for path in [p for p, _ in changed] + list(deleted):
            _check_path(path)
        with workspace.lock:
            embedded = removed = 0
            for path in deleted:
                removed += len(workspace.current(path))
                workspace.delete(path)
            for path, content in changed:
                data = content.encode("utf-8", "surrogatepass")
                text = decode_text(data, self.config.max_file_bytes)
                old = workspace.current(path)
                if text is None or not is_indexed_path(path):
                    removed += len(old)
                    workspace.delete(path)
                    continue
                new_chunks, computed = self._rechunk(path, text, old)
                embedded += computed
                kept = {e.chunk.content_hash for e in new_chunks}
                removed += sum(1 for e in old if e.chunk.content_hash not in kept)
                workspace.replace(path, new_chunks)
        return UpdateResult(embedded, removed, time.perf_counter() - started)

    def _rechunk(
        self, path: str, text: str, old: list[IndexedChunk]
    ) -> tuple[list[IndexedChunk], int]:
        chunks = self.chunk(path, text)
        known = {e.chunk.content_hash: e.vector for e in old}
        todo = [c for c in chunks if c.content_hash not in known]
        computed = 0
        if todo:
            vectors, computed = self.embedder.embed_chunks(
                [c.text for c in todo], [c.content_hash for c in todo]
            )
            known.update({c.content_hash: v for c, v in zip(todo, vectors, strict=True)})
        return [IndexedChunk(c, known[c.content_hash]) for c in chunks], computed

    # -- queries -------------------------------------------------------------------------

    def query(
        self,
        workspace_id: str,
        query: str,
        k: int = 10,
        target_directories: Sequence[str] = (),
        mode: str = "hybrid",
    ) -> list[Hit]:
        workspace = self.get(workspace_id)
        self._check_query(query, k, mode)
        try:
            directories = [normalize_directory(d) for d in target_directories]
        except ValueError as error:
            raise SearchArgumentError(str(error)) from None
        candidates = max(k, self.config.fusion_candidates)
        with workspace.lock:
            segments = workspace.segments()
        vector_ranking: list[tuple[float, Chunk]] = []
        lexical_ranking: list[tuple[float, Chunk]] = []
        query_vector = self.embedder.embed_query(query) if mode != "lexical" else None
        for segment, hidden in segments:
            allowed = segment.mask(hidden, directories)
            if query_vector is not None:
                found = segment.vectors.search(query_vector, candidates, allowed)
                vector_ranking += [(score, segment.chunks[row]) for row, score in found]
            if mode != "vector":
                found = segment.lexical.search(query, candidates, allowed)
                lexical_ranking += [(score, segment.chunks[row]) for row, score in found]
        vector_ranking.sort(key=lambda pair: -pair[0])
        lexical_ranking.sort(key=lambda pair: -pair[0])
        if mode == "vector":
            ranked = vector_ranking[:k]
        elif mode == "lexical":
            ranked = lexical_ranking[:k]
        else:
            ranked = self._fuse(vector_ranking[:candidates], lexical_ranking[:candidates])[:k]
        return [_hit(chunk, score) for score, chunk in ranked]

    def _fuse(
        self, vector: list[tuple[float, Chunk]], lexical: list[tuple[float, Chunk]]
    ) -> list[tuple[float, Chunk]]:
        fused: dict[Chunk, float] = {}
        weights = ((vector, 1.0), (lexical, self.config.lexical_weight))
        for ranking, weight in weights:
            for rank, (_, chunk) in enumerate(ranking, start=1):
                fused[chunk] = fused.get(chunk, 0.0) + weight / (self.config.rrf_k + rank)
        return sorted(((s, c) for c, s in fused.items()), key=lambda pair: -pair[0])

    def _check_query(self, query: str, k: int, mode: str) -> None:
        if not query.strip():
            raise SearchArgumentError("query is empty")
        if len(query) > self.config.max_query_chars:
            raise SearchArgumentError(
                f"query is {len(query)} characters; the limit is {self.config.max_query_chars} "
                "(ETUDE_SEARCH__MAX_QUERY_CHARS)"
            )
        if not 1 <= k <= self.config.max_k:
            raise SearchArgumentError(f"k must be between 1 and {self.config.max_k}, not {k}")
        if mode not in MODES:
            raise SearchArgumentError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")


def _check_path(path: str) -> None:
    if "\0" in path or len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise SearchArgumentError("a path must hold no NUL and be at most 4096 bytes long")
    if not path or path.startswith("/") or posixpath.normpath(path) != path or path == "..":
        raise SearchArgumentError(
            f"path {path!r} must be relative to the workspace and normalised (no `..`)"
        )
    if path.startswith("../"):
        raise SearchArgumentError(f"path {path!r} is outside the workspace")


def _hit(chunk: Chunk, score: float) -> Hit:
    lines = chunk.code.split("\n")
    snippet = "\n".join(lines[:SNIPPET_MAX_LINES])[:SNIPPET_MAX_CHARS]
    return Hit(chunk.path, chunk.start_line, chunk.end_line, score, snippet, chunk.symbol)
