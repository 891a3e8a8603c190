"""Split one source file into the chunks the search index embeds and ranks.

Python files are cut along their definitions (tree-sitter, so a file that does not parse still
gets its intact definitions): one chunk per top-level function, per class (its header,
docstring and attributes) and per method, nested classes included. Every other line, and every
non-Python file, goes into line windows. A chunk longer than the token budget is split into
overlapping windows of whole lines that keep its symbol.
"""

from __future__ import annotations

import bisect
import hashlib
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

import tree_sitter_python
from tree_sitter import Language, Node, Parser

DEFAULT_MAX_TOKENS = 256
DEFAULT_OVERLAP_TOKENS = 32
PYTHON_SUFFIXES = (".py", ".pyi")

_TOKEN = re.compile(r"\w+|[^\w\s]")
_local = threading.local()


@dataclass(frozen=True, slots=True)
class Chunk:
    path: str
    """Workspace-relative path, as given."""
    symbol: str
    """`function`, `Class`, `Class.method`, `Outer.Inner.method`; "" for other lines."""
    start_line: int
    """1-based, inclusive."""
    end_line: int
    """1-based, inclusive."""
    code: str
    """The source lines start_line..end_line, joined with "\\n"."""
    text: str
    """What is embedded and indexed: a `<path> :: <symbol>` (or `<path>`) line, then the code."""
    content_hash: str
    """sha256 of `text`: a function that moves keeps it, one in a renamed file does not."""


def count_tokens(text: str) -> int:
    """Words and punctuation marks: an approximation of a subword tokenizer, only for sizing."""
    return len(_TOKEN.findall(text))


def chunk_file(
    path: str,
    source: str,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    overlap_tokens: int = DEFAULT_OVERLAP_TOKENS,
) -> list[Chunk]:
    """The chunks of one file, ordered by start line; [] for an empty or blank file."""
    lines = source.splitlines()
    if path.endswith(PYTHON_SUFFIXES):
        spans = _python_spans(source, lines)
    else:
        spans = [("", 0, len(lines) - 1)]
    chunks = []
    for symbol, first, last in spans:
        for start, end in _windows(lines[first : last + 1], max_tokens, overlap_tokens):
            chunks.append(_chunk(path, symbol, lines, first + start, first + end))
    return sorted(chunks, key=lambda c: (c.start_line, c.end_line))


def _chunk(path: str, symbol: str, lines: list[str], first: int, last: int) -> Chunk:
    code = "\n".join(lines[first : last + 1])
    text = f"{path} :: {symbol}\n{code}" if symbol else f"{path}\n{code}"
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return Chunk(path, symbol, first + 1, last + 1, code, text, digest)


@cache
def _language() -> Language:
    return Language(tree_sitter_python.language())


def _parser() -> Parser:
    # A Parser holds parse state, so each worker thread gets its own.
    if not hasattr(_local, "parser"):
        _local.parser = Parser(_language())
    return _local.parser


def _python_spans(source: str, lines: list[str]) -> list[tuple[str, int, int]]:
    """(symbol, first line, last line) spans, 0-based and inclusive, covering every line."""
    # Line numbers follow str.splitlines (which also breaks at \f, \r, \u2028 ...), not
    # tree-sitter's rows, so node positions are mapped through byte offsets of those lines.
    encoded = [line.encode("utf-8", "surrogatepass") for line in source.splitlines(True)]
    starts = [0]
    for line in encoded[:-1]:
        starts.append(starts[-1] + len(line))
    tree = _parser().parse(b"".join(encoded))

    def row(offset: int) -> int:
        return bisect.bisect_right(starts, offset) - 1

    def spans(scope: Node, prefix: str, symbol: str, first: int, last: int) -> Iterator:
        # The lines of a module or class that are not in its definitions carry its own symbol:
        # for a class that is its header, docstring and attributes.
        cursor = first
        for outer, definition in _definitions(scope):
            start, end = row(outer.start_byte), row(max(outer.end_byte - 1, outer.start_byte))
            if start < cursor:  # shares a line with what came before, e.g. `class A: def f(): ...`
                continue
            yield symbol, cursor, start - 1
            name_node = definition.child_by_field_name("name")
            name = prefix + (name_node.text or b"" if name_node else b"").decode(errors="replace")
            body = definition.child_by_field_name("body")
            if definition.type == "class_definition" and body is not None:
                yield from spans(body, name + ".", name, start, end)
            else:  # nested functions stay in their enclosing function
                yield name, start, end
            cursor = end + 1
        yield symbol, cursor, last

    return [s for s in spans(tree.root_node, "", "", 0, len(lines) - 1) if s[1] <= s[2]]


def _definitions(scope: Node) -> Iterator[tuple[Node, Node]]:
    """(node with decorators, definition) for the functions and classes directly in `scope`."""
    for child in scope.named_children:
        if child.type == "ERROR":  # a parse error: keep the definitions it swallowed
            yield from _definitions(child)
            continue
        definition = child
        if child.type == "decorated_definition":
            definition = child.child_by_field_name("definition") or child
        if definition.type in ("function_definition", "class_definition"):
            yield child, definition


def _windows(lines: list[str], max_tokens: int, overlap_tokens: int) -> Iterator[tuple[int, int]]:
    """Consecutive (first, last) windows of whole lines of about max_tokens, overlapping by
    about overlap_tokens; blank lines at the edges are dropped and blank windows skipped."""
    counts = [count_tokens(line) for line in lines]
    start = 0
    while start < len(lines):
        end, total = start, counts[start]  # a window takes its first line, however long
        while end + 1 < len(lines) and total + counts[end + 1] <= max_tokens:
            end += 1
            total += counts[end]
        first, last = start, end
        while first <= last and not lines[first].strip():
            first += 1
        while last >= first and not lines[last].strip():
            last -= 1
        if first <= last:
            yield first, last
        if end + 1 == len(lines):
            return
        # Step back over whole lines for the overlap, only as far as still lets the next
        # window reach past this one, so that every window brings new lines.
        start, back = end + 1, 0
        while (
            start - 1 > first  # always move on
            and back + counts[start - 1] <= overlap_tokens
            and back + counts[start - 1] + counts[end + 1] <= max_tokens
        ):
            start -= 1
            back += counts[start]
