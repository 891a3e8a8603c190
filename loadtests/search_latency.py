"""Search latency, embedding rate and retrieval quality, with the engine in process.

- Embedding rate: real chunks of the bundled etude-mini projects (`chunk_file` over their .py
  files) embedded by MiniLM on the CPU with no cache. Quick: 128 of them; full: all (~1200).
- Query latency, vector part: `segment.vectors.search(query_vector, 50)`, what a query runs
  for its vector ranking once its text is embedded, on a segment of 10k chunks (exact numpy
  product) and one of 100k (HNSW graph, usearch). The corpora are synthetic but built from
  real data: each row is one of the chunks embedded above, blended with a random other one
  (weight uniform in 0–0.5) plus gaussian noise (σ = 0.02 per dimension: cosine ≈ 0.93 to
  the original, what MiniLM gives a two-line function whose path gains a `proj7/` prefix),
  re-normalised, with that chunk's text under a path `proj<i>/...`. Quick mode has fewer
  originals (128 rather than ~1200), so its rows crowd closer together, a harder case for
  the graph. Queries are the first paragraphs of the projects'
  docstrings, embedded beforehand. `hnsw_recall10_100k`: the share of the exact top 10 (numpy
  over the same vectors) found in the graph's top 10, so speed is never bought with silent
  recall loss. `segment_build_s_100k`: the segment's construction, HNSW graph and FTS5 table.
- Hybrid query at 100k: `engine.query` end to end (embed the query, vector and BM25 rankings,
  fusion) on a workspace whose base is the 100k segment.
- Re-index one file: `engine.update_files` on a workspace indexed from a bundled project,
  after an edit of one function's body (a new one each time, so exactly one chunk is
  embedded). The workspace's delta segment is rebuilt at the next query, not counted here.
- Retrieval quality: MRR@10 and recall@10 of each query mode on the held-out split
  (`etude.search.evaluation`).

Torch uses every core: any other load on the machine shows in the embedding figures.

    python loadtests/search_latency.py --quick --json out.json
"""

from __future__ import annotations

import ast
import dataclasses
import os
import random
import re
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
from benchlib import argument_parser, metric, percentile, print_metrics, write_json

from etude.search.chunking import Chunk, chunk_file, count_tokens
from etude.search.config import SearchConfig
from etude.search.embedders import load_embedder
from etude.search.embedding_cache import CachedEmbedder, EmbeddingCache
from etude.search.engine import SearchEngine
from etude.search.evaluation import evaluate
from etude.search.index import Segment, Workspace
from etude.tasks.materialize import PROJECTS_DIR

REINDEX_PROJECT = "calcparse"
NOISE_SIGMA = 0.02
MAX_BLEND = 0.5


@dataclasses.dataclass(frozen=True)
class Plan:
    chunks: int | None  # None: all of them
    queries: int | None
    vector_searches: int
    edits: int


QUICK = Plan(chunks=128, queries=32, vector_searches=500, edits=10)
FULL = Plan(chunks=None, queries=None, vector_searches=5000, edits=40)


def real_chunks(config: SearchConfig) -> list[Chunk]:
    """The projects' chunks, paths relative to each project: the re-indexed project's first
    (so that even quick mode has all its vectors to put in the cache), then the others'
    shuffled (so that a quick run's few are spread over the projects)."""
    first, rest = [], []
    for project in sorted(p for p in PROJECTS_DIR.iterdir() if p.is_dir()):
        for file in sorted(project.rglob("*.py")):
            path, text = str(file.relative_to(project)), file.read_text()
            chunks = chunk_file(path, text, config.chunk_tokens, config.chunk_overlap_tokens)
            (first if project.name == REINDEX_PROJECT else rest).extend(chunks)
    random.Random(0).shuffle(rest)
    return first + rest


def docstring_queries(count: int | None) -> list[str]:
    """First paragraphs of the bundled functions' docstrings: natural-language queries."""
    found = []
    for file in sorted(PROJECTS_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(file.read_text())):
            functions = ast.FunctionDef | ast.AsyncFunctionDef
            if isinstance(node, functions) and (doc := ast.get_docstring(node)):
                found.append(" ".join(doc.split("\n\n")[0].split()))
    return found if count is None else random.Random(1).sample(found, count)


