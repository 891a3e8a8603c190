"""BM25 over one segment's chunks, on SQLite FTS5.

Code is tokenised the way people search it: identifiers split at underscores (FTS5's
unicode61 tokenizer already separates on `_`) and at camelCase humps (done here, since no
SQLite tokenizer does), then Porter-stemmed so "parses" finds `parse`. Queries become an OR
of their terms: BM25 ranks chunks holding more, and rarer, terms first.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence

import numpy as np

_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_TERM = re.compile(r"[^\W_]+")
MAX_QUERY_TERMS = 64


def code_terms(text: str) -> str:
    """Text with camelCase split into words, as both documents and queries are indexed."""
    return _CAMEL_HUMP.sub(" ", text)


def query_expression(query: str) -> str | None:
    """An FTS5 MATCH expression: each distinct term quoted (so no term is read as FTS5
    syntax), joined by OR. None when the query holds no searchable term."""
    terms = list(dict.fromkeys(t.lower() for t in _TERM.findall(code_terms(query))))
    if not terms:
        return None
    return " OR ".join(f'"{term}"' for term in terms[:MAX_QUERY_TERMS])


class LexicalIndex:
    def __init__(self, texts: Sequence[str]) -> None:
        self.connection = sqlite3.connect(":memory:", check_same_thread=False)
        self.connection.execute(
            "CREATE VIRTUAL TABLE chunks USING fts5(body, tokenize = 'porter unicode61')"
        )
        with self.connection:
            self.connection.executemany(
                "INSERT INTO chunks (rowid, body) VALUES (?, ?)",
                ((row, code_terms(text)) for row, text in enumerate(texts)),
            )
        self._lock = threading.Lock()

    def search(
        self, query: str, k: int, allowed: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """The best `k` rows as (row, BM25 score; higher is better), best first."""
        expression = query_expression(query)
        if expression is None or k <= 0:
            return []
        found: list[tuple[int, float]] = []
        with self._lock:
            for row, rank in self._ranked(expression):
                if allowed is None or allowed[row]:
                    found.append((row, -rank))  # FTS5's bm25() is lower-is-better
                    if len(found) == k:
                        break
        return found

    def _ranked(self, expression: str) -> Iterator[tuple[int, float]]:
        yield from self.connection.execute(
            "SELECT rowid, rank FROM chunks WHERE chunks MATCH ? ORDER BY rank", (expression,)
        )

    def close(self) -> None:
        self.connection.close()
