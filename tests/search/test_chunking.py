"""Chunking cuts real files along their definitions, with exact lines and stable hashes."""

from __future__ import annotations

import ast
import hashlib
import itertools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from etude.search.chunking import Chunk, chunk_file, count_tokens
from etude.tasks.materialize import PROJECTS_DIR

PROJECTS = [PROJECTS_DIR / "cronexpr", PROJECTS_DIR / "lrukit"]
PY_FILES = sorted(f for project in PROJECTS for f in project.rglob("*.py"))
ALL_FILES = PY_FILES + [project / "README.md" for project in PROJECTS]
DEFINING_FILES = [f for f in PY_FILES if f.name != "__init__.py"]


def _rel(file: Path) -> str:
    return file.relative_to(PROJECTS_DIR).as_posix()


def _definitions(body: list[ast.stmt], prefix: str = "") -> dict[str, tuple[int, int, bool]]:
    """The oracle: symbol -> (first line with decorators, last line, is a class)."""
    found = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            is_class = isinstance(node, ast.ClassDef)
            found[prefix + node.name] = (first, node.end_lineno, is_class)
            if is_class:
                found |= _definitions(node.body, f"{prefix}{node.name}.")
    return found


def _check_exact(chunk: Chunk, source: str) -> None:
    assert chunk.code == "\n".join(source.splitlines()[chunk.start_line - 1 : chunk.end_line])
    header = f"{chunk.path} :: {chunk.symbol}\n" if chunk.symbol else f"{chunk.path}\n"
    assert chunk.text == header + chunk.code
    assert chunk.content_hash == hashlib.sha256(chunk.text.encode()).hexdigest()
    assert chunk.code.strip()


def _by_symbol(chunks: list[Chunk]) -> dict[str, list[Chunk]]:
    grouped: dict[str, list[Chunk]] = {}
    for chunk in chunks:
        grouped.setdefault(chunk.symbol, []).append(chunk)
    return grouped


@pytest.mark.parametrize("file", DEFINING_FILES, ids=_rel)
def test_every_function_and_method_of_a_real_file_gets_one_chunk_at_its_lines(file):
    source = file.read_text()
    # A budget no definition reaches, so none is split and each maps to one chunk.
    chunks = _by_symbol(chunk_file(_rel(file), source, max_tokens=100_000))
    expected = _definitions(ast.parse(source).body)
    assert expected
    for symbol, (first, last, is_class) in expected.items():
        if is_class:
            # A class chunk starts at the class (or its decorator) and stops before its methods.
            assert chunks[symbol][0].start_line == first
            assert chunks[symbol][0].end_line <= last
            continue
        [chunk] = chunks[symbol]
        assert (chunk.start_line, chunk.end_line) == (first, last)
    assert set(chunks) - {""} == set(expected)


@pytest.mark.parametrize("file", ALL_FILES, ids=_rel)
def test_chunks_claim_exactly_their_lines_and_cover_every_non_blank_one(file):
    source = file.read_text()
    chunks = chunk_file(_rel(file), source, max_tokens=64, overlap_tokens=8)
    assert chunks == chunk_file(_rel(file), source, max_tokens=64, overlap_tokens=8)
    assert [c.start_line for c in chunks] == sorted(c.start_line for c in chunks)
    covered = set()
    for chunk in chunks:
        _check_exact(chunk, source)
        covered |= set(range(chunk.start_line, chunk.end_line + 1))
    lines = source.splitlines()
    assert {i + 1 for i, line in enumerate(lines) if line.strip()} <= covered
    if file.suffix == ".md":
        assert len(chunks) > 1 and {c.symbol for c in chunks} == {""}


def test_a_class_chunk_keeps_its_header_docstring_and_attributes_but_not_its_methods():
    source = (PROJECTS_DIR / "cronexpr/cronexpr/fields.py").read_text()
    chunks = _by_symbol(chunk_file("fields.py", source))
    [field] = chunks["Field"]
    assert field.code.startswith("@dataclass(frozen=True)\nclass Field:")
    assert "def " not in field.code
    assert field.end_line < chunks["Field.__contains__"][0].start_line
    assert chunks["Field.is_any"][0].code.startswith("    @property\n    def is_any(")


