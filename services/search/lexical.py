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
from collections.abc import Sequence

import numpy as np

_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_TERM = re.compile(r"[^\W_]+")
MAX_QUERY_TERMS = 64
# Words of a question that say nothing about code ("where is the cache of the ..."). They
# match nearly every chunk, so besides adding noise they make an OR query score most of the
# index: dropping them is most of what keeps BM25 fast on large workspaces.
_STOPWORDS_TEXT = (
    "a an the of to in on at by for from with into onto as is are was were be been being it "
    "its this that these those there here which who whom whose what when where why how do "
    "does did done can could should would will shall may might must and or but if then so "
    "than too very not no any all each some such i we you he she they me us our your their "
    "my his her them one two via about"
)
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())


def code_terms(text: str) -> str:
    """Text with camelCase split into words, as both documents and queries are indexed."""
    return _CAMEL_HUMP.sub(" ", text)


def query_expression(query: str) -> str | None:
    """An FTS5 MATCH expression: each distinct term quoted (so no term is read as FTS5
    syntax), joined by OR. None when the query holds no searchable term."""
    terms = list(dict.fromkeys(t.lower() for t in _TERM.findall(code_terms(query))))
    # A query of nothing but stopwords ("what is this") keeps them: they are all it has.
    terms = [t for t in terms if t not in STOPWORDS] or terms
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
        # Without a mask the best k are the answer, and LIMIT lets FTS5 keep only those;
        # with one, read on until k allowed rows are found.
        limit = k if allowed is None else -1
        found: list[tuple[int, float]] = []
        with self._lock:
            rows = self.connection.execute(
                "SELECT rowid, rank FROM chunks WHERE chunks MATCH ? ORDER BY rank LIMIT ?",
                (expression, limit),
            )
            for row, rank in rows:
                if allowed is None or allowed[row]:
                    found.append((row, -rank))  # FTS5's bm25() is lower-is-better
                    if len(found) == k:
                        break
        return found

    def close(self) -> None:
        self.connection.close()
