"""The on-disk embedding cache: vectors keyed by (model fingerprint, chunk content hash).

A repository is embedded once per base commit: every session of a task, every restart of
the service and every workspace holding the same function reuses the vector. SQLite in WAL
mode, so several service processes on one machine can share the file.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from etude.search.embedders import Embedder

_SCHEMA = """
CREATE TABLE IF NOT EXISTS vectors (
  model TEXT NOT NULL, hash TEXT NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (model, hash)
) WITHOUT ROWID
"""
_SQLITE_MAX_VARIABLES = 900  # below SQLite's historical limit of 999 bound parameters


class EmbeddingCache:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.connection = sqlite3.connect(path, check_same_thread=False, timeout=30)
        self.connection.execute("PRAGMA journal_mode=WAL")
        self.connection.execute("PRAGMA synchronous=NORMAL")
        self.connection.execute(_SCHEMA)
        self._lock = threading.Lock()

    def get(self, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        unique = list(dict.fromkeys(hashes))
        with self._lock:
            for start in range(0, len(unique), _SQLITE_MAX_VARIABLES):
                part = unique[start : start + _SQLITE_MAX_VARIABLES]
                marks = ",".join("?" * len(part))
                rows = self.connection.execute(
                    f"SELECT hash, vector FROM vectors WHERE model = ? AND hash IN ({marks})",
                    (model, *part),
                )
                for content_hash, blob in rows:
                    found[content_hash] = np.frombuffer(blob, dtype=np.float32)
        return found

    def put(self, model: str, hashes: Sequence[str], vectors: np.ndarray) -> None:
        blobs = (v.astype(np.float32).tobytes() for v in vectors)
        rows = [(model, h, blob) for h, blob in zip(hashes, blobs, strict=True)]
        with self._lock, self.connection:
            self.connection.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)", rows)

    def close(self) -> None:
        self.connection.close()


class CachedEmbedder:
    """An embedder in front of the cache; counts what it looked up, found and computed."""

    def __init__(self, embedder: Embedder, cache: EmbeddingCache | None) -> None:
        self.embedder = embedder
        self.cache = cache
        self.hits = 0
        self.misses = 0
        self.on_lookup: Callable[[], None] | None = None
        """Called after each lookup (metrics)."""
        self._lock = threading.Lock()

    @property
    def dimension(self) -> int:
        return self.embedder.dimension

    def embed_query(self, text: str) -> np.ndarray:
        return self.embedder.embed([text])[0]

    def embed_chunks(self, texts: Sequence[str], hashes: Sequence[str]) -> tuple[np.ndarray, int]:
        """Vectors for chunks (row i for texts[i]) and how many had to be computed."""
        vectors = np.empty((len(texts), self.dimension), dtype=np.float32)
        model = self.embedder.fingerprint
        cached = self.cache.get(model, hashes) if self.cache else {}
        todo: dict[str, list[int]] = {}
        for row, content_hash in enumerate(hashes):
            if content_hash in cached:
                vectors[row] = cached[content_hash]
            else:
                todo.setdefault(content_hash, []).append(row)
        if todo:
            firsts = [rows[0] for rows in todo.values()]
            computed = self.embedder.embed([texts[row] for row in firsts])
            for rows, vector in zip(todo.values(), computed, strict=True):
                vectors[rows] = vector
            if self.cache:
                self.cache.put(model, list(todo), computed)
        with self._lock:
            self.hits += len(hashes) - sum(len(rows) for rows in todo.values())
            self.misses += sum(len(rows) for rows in todo.values())
            if self.on_lookup:
                self.on_lookup()
        return vectors, len(todo)

    def hit_ratio(self) -> float:
        looked_up = self.hits + self.misses
        return self.hits / looked_up if looked_up else 0.0
