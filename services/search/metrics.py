"""Prometheus instruments of the search service."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from etude.common.metrics import LATENCY_BUCKETS_SECONDS
from etude.search.embedding_cache import CachedEmbedder

QUERY_SECONDS = Histogram(
    "etude_search_query_seconds",
    "Time to answer one Query: embedding the query, vector and BM25 ranking, fusion.",
    ["mode"],
    buckets=LATENCY_BUCKETS_SECONDS,
)
INDEX_SECONDS = Histogram(
    "etude_search_index_seconds",
    "Time to index a workspace (operation=index, fork) or re-index changed files (update).",
    ["operation"],
    buckets=LATENCY_BUCKETS_SECONDS,
)
CHUNKS_EMBEDDED = Counter(
    "etude_search_chunks_embedded_total", "Chunks sent through the embedder (cache misses)."
)
WORKSPACES = Gauge("etude_search_workspaces", "Workspaces indexed now.")
CACHE_HIT_RATIO = Gauge(
    "etude_search_embedding_cache_hit_ratio",
    "Share of chunk embeddings found in the cache since the service started.",
)
CACHE_LOOKUPS = Counter(
    "etude_search_embedding_cache_lookups_total",
    "Chunk embeddings looked up in the cache, by result (hit, miss).",
    ["result"],
)


def watch_embedder(embedder: CachedEmbedder) -> None:
    """Export the embedder's running cache counts."""
    CACHE_HIT_RATIO.set_function(embedder.hit_ratio)
    seen = {"hit": 0, "miss": 0}

    def sync() -> None:
        for result, total in (("hit", embedder.hits), ("miss", embedder.misses)):
            CACHE_LOOKUPS.labels(result).inc(total - seen[result])
            seen[result] = total

    embedder.on_lookup = sync