def test_nested_classes_get_dotted_symbols_and_nested_functions_stay_inside():
    source = (
        "class Outer:\n"
        "    class Inner:\n"
        "        def method(self):\n"
        "            def helper():\n"
        "                return 1\n"
        "            return helper()\n"
    )
    chunks = chunk_file("pkg/nest.py", source)
    assert [(c.symbol, c.start_line, c.end_line) for c in chunks] == [
        ("Outer", 1, 1),
        ("Outer.Inner", 2, 2),
        ("Outer.Inner.method", 3, 6),
    ]
    assert chunks[-1].text.startswith("pkg/nest.py :: Outer.Inner.method\n        def method(")


def test_the_header_carries_the_path_and_the_method_symbol():
    source = (PROJECTS_DIR / "lrukit/lrukit/caches.py").read_text()
    [put] = _by_symbol(chunk_file("lrukit/caches.py", source))["LRUCache.put"]
    assert put.text.splitlines()[0] == "lrukit/caches.py :: LRUCache.put"
    assert put.text.splitlines()[1].lstrip().startswith("def put(")


def _long_function(statements: int = 60) -> str:
    body = "".join(
        f"    total = total + compute(item_{i}, offset={i})\n" for i in range(statements)
    )
    return f"import os\n\n\ndef long_one(items):\n    total = 0\n{body}    return total\n"


def test_a_long_function_is_split_into_overlapping_windows_that_cover_it():
    source = _long_function()
    lines = source.splitlines()
    assert count_tokens("\n".join(lines[3:])) > 500
    windows = [c for c in chunk_file("long.py", source) if c.symbol == "long_one"]
    assert len(windows) >= 3
    slack = max(count_tokens(line) for line in lines)
    for window in windows:
        _check_exact(window, source)
        assert count_tokens(window.code) <= 256 + slack
    assert windows[0].start_line == 4 and windows[-1].end_line == len(lines)
    for before, after in itertools.pairwise(windows):
        assert before.start_line < after.start_line <= before.end_line  # overlap, no gap
        assert after.end_line > before.end_line


def test_editing_a_body_changes_only_that_chunks_hash_and_moving_keeps_hashes():
    source = (PROJECTS_DIR / "cronexpr/cronexpr/describe.py").read_text()
    original = {c.symbol: c for c in chunk_file("describe.py", source)}
    edited = {
        c.symbol: c for c in chunk_file("describe.py", source.replace('" and "', '" as well as "'))
    }
    changed = {s for s in original if original[s].content_hash != edited[s].content_hash}
    assert changed == {"_join"}

    shifted = {
        c.symbol: c
        for c in chunk_file(
            "describe.py",
            source.replace("\n\n\ndef describe(", "\n\nX = 1\n\n\n\ndef describe(", 1),
        )
    }
    for symbol in ("describe", "_join"):
        assert shifted[symbol].content_hash == original[symbol].content_hash
        assert shifted[symbol].start_line == original[symbol].start_line + 3
    # The same code in another file is another chunk.
    moved = {c.symbol: c for c in chunk_file("other.py", source)}
    assert moved["_join"].content_hash != original["_join"].content_hash


@pytest.mark.parametrize("source", ["", "\n", "   \n\t\n  "])
def test_an_empty_or_blank_file_has_no_chunks(source):
    assert chunk_file("empty.py", source) == []
    assert chunk_file("empty.txt", source) == []


def test_a_broken_python_file_still_yields_its_intact_definitions():
    source = (
        "import os\n\n\ndef before(a):\n    return a + 1\n\n\n"
        "def broken(x:\n    return (x\n\n\ndef after():\n    pass\n"
    )
    chunks = chunk_file("broken.py", source)
    assert [(c.symbol, c.start_line, c.end_line) for c in chunks][:2] == [
        ("", 1, 1),
        ("before", 4, 5),
    ]
    for chunk in chunks:
        _check_exact(chunk, source)
    assert "def after():" in chunks[-1].code


@given(st.text(alphabet=st.sampled_from("def clas(): \n\r\x0c\u2028#'\"x=1@é\t")))
def test_any_text_chunks_without_raising_and_with_exact_lines(source):
    for path in ("any.py", "any.txt"):
        for chunk in chunk_file(path, source, max_tokens=8, overlap_tokens=3):
            _check_exact(chunk, source)