def synthetic_segment(originals: list[Chunk], vectors: np.ndarray, rows: int, config):
    """A segment of `rows` noisy copies of the real chunks, and the seconds its build took."""
    rng = np.random.default_rng(rows)
    picks = np.arange(rows) % len(originals)
    # Each row leans towards its own chunk and partly towards another one: copies spread
    # between real functions, as a large code base's functions do, instead of piling up as
    # hundreds of near-duplicates of each chunk (which no real repository holds).
    partners = rng.integers(0, len(originals), rows)
    blend = rng.uniform(0.0, MAX_BLEND, (rows, 1)).astype(np.float32)
    noise = rng.normal(0, NOISE_SIGMA, (rows, vectors.shape[1])).astype(np.float32)
    noisy = (1 - blend) * vectors[picks] + blend * vectors[partners] + noise
    noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
    chunks = []
    for row, pick in enumerate(picks):
        original, prefix = originals[pick], f"proj{row // len(originals)}/"
        path, text = prefix + original.path, prefix + original.text
        # content_hash is left stale: only the embedding cache reads it.
        chunks.append(dataclasses.replace(original, path=path, text=text))
    started = time.perf_counter()
    segment = Segment(chunks, noisy, config.exact_max_chunks)
    return segment, time.perf_counter() - started


def vector_latencies(segment: Segment, query_vectors: np.ndarray, count: int, candidates: int):
    """Milliseconds per vector search, and each query's top 10 (for recall)."""
    for vector in query_vectors[:5]:  # warm-up
        segment.vectors.search(vector, candidates)
    latencies, tops = [], []
    for i in range(count):
        vector = query_vectors[i % len(query_vectors)]
        start = time.perf_counter()
        # allowed=None: a workspace that hides no base file and names no target directory.
        found = segment.vectors.search(vector, candidates, None)
        latencies.append((time.perf_counter() - start) * 1000)
        if i < len(query_vectors):
            tops.append({row for row, _ in found[:10]})
    return latencies, tops


def recall_at_10(segment: Segment, query_vectors: np.ndarray, tops: list[set[int]]) -> float:
    overlaps = []
    for vector, top in zip(query_vectors, tops, strict=True):
        scores = segment.vectors.vectors @ vector
        exact = set(np.argpartition(-scores, 10)[:10].tolist())
        overlaps.append(len(exact & top) / 10)
    return float(np.mean(overlaps))


def embed_queries(embedder: CachedEmbedder, queries: list[str]):
    """Milliseconds to embed each query, one at a time as the service does, and the vectors."""
    latencies, vectors = [], []
    for query in queries:
        start = time.perf_counter()
        vectors.append(embedder.embed_query(query))
        latencies.append((time.perf_counter() - start) * 1000)
    return latencies, np.stack(vectors)


def timed_ms(function, *args, **kwargs) -> float:
    start = time.perf_counter()
    function(*args, **kwargs)
    return (time.perf_counter() - start) * 1000


def query_metrics(config, embedder, chunks, vectors, queries, query_vectors, plan) -> dict:
    """Vector-part latency at 10k and 100k chunks; recall, build time and hybrid latency at
    100k."""
    metrics = {}
    for rows, label in ((10_000, "10k"), (100_000, "100k")):
        segment, build_s = synthetic_segment(chunks, vectors, rows, config)
        latencies, tops = vector_latencies(
            segment, query_vectors, plan.vector_searches, config.fusion_candidates
        )
        target = 5 if rows == 100_000 else None
        metrics[f"query_p50_ms_{label}"] = metric(percentile(latencies, 50), "ms")
        metrics[f"query_p99_ms_{label}"] = metric(percentile(latencies, 99), "ms", target=target)
        if rows == 100_000:
            recall = recall_at_10(segment, query_vectors, tops)
            metrics["hnsw_recall10_100k"] = metric(recall, "fraction")
            metrics["segment_build_s_100k"] = metric(build_s, "s")
            engine = SearchEngine(config, embedder)
            engine.workspaces["bench"] = Workspace(segment, config.exact_max_chunks)
            hybrid_ms = [timed_ms(engine.query, "bench", q, 10) for q in queries]
            metrics["query_hybrid_p99_ms_100k"] = metric(percentile(hybrid_ms, 99), "ms")
        segment.close()
    return metrics


