"""`python -m etude.search`: the search service on its own."""

from __future__ import annotations

import contextlib
import logging

from etude.common.grpc_server import Registration, run_service
from etude.common.logging import log_fields
from etude.search.config import SearchSettings
from etude.search.embedders import load_embedder
from etude.search.embedding_cache import CachedEmbedder, EmbeddingCache
from etude.search.engine import SearchEngine
from etude.search.metrics import watch_embedder
from etude.search.server import SearchServicer, registration

log = logging.getLogger("etude.search")


async def build(
    settings: SearchSettings, resources: contextlib.AsyncExitStack
) -> list[Registration]:
    config = settings.resolved()
    model = load_embedder(config.embedder, config.device, config.batch_size)
    cache = EmbeddingCache(config.cache_dir / "embeddings.sqlite3")
    resources.callback(cache.close)
    embedder = CachedEmbedder(model, cache)
    watch_embedder(embedder)
    log.info(
        "embedder loaded",
        extra=log_fields(model=model.fingerprint, dimension=model.dimension, device=config.device),
    )
    return [registration(SearchServicer(SearchEngine(config, embedder)))]


if __name__ == "__main__":
    run_service("search", build, SearchSettings())
