"""Dialect detection and the high-level ``read`` entry point."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace

from .errors import CsvError, SniffError
from .parser import Dialect, Row, parse_rows
from .types import ColumnType, classify, convert, fits, infer_type

DELIMITERS = ",;\t|"
QUOTES = "\"'"


def detect_line_terminator(text: str) -> str:
    """The most frequent of ``\\r\\n``, ``\\n`` and ``\\r`` (ties in that order)."""
    crlf = text.count("\r\n")
    counts = [(crlf, "\r\n"), (text.count("\n") - crlf, "\n"), (text.count("\r") - crlf, "\r")]
    best_count, best = max(counts, key=lambda pair: pair[0])
    return best if best_count > 0 else "\n"


def detect_quote(text: str, delimiters: str = DELIMITERS) -> str | None:
    """The quote character seen most often at field boundaries, or ``None``.

    Only quotes right after a line start or delimiter, or right before a delimiter or line
    end, count, so apostrophes inside words ("O'Brien") are not mistaken for quoting.
    """
    lines = text.replace("\r\n", "\n").replace("\r", "\n")
    cls = "[" + re.escape(delimiters) + "]"
    counts = {
        q: len(re.findall(rf"(?:^|{cls}) *{q}|{q} *(?:{cls}|$)", lines, re.MULTILINE))
        for q in QUOTES
    }
    best = max(QUOTES, key=lambda q: counts[q])
    return best if counts[best] > 0 else None


def _width_profile(rows: list[Row]) -> tuple[float, int]:
    """(share of rows having the most common width, that width)."""
    widths = Counter(len(row.fields) for row in rows)
    width, count = widths.most_common(1)[0]
    return count / len(rows), width


def _detect_header(rows: list[list[str]]) -> bool:
    """Vote per column: a first value that does not fit the type of the values below it
    suggests a header; one that fits suggests data. Text columns vote on value length
    when every value below has the same length. No evidence means no header."""
    if len(rows) < 2:
        return False
    votes = 0
    for index, head in enumerate(rows[0]):
        below = [row[index] for row in rows[1:] if index < len(row)]
        column_type = infer_type(below)
        if column_type.confidence == 0.0 or classify(head) == "null":
            continue
        if column_type.name != "str":
            votes += -1 if fits(classify(head), column_type.name) else 1
            continue
        lengths = {len(value) for value in below}
        if len(lengths) == 1:
            votes += -1 if len(head) in lengths else 1
    return votes > 0


def sniff(text: str, delimiters: str = DELIMITERS) -> Dialect:
    """Detect the dialect of a CSV sample (the whole text, or its first lines)."""
    if not delimiters or len(set(delimiters)) != len(delimiters):
        raise ValueError("delimiters must be a non-empty string of distinct characters")
    if not text.strip():
        raise SniffError("cannot sniff an empty sample")
    quote = detect_quote(text, delimiters)
    escaped = quote is not None and "\\" + quote in text
    best: tuple[float, int] | None = None
    chosen: Dialect | None = None
    for delimiter in delimiters:
        if delimiter == quote:
            continue
        try:
            candidate = Dialect(
                delimiter=delimiter,
                quotechar=quote or '"',
                escapechar="\\" if escaped else None,
                doublequote=not escaped,
            )
            rows = parse_rows(text, candidate)
        except CsvError:
            continue  # unbalanced quotes, or the delimiter clashes with the quoting
        profile = _width_profile(rows)
        if profile[1] > 1 and (best is None or profile > best):
            best, chosen = profile, candidate
    if chosen is None:
        raise SniffError(f"no delimiter among {delimiters!r} splits the rows consistently")
    total = text.count(chosen.delimiter)
    spaced = text.count(chosen.delimiter + " ")
    chosen = replace(
        chosen,
        skip_initial_space=spaced * 2 > total,
        line_terminator=detect_line_terminator(text),
    )
    rows = [row.fields for row in parse_rows(text, chosen)]
    return replace(chosen, has_header=_detect_header(rows))


@dataclass(frozen=True)
class RowIssue:
    """A data row whose field count differs from the table width."""

    line: int
    expected: int
    actual: int


@dataclass(frozen=True)
class Table:
    dialect: Dialect
    header: list[str] | None
    rows: list[list[str]]
    column_types: list[ColumnType]
    inconsistent: list[RowIssue]

    @property
    def width(self) -> int:
        return len(self.column_types)

    def _index(self, key: int | str) -> int:
        if isinstance(key, str):
            if self.header is None or key not in self.header:
                raise KeyError(f"no column named {key!r}")
            return self.header.index(key)
        if not 0 <= key < self.width:
            raise IndexError(f"column {key} out of range for width {self.width}")
        return key

    def column(self, key: int | str) -> list[str]:
        """Raw values of one column; short rows contribute ``""``."""
        index = self._index(key)
        return [row[index] if index < len(row) else "" for row in self.rows]

    def records(self) -> list[dict[str, str]]:
        if self.header is None:
            raise CsvError("records() needs a header row")
        return [
            {name: row[i] if i < len(row) else "" for i, name in enumerate(self.header)}
            for row in self.rows
        ]

    def typed_rows(self) -> list[list[object]]:
        """Rows converted with the inferred column types (see ``types.convert``)."""
        return [
            [
                convert(row[i] if i < len(row) else "", t.name)
                for i, t in enumerate(self.column_types)
            ]
            for row in self.rows
        ]


def read(text: str, dialect: Dialect | None = None, *, min_share: float = 0.9) -> Table:
    """Parse ``text`` (sniffing the dialect unless given) and profile its columns.

    The table width is the header's length when there is a header, otherwise the most
    common row length; every data row of another length is reported in ``inconsistent``.
    """
    dialect = dialect or sniff(text)
    parsed = parse_rows(text, dialect)
    header: list[str] | None = None
    if dialect.has_header and parsed:
        header, parsed = parsed[0].fields, parsed[1:]
    if header is not None:
        width = len(header)
    elif parsed:
        width = _width_profile(parsed)[1]
    else:
        width = 0
    issues = [RowIssue(r.line, width, len(r.fields)) for r in parsed if len(r.fields) != width]
    rows = [row.fields for row in parsed]
    columns = [[row[i] if i < len(row) else "" for row in rows] for i in range(width)]
    types = [infer_type(column, min_share) for column in columns]
    return Table(dialect, header, rows, types, issues)
