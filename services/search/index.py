"""A workspace's index: a shared, immutable base segment plus the workspace's own delta.

A segment is a frozen set of chunks with their vectors, a vector index and a BM25 index.
Indexing a repository builds its base segment once; every workspace forked from it shares
that segment and records only what it changed: the files it rewrote (re-chunked, their
vectors reused wherever a chunk's content hash is unchanged) and the base paths those files
and its deletions hide. The delta is small (the files one rollout edits), so it is rebuilt
exactly whenever it changed, at the next query.
"""

from __future__ import annotations

import posixpath
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from etude.search.chunking import Chunk
from etude.search.lexical import LexicalIndex
from etude.search.vectors import VectorIndex


@dataclass(frozen=True, slots=True)
class IndexedChunk:
    chunk: Chunk
    vector: np.ndarray


class Segment:
    def __init__(self, chunks: Sequence[Chunk], vectors: np.ndarray, exact_max_rows: int) -> None:
        self.chunks = list(chunks)
        self.vectors = VectorIndex(vectors.reshape(len(self.chunks), -1), exact_max_rows)
        self.lexical = LexicalIndex([c.text for c in self.chunks])
        self.paths = list(dict.fromkeys(c.path for c in self.chunks))
        number = {p: i for i, p in enumerate(self.paths)}
        self.path_of_row = np.fromiter((number[c.path] for c in self.chunks), dtype=np.int32)
        self.rows_by_path: dict[str, list[int]] = {}
        for row, chunk in enumerate(self.chunks):
            self.rows_by_path.setdefault(chunk.path, []).append(row)

    def __len__(self) -> int:
        return len(self.chunks)

    def indexed(self, path: str) -> list[IndexedChunk]:
        rows = self.rows_by_path.get(path, [])
        return [IndexedChunk(self.chunks[r], self.vectors.vectors[r]) for r in rows]

    def mask(self, hidden: set[str], directories: Sequence[str]) -> np.ndarray | None:
        """Which rows a query may return; None when all of them."""
        if not directories and not hidden.intersection(self.rows_by_path):
            return None
        visible = np.fromiter(
            (p not in hidden and in_directories(p, directories) for p in self.paths),
            dtype=bool,
            count=len(self.paths),
        )
        return visible[self.path_of_row]

    def close(self) -> None:
        self.lexical.close()


def in_directories(path: str, directories: Sequence[str]) -> bool:
    return not directories or any(d == "" or path.startswith(d + "/") for d in directories)


def normalize_directory(directory: str) -> str:
    """`src/`, `./src` and `src` all mean `src`; "" and `.` mean the whole workspace."""
    cleaned = posixpath.normpath(directory.strip() or ".")
    if cleaned.startswith(("/", "../")) or cleaned == "..":
        raise ValueError(f"target directory {directory!r} is outside the workspace")
    return "" if cleaned == "." else cleaned


@dataclass
class Workspace:
    base: Segment | None
    exact_max_rows: int
    files: dict[str, list[IndexedChunk]] = field(default_factory=dict)
    """The delta: this workspace's own version of every file it changed."""
    hidden: set[str] = field(default_factory=set)
    """Base paths this workspace changed or deleted: the base's chunks of them are stale."""
    lock: threading.RLock = field(default_factory=threading.RLock)
    _delta: Segment | None = None
    _delta_dirty: bool = True

    def fork(self) -> Workspace:
        with self.lock:
            return Workspace(self.base, self.exact_max_rows, dict(self.files), set(self.hidden))

    def current(self, path: str) -> list[IndexedChunk]:
        """The path's chunks as this workspace sees them now."""
        if path in self.files:
            return self.files[path]
        if self.base is None or path in self.hidden:
            return []
        return self.base.indexed(path)

    def replace(self, path: str, chunks: list[IndexedChunk]) -> None:
        self.files[path] = chunks
        self._hide(path)

    def delete(self, path: str) -> None:
        self.files.pop(path, None)
        self._hide(path)

    def _hide(self, path: str) -> None:
        if self.base is not None and path in self.base.rows_by_path:
            self.hidden.add(path)
        self._delta_dirty = True

    def delta(self) -> Segment | None:
        """The delta as a segment, rebuilt when files changed since the last query."""
        if self._delta_dirty:
            if self._delta is not None:
                self._delta.close()
            entries = [e for chunks in self.files.values() for e in chunks]
            self._delta = None
            if entries:
                vectors = np.stack([e.vector for e in entries])
                self._delta = Segment([e.chunk for e in entries], vectors, self.exact_max_rows)
            self._delta_dirty = False
        return self._delta

    def segments(self) -> list[tuple[Segment, set[str]]]:
        """Each segment with the paths hidden in it, base first."""
        found = [(self.base, self.hidden)] if self.base is not None else []
        delta = self.delta()
        if delta is not None:
            found.append((delta, set()))
        return found

    def chunk_count(self) -> int:
        base = 0
        if self.base is not None:
            hidden_rows = sum(len(self.base.rows_by_path.get(p, ())) for p in self.hidden)
            base = len(self.base) - hidden_rows
        return base + sum(len(chunks) for chunks in self.files.values())
