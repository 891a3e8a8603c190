"""The retrieval benchmark built from the etude-mini projects, and its scores.

Each project's source (tests excluded) is indexed with every docstring removed, so a query
never finds itself verbatim. Queries come from two places:

- a function's or method's docstring (its first paragraph); relevant: that function;
- a test's description (its docstring, else its name in words: `test_expired_entries_are_
  evicted` → "expired entries are evicted"); relevant: the project functions the test calls,
  when it calls between one and three of them (beyond that, the test is not about one thing).

Projects are split as the tasks are: the held-out projects (`HELD_OUT_PROJECTS`) never feed
training, so `etude search finetune` learns from the train split and is judged on held-out.
Scores: MRR@10 (1 / rank of the first relevant hit in the top 10, else 0) and recall@10 (the
share of a query's relevant functions in the top 10), averaged over queries.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from etude.common import python_ast
from etude.search.config import SearchConfig
from etude.search.embedders import load_embedder
from etude.search.embedding_cache import CachedEmbedder, EmbeddingCache
from etude.search.engine import MODES, SearchEngine
from etude.tasks.materialize import HELD_OUT_PROJECTS, PROJECTS_DIR

K = 10
SPLITS = ("train", "heldout", "all")
_MAX_TEST_TARGETS = 3


@dataclass(frozen=True, slots=True)
class Query:
    project: str
    text: str
    relevant: frozenset[tuple[str, str]]
    """(path, symbol) of the chunks that answer it."""


@dataclass(frozen=True, slots=True)
class Scores:
    mrr10: float
    recall10: float
    queries: int


@dataclass(frozen=True, slots=True)
class Benchmark:
    sources: dict[str, dict[str, str]]
    """project → {path: source without docstrings}: what gets indexed."""
    queries: list[Query]


def projects_of(split: str, projects_dir: Path = PROJECTS_DIR) -> list[str]:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, not {split!r}")
    names = sorted(p.name for p in projects_dir.iterdir() if (p / "pyproject.toml").is_file())
    if split == "all":
        return names
    return [n for n in names if (n in HELD_OUT_PROJECTS) == (split == "heldout")]


def build_benchmark(split: str = "heldout", projects_dir: Path = PROJECTS_DIR) -> Benchmark:
    sources: dict[str, dict[str, str]] = {}
    queries: list[Query] = []
    for project in projects_of(split, projects_dir):
        root = projects_dir / project
        files = {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*.py"))}
        code = {path: text for path, text in files.items() if not _is_test(path)}
        sources[project] = {path: strip_docstrings(text) for path, text in code.items()}
        symbols = {}  # function name → its (path, symbol)s, for resolving tests' calls
        for path, text in code.items():
            for symbol, node in _definitions(python_ast.parse(text)):
                symbols.setdefault(node.name, set()).add((path, symbol))
                doc = _first_paragraph(ast.get_docstring(node) or "")
                if doc:
                    queries.append(Query(project, doc, frozenset({(path, symbol)})))
        for path, text in files.items():
            if _is_test(path):
                queries += _test_queries(project, python_ast.parse(text), symbols)
    return Benchmark(sources, queries)


def evaluate_benchmark(engine: SearchEngine, benchmark: Benchmark) -> dict[str, Scores]:
    for project, files in benchmark.sources.items():
        engine.index_files(f"eval-{project}", files.items())
    results: dict[str, Scores] = {}
    for mode in MODES:
        reciprocal, recall = [], []
        for query in benchmark.queries:
            hits = engine.query(f"eval-{query.project}", query.text, K, mode=mode)
            found = [(h.path, h.symbol) for h in hits]
            rank = next((i for i, f in enumerate(found, 1) if f in query.relevant), None)
            reciprocal.append(1 / rank if rank else 0.0)
            recall.append(len(query.relevant.intersection(found)) / len(query.relevant))
        count = len(benchmark.queries)
        results[mode] = Scores(sum(reciprocal) / count, sum(recall) / count, count)
    for project in benchmark.sources:
        engine.drop(f"eval-{project}")
    return results


def evaluation_engine(config: SearchConfig, embedder: str | None = None) -> SearchEngine:
    """The engine `etude search eval | finetune` runs on: the named embedder (`minilm` or a
    model directory; default the configured one) behind the embedding cache of
    `config.cache_dir`, so a second evaluation embeds nothing it has seen."""
    model = load_embedder(embedder or config.embedder, config.device, config.batch_size)
    cache = EmbeddingCache(config.cache_dir / "embeddings.sqlite3")
    return SearchEngine(config, CachedEmbedder(model, cache))


def evaluate(embedder, config, split: str = "heldout") -> dict[str, Scores]:
    """MRR@10 and recall@10 of each query mode on one split, with this embedder."""
    return evaluate_benchmark(SearchEngine(config, embedder), build_benchmark(split))


def strip_docstrings(source: str) -> str:
    """The source with each docstring (and each bare string documenting an attribute)
    replaced by `pass` and blank lines, so line numbers stay."""
    lines = source.split("\n")
    for node in ast.walk(python_ast.parse(source)):
        body = getattr(node, "body", None)
        for statement in body if isinstance(body, list) else []:
            if _is_docstring(statement):
                indent = lines[statement.lineno - 1][: statement.col_offset]
                lines[statement.lineno - 1] = indent + "pass"
                for number in range(statement.lineno, statement.end_lineno):
                    lines[number] = ""
    return "\n".join(lines)


def _is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def _is_test(path: str) -> bool:
    return path.startswith("tests/") or Path(path).name.startswith("test_")


def _definitions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """(symbol, node) of every function, method and class, as the chunker names them."""
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + node.name, node
        elif isinstance(node, ast.ClassDef):
            yield prefix + node.name, node
            yield from _definitions(node, f"{prefix}{node.name}.")


def _first_paragraph(doc: str) -> str:
    return " ".join(doc.strip().split("\n\n")[0].split())


def _test_queries(project: str, tree: ast.Module, symbols: dict) -> list[Query]:
    queries = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
            continue
        called = {
            target
            for call in ast.walk(node)
            if isinstance(call, ast.Call)
            for target in symbols.get(_called_name(call), ())
            if "." in target[1] or target[1] == _called_name(call)  # functions and methods
        }
        if not 1 <= len(called) <= _MAX_TEST_TARGETS:
            continue
        description = _first_paragraph(ast.get_docstring(node) or "")
        description = description or re.sub(r"_+", " ", node.name.removeprefix("test_")).strip()
        queries.append(Query(project, description, frozenset(called)))
    return queries


def _called_name(call: ast.Call) -> str:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return ""
