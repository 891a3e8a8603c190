"""Vector search over one segment's chunks: exact inner product, or HNSW when it is large.

Rows are unit vectors, so the inner product is the cosine similarity. Up to
`exact_max_chunks` a matrix-vector product is both exact and fast enough (100k × 384 floats
is ~15 MB and a few milliseconds); above it an HNSW graph (usearch) answers in well under a
millisecond with a small loss of recall. Filters (deleted files, target directories) arrive
as a boolean mask over rows: the exact path applies it directly, the HNSW path over-fetches
and falls back to exact search when the mask removes too much.
"""

from __future__ import annotations

import numpy as np

HNSW_CONNECTIVITY = 16
HNSW_EXPANSION_ADD = 64
HNSW_EXPANSION_SEARCH = 128
_OVERFETCH_ROUNDS = 3


class VectorIndex:
    def __init__(self, vectors: np.ndarray, exact_max_rows: int) -> None:
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.graph = None
        if len(self.vectors) > exact_max_rows:
            self.graph = _build_graph(self.vectors)

    def __len__(self) -> int:
        return len(self.vectors)

    @property
    def kind(self) -> str:
        return "hnsw" if self.graph is not None else "exact"

    def search(
        self, query: np.ndarray, k: int, allowed: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """The best `k` rows as (row, cosine), best first; rows with allowed[row] False never
        appear."""
        if k <= 0 or len(self.vectors) == 0:
            return []
        if self.graph is not None:
            found = self._search_graph(query, k, allowed)
            if found is not None:
                return found
        return self._search_exact(query, k, allowed)

    def _search_exact(
        self, query: np.ndarray, k: int, allowed: np.ndarray | None
    ) -> list[tuple[int, float]]:
        scores = self.vectors @ query.astype(np.float32)
        if allowed is not None:
            scores = np.where(allowed, scores, -np.inf)
        k = min(k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(int(row), float(scores[row])) for row in top if scores[row] > -np.inf]

    def _search_graph(
        self, query: np.ndarray, k: int, allowed: np.ndarray | None
    ) -> list[tuple[int, float]] | None:
        """None when the mask hid too many of the graph's candidates (exact search then)."""
        fetch = k if allowed is None else 2 * k
        for _ in range(_OVERFETCH_ROUNDS):
            matches = self.graph.search(query.astype(np.float32), min(fetch, len(self.vectors)))
            rows = np.asarray(matches.keys, dtype=np.int64)
            # usearch's inner-product "distance" is 1 − dot.
            scores = 1.0 - np.asarray(matches.distances, dtype=np.float32)
            pairs = zip(rows, scores, strict=True)
            keep = [(int(r), float(s)) for r, s in pairs if allowed is None or allowed[r]]
            if len(keep) >= k or fetch >= len(self.vectors):
                return keep[:k]
            fetch *= 4
        return None


def _build_graph(vectors: np.ndarray):
    from usearch.index import Index

    graph = Index(
        ndim=vectors.shape[1], metric="ip", dtype="f32", connectivity=HNSW_CONNECTIVITY,
        expansion_add=HNSW_EXPANSION_ADD, expansion_search=HNSW_EXPANSION_SEARCH,
    )  # fmt: skip
    graph.add(np.arange(len(vectors), dtype=np.int64), vectors)
    return graph
