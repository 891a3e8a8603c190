"""Fixtures for the search service: one MiniLM embedder per test session (loading it takes
seconds), an engine per test with a fresh embedding cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from etude.search.config import SearchConfig
from etude.search.embedders import TransformerEmbedder, load_embedder
from etude.search.embedding_cache import CachedEmbedder, EmbeddingCache
from etude.search.engine import SearchEngine
from etude.tasks.materialize import PROJECTS_DIR


@pytest.fixture(scope="session")
def minilm() -> TransformerEmbedder:
    return load_embedder("minilm")


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> EmbeddingCache:
    """A cache shared by the session's tests, so each chunk is embedded once."""
    return EmbeddingCache(tmp_path_factory.mktemp("search-cache") / "embeddings.sqlite3")


@pytest.fixture(scope="session")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for `etude search` commands: one run directory, hence one embedding
    cache, for all of them."""
    import os

    return {**os.environ, "ETUDE_STACK__RUN_DIR": str(tmp_path_factory.mktemp("run"))}


def make_engine(minilm, cache_dir: Path, **overrides) -> SearchEngine:
    cache = EmbeddingCache(cache_dir / "embeddings.sqlite3")
    return SearchEngine(SearchConfig(**overrides), CachedEmbedder(minilm, cache))


@pytest.fixture
def engine(minilm, shared_cache, tmp_path: Path) -> SearchEngine:
    """An engine on the session's embedding cache: tests that count embeddings from an empty
    cache build their own with `make_engine`. It may index workspaces under tmp_path."""
    config = SearchConfig(index_roots=(tmp_path,))
    return SearchEngine(config, CachedEmbedder(minilm, shared_cache))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of a real bundled project (lrukit), safe to edit."""
    import shutil

    target = tmp_path / "lrukit"
    shutil.copytree(PROJECTS_DIR / "lrukit", target)
    return target
