"""The retrieval benchmark: how it is built, and what `etude search eval` reports on it."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

from etude.search.chunking import chunk_file
from etude.search.evaluation import build_benchmark, projects_of, strip_docstrings
from etude.tasks.materialize import HELD_OUT_PROJECTS, PROJECTS_DIR


def test_docstrings_are_removed_without_moving_lines():
    source = (PROJECTS_DIR / "lrukit" / "lrukit" / "caches.py").read_text()
    stripped = strip_docstrings(source)
    assert stripped.count("\n") == source.count("\n")
    assert '"""' not in stripped
    before = {n.name: n.lineno for n in ast.walk(ast.parse(source)) if hasattr(n, "name")}
    after = {n.name: n.lineno for n in ast.walk(ast.parse(stripped)) if hasattr(n, "name")}
    assert before == after


def test_splits_follow_the_task_split_and_every_answer_is_a_chunk():
    assert set(projects_of("heldout")) == HELD_OUT_PROJECTS
    assert not set(projects_of("train")) & HELD_OUT_PROJECTS
    benchmark = build_benchmark("heldout")
    assert set(benchmark.sources) == HELD_OUT_PROJECTS
    assert len(benchmark.queries) >= 50
    chunked = {
        (project, chunk.path, chunk.symbol)
        for project, files in benchmark.sources.items()
        for path, text in files.items()
        for chunk in chunk_file(path, text)
    }
    for query in benchmark.queries:
        assert query.text and '"""' not in query.text
        assert all((query.project, p, s) in chunked for p, s in query.relevant), query
    for files in benchmark.sources.values():  # tests are queries, never answers
        assert not any(path.startswith("tests/") for path in files)


def test_hybrid_beats_lexical_and_vector_on_held_out(tmp_path, cli_env):
    out = tmp_path / "eval.json"
    command = [sys.executable, "-m", "etude.cli", "search", "eval", "--json", str(out)]
    completed = subprocess.run(command, env=cli_env, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr
    assert "MRR@10" in completed.stdout
    scores = json.loads(out.read_text())["scores"]
    assert {m: s["queries"] for m, s in scores.items()} == {
        "hybrid": len(build_benchmark("heldout").queries),
        "vector": len(build_benchmark("heldout").queries),
        "lexical": len(build_benchmark("heldout").queries),
    }
    mrr = {mode: s["mrr10"] for mode, s in scores.items()}
    assert 0.2 < mrr["lexical"] < 1 and 0.2 < mrr["vector"] < 1
    assert mrr["hybrid"] >= max(mrr["lexical"], mrr["vector"])
    recall = {mode: s["recall10"] for mode, s in scores.items()}
    assert recall["hybrid"] >= max(recall["lexical"], recall["vector"]) - 0.02
