"""The engine on a real project with the real MiniLM embedder: indexing, incremental
updates, forks, filters, errors, the embedding cache and the HNSW path."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from etude.search.engine import SearchArgumentError, SearchEngine, WorkspaceNotFoundError
from etude.search.index import Segment
from tests.search.conftest import make_engine

CACHES = "lrukit/caches.py"
NEW_FUNCTION = (
    "\n\ndef brew_espresso(grams: float) -> str:\n"
    '    return f"pulling a {grams} g shot of espresso"\n'
)


def symbols(hits) -> list[tuple[str, str]]:
    return [(h.path, h.symbol) for h in hits]


def test_index_finds_a_method_by_meaning_and_by_words(engine: SearchEngine, project: Path):
    result = engine.index_workspace("w", project)
    assert result.chunks > 50
    query = "evict the least recently used entry when the cache is full"
    for mode in ("hybrid", "vector", "lexical"):
        hits = engine.query("w", query, 10, mode=mode)
        assert any(p == CACHES and s.startswith("LRUCache") for p, s in symbols(hits)), mode
    top = engine.query("w", "frequency of a key in the LFU cache", 3)[0]
    assert (top.path, top.symbol) == (CACHES, "LFUCache.frequency")
    assert top.snippet.startswith("    def frequency(")
    source = (project / CACHES).read_text().split("\n")
    assert top.snippet == "\n".join(source[top.start_line - 1 : top.end_line])


def test_an_edit_re_embeds_exactly_the_edited_chunk(engine: SearchEngine, project: Path):
    engine.index_workspace("w", project)
    before = {(h.symbol, h.start_line) for h in engine.query("w", "lru cache", 50)}
    source = (project / CACHES).read_text()
    edited = source.replace(
        "        self._data[key] = value\n\n    def peek",
        "        self._data[key] = value  # newest last\n\n    def peek",
    )
    assert edited != source
    result = engine.update_files("w", [(CACHES, edited)], [])
    assert (result.chunks_embedded, result.chunks_removed) == (1, 1)
    # The same content again: nothing to embed, nothing removed.
    again = engine.update_files("w", [(CACHES, edited)], [])
    assert (again.chunks_embedded, again.chunks_removed) == (0, 0)
    hit = next(h for h in engine.query("w", "newest last", 5, mode="lexical"))
    assert (hit.path, hit.symbol) == (CACHES, "LRUCache.put")
    assert "# newest last" in hit.snippet
    after = {(h.symbol, h.start_line) for h in engine.query("w", "lru cache", 50)}
    assert len(after) == len(before)


def test_lines_shift_without_re_embedding(engine: SearchEngine, project: Path):
    engine.index_workspace("w", project)
    source = (project / CACHES).read_text()
    result = engine.update_files("w", [(CACHES, "# a new first line\n\n\n" + source)], [])
    # Only the module-level window holding the new comment is new.
    assert result.chunks_embedded == 1
    hit = engine.query("w", "frequency of a key in the LFU cache", 1)[0]
    assert (hit.symbol, hit.start_line) == ("LFUCache.frequency", 163 + 3)


def test_new_files_are_found_and_deleted_files_leave_results(engine, project):
    engine.index_workspace("w", project)
    engine.update_files("w", [("lrukit/coffee.py", NEW_FUNCTION)], [])
    assert engine.query("w", "make an espresso shot", 1)[0].path == "lrukit/coffee.py"
    result = engine.update_files("w", [], ["lrukit/coffee.py", CACHES])
    assert result.chunks_removed > 40
    paths = {h.path for h in engine.query("w", "make an espresso shot cache evict", 50)}
    assert "lrukit/coffee.py" not in paths and CACHES not in paths
    assert paths  # the rest of the project still answers


def test_forks_share_the_base_and_keep_their_own_edits(engine, project):
    engine.index_workspace("base", project)
    assert engine.index_workspace("a", parent_id="base").chunks_embedded == 0
    engine.index_workspace("b", parent_id="base")
    engine.update_files("a", [("lrukit/coffee.py", NEW_FUNCTION)], [])
    engine.update_files("b", [], [CACHES])
    espresso = "make an espresso shot"
    assert engine.query("a", espresso, 1)[0].path == "lrukit/coffee.py"
    for other in ("base", "b"):
        assert "lrukit/coffee.py" not in {h.path for h in engine.query(other, espresso, 50)}
    assert CACHES in {h.path for h in engine.query("a", "lru cache put", 50)}
    assert CACHES not in {h.path for h in engine.query("b", "lru cache put", 50)}
    # A fork of a fork starts from its parent's edits, then goes its own way.
    engine.index_workspace("a2", parent_id="a")
    engine.update_files("a2", [], ["lrukit/coffee.py"])
    assert engine.query("a", espresso, 1)[0].path == "lrukit/coffee.py"
    assert "lrukit/coffee.py" not in {h.path for h in engine.query("a2", espresso, 50)}
    assert engine.workspaces["a"].base is engine.workspaces["base"].base  # shared, not copied


def test_target_directories_restrict_hits(engine, project):
    engine.index_workspace("w", project)
    assert {h.path.split("/")[0] for h in engine.query("w", "cache", 30, ["tests/"])} == {"tests"}
    assert {h.path.split("/")[0] for h in engine.query("w", "cache", 30, ["./lrukit"])} == {
        "lrukit"
    }
    with pytest.raises(SearchArgumentError, match="outside the workspace"):
        engine.query("w", "cache", 5, ["../elsewhere"])


def test_bad_requests_are_refused_clearly(engine, project):
    with pytest.raises(WorkspaceNotFoundError, match="no workspace 'nope'"):
        engine.query("nope", "cache", 5)
    with pytest.raises(WorkspaceNotFoundError):
        engine.index_workspace("child", parent_id="nope")
    with pytest.raises(SearchArgumentError, match="not a directory"):
        engine.index_workspace("w", project / "missing")
    engine.index_workspace("w", project)
    with pytest.raises(SearchArgumentError, match="query is empty"):
        engine.query("w", "   ", 5)
    with pytest.raises(SearchArgumentError, match="the limit is 2000"):
        engine.query("w", "x" * 2001, 5)
    with pytest.raises(SearchArgumentError, match="k must be between 1 and 100"):
        engine.query("w", "cache", 0)
    with pytest.raises(SearchArgumentError, match="mode must be one of"):
        engine.query("w", "cache", 5, mode="fuzzy")
    with pytest.raises(SearchArgumentError, match="outside the workspace"):
        engine.update_files("w", [("../outside.py", "x = 1\n")], [])
    with pytest.raises(SearchArgumentError, match="normalised"):
        engine.update_files("w", [], ["lrukit/../lrukit/caches.py"])
    engine.drop("w")
    with pytest.raises(WorkspaceNotFoundError):
        engine.query("w", "cache", 5)


def test_binary_oversize_hidden_and_linked_files_are_not_indexed(minilm, tmp_path):
    root = tmp_path / "repo"
    (root / ".venv").mkdir(parents=True)
    (root / ".venv" / "junk.py").write_text("def hidden_helper_function(): pass\n")
    (root / "blob.bin").write_bytes(b"\0binary helper function\0")
    (root / "big.py").write_text("def oversized_helper_function(): pass\n" + "#" * 5000)
    (root / "ok.py").write_text("def visible_helper_function(): pass\n")
    secret = tmp_path / "secret.py"
    secret.write_text("def leaked_helper_function(): pass\n")
    os.symlink(secret, root / "link.py")
    engine = make_engine(minilm, tmp_path, max_file_bytes=4096)
    engine.index_workspace("w", root)
    assert {h.path for h in engine.query("w", "helper function", 20)} == {"ok.py"}
    # The same rules apply to updates: an oversize file is dropped, not indexed.
    engine.update_files("w", [("ok.py", "def visible_helper_function(): pass\n" + "#" * 5000)], [])
    assert engine.query("w", "helper function", 20) == []


def test_a_repository_is_embedded_once(minilm, project, tmp_path):
    first = make_engine(minilm, tmp_path)
    assert first.index_workspace("w", project).chunks_embedded > 50
    # A new engine (a restarted service) on the same cache embeds nothing.
    second = make_engine(minilm, tmp_path)
    assert second.index_workspace("w", project).chunks_embedded == 0
    assert second.embedder.hit_ratio() == 1.0


def test_hnsw_segments_answer_like_exact_ones(engine, minilm, project):
    engine.index_workspace("w", project)
    base = engine.workspaces["w"].base
    vectors = base.vectors.vectors
    graph = Segment(base.chunks, vectors, exact_max_rows=10)
    assert (graph.vectors.kind, base.vectors.kind) == ("hnsw", "exact")
    query = minilm.embed(["remove the least frequently used key"])[0]
    exact = [row for row, _ in base.vectors.search(query, 5)]
    approximate = [row for row, _ in graph.vectors.search(query, 5)]
    assert len(set(exact) & set(approximate)) >= 4
    # A mask hiding the best rows is honoured on the graph path too.
    allowed = np.ones(len(vectors), dtype=bool)
    allowed[exact[:3]] = False
    masked = [row for row, _ in graph.vectors.search(query, 5, allowed)]
    assert len(masked) == 5 and not set(masked) & set(exact[:3])