def editable_function(root: Path, config: SearchConfig) -> tuple[str, str, int, str]:
    """(path, source, last line, body indent) of a function whose chunk is whole and well
    inside the token budget, so that a line added to it changes that chunk only."""
    for file in sorted(root.rglob("*.py")):
        path, source = str(file.relative_to(root)), file.read_text()
        chunks = chunk_file(path, source, config.chunk_tokens, config.chunk_overlap_tokens)
        symbols = Counter(c.symbol for c in chunks)
        for chunk in chunks:
            lines = chunk.code.split("\n")
            if (
                symbols[chunk.symbol] == 1
                and lines[0].lstrip().startswith("def ")
                and lines[0].rstrip().endswith(":")  # the body starts on the next line
                and len(lines) > 2
                and lines[1].strip()
                and count_tokens(chunk.code) < config.chunk_tokens // 2
            ):
                indent = re.match(r"\s*", lines[1]).group()
                return path, source, chunk.end_line, indent
    raise RuntimeError(f"no function of {root} to edit")


def reindex_latencies(embedder: CachedEmbedder, config, scratch: Path, edits: int) -> list[float]:
    root = shutil.copytree(PROJECTS_DIR / REINDEX_PROJECT, scratch / REINDEX_PROJECT)
    engine = SearchEngine(config, embedder)
    engine.index_workspace("reindex", root)
    path, source, last_line, indent = editable_function(root, config)
    lines = source.split("\n")
    latencies = []
    for i in range(edits):
        added = f"{indent}edits = {i}  # benchmark edit"
        edited = "\n".join([*lines[:last_line], added, *lines[last_line:]])
        start = time.perf_counter()
        result = engine.update_files("reindex", [(path, edited)], [])
        latencies.append((time.perf_counter() - start) * 1000)
        assert result.chunks_embedded == 1, f"{path}: the edit changed {result} chunks"
    return latencies


def main() -> None:
    parser = argument_parser(__doc__)
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    config = SearchConfig()
    embedder = load_embedder(config.embedder, config.device, config.batch_size)
    embedder.embed(["warm-up"])  # the first forward pass pays torch's one-time set-up
    chunks = real_chunks(config)[: plan.chunks]
    texts, hashes = [c.text for c in chunks], [c.content_hash for c in chunks]
    start = time.perf_counter()
    vectors, computed = CachedEmbedder(embedder, None).embed_chunks(texts, hashes)
    metrics = {
        "embed_chunks_per_s": metric(computed / (time.perf_counter() - start), "chunks/s"),
        "chunks_embedded": metric(computed, "chunks"),
    }
    with tempfile.TemporaryDirectory() as scratch:
        cache = EmbeddingCache(Path(scratch) / "embeddings.sqlite")
        # Only so the re-indexed project's index needs no embedding: it is not what we time.
        cache.put(embedder.fingerprint, hashes, vectors)
        cached = CachedEmbedder(embedder, cache)
        queries = docstring_queries(plan.queries)
        embed_ms, query_vectors = embed_queries(cached, queries)
        metrics |= query_metrics(config, cached, chunks, vectors, queries, query_vectors, plan)
        metrics["query_embed_p50_ms"] = metric(percentile(embed_ms, 50), "ms")
        reindex_ms = reindex_latencies(cached, config, Path(scratch), plan.edits)
        metrics["reindex_one_file_ms"] = metric(percentile(reindex_ms, 50), "ms", target=100)
        metrics["reindex_one_file_p99_ms"] = metric(percentile(reindex_ms, 99), "ms")
        scores = evaluate(cached, config, split="heldout")
        cache.close()
    for mode in ("lexical", "vector", "hybrid"):
        metrics[f"mrr10_{mode}"] = metric(scores[mode].mrr10, "score")
        metrics[f"recall10_{mode}"] = metric(scores[mode].recall10, "fraction")
    print_metrics("search latency, embedding rate and retrieval quality", metrics)
    write_json(
        args.json, "search_latency", metrics,
        quick=args.quick, cores=os.cpu_count(), evaluation_queries=scores["hybrid"].queries,
    )  # fmt: skip


if __name__ == "__main__":
    main()
